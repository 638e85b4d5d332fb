"""The interface in English or Chinese. Metric names and definitions come from the catalog's own
en/zh labels, column headings the packs also use from pipelines/labels.py; this holds the words of
the interface itself."""
from __future__ import annotations

import streamlit as st

from pipelines.labels import COLUMN_LABELS

LANGUAGES = {"en": "English", "zh": "中文"}

STRINGS: dict[str, dict[str, str]] = {
    "app_title": {"en": "gpupool governance", "zh": "gpupool治理"},
    "language": {"en": "Language", "zh": "语言"},
    "period": {"en": "Period", "zh": "时间段"},
    "all": {"en": "All", "zh": "全部"},
    "signed_in_as": {"en": "Signed in as", "zh": "当前用户"},
    "sign_in": {"en": "Sign in", "zh": "登录"},
    "sign_out": {"en": "Sign out", "zh": "退出"},
    "data_as_of": {"en": "Data as of {at} UTC · release {release}, published {published} UTC",
                   "zh": "数据截至 {at} UTC · 发布版本 {release}，发布于 {published} UTC"},
    "data_stale": {"en": "The data are {age} old: check the ingest on the Data quality page, and that the "
                         "pipeline's sensors and schedules run.",
                   "zh": "数据已滞后 {age}：请在数据质量页检查采集，并确认流水线的传感器和调度在运行。"},
    "no_telemetry_yet": {"en": "No telemetry in this release yet: the pages show no GPU activity.",
                         "zh": "此发布版本尚无遥测数据：页面不显示GPU活动。"},
    "sign_in_sso": {"en": "Sign in with single sign-on", "zh": "使用单点登录"},
    "user": {"en": "User", "zh": "用户名"},
    "password": {"en": "Password", "zh": "密码"},
    "bad_login": {"en": "Unknown user or wrong password.", "zh": "用户不存在或密码错误。"},
    "sign_in_needed": {"en": "Sign in to see the pool.", "zh": "请登录后查看资源池。"},
    "no_users": {
        "en": "No dashboard users are configured: set GPUPOOL_DASHBOARD_USERS or [users] in Streamlit secrets "
              "(docs/dashboards.md), or start it with `gpupool dashboard`.",
        "zh": "尚未配置仪表盘用户：请设置GPUPOOL_DASHBOARD_USERS或Streamlit secrets中的 [users]"
              "（见docs/dashboards.md），或使用 `gpupool dashboard` 启动。"},
    "no_warehouse": {"en": "No warehouse yet", "zh": "还没有数据仓库"},
    "no_data_period": {"en": "No data for this period and these filters.", "zh": "该时间段和筛选条件下没有数据。"},
    "definition": {"en": "Definition", "zh": "定义"},
    "tenant_scope": {"en": "Your tenant only: {tenant}", "zh": "仅限您的租户：{tenant}"},
    "operator_scope": {"en": "Operator: the whole pool", "zh": "运维人员：整个资源池"},
    "scorecard": {"en": "Pooling stages scorecard", "zh": "资源池化阶段评分"},
    # charts (issue 18): titles, axes and what good looks like
    "others": {"en": "others", "zh": "其他"},
    "top_note": {"en": "the {n} largest; the rest summed as \"others\"", "zh": "显示最大的 {n} 项，其余合计为“其他”"},
    "good_lower": {"en": "lower is better", "zh": "越低越好"},
    "good_util": {"en": "target ≥ {pct:.0f} % (scorecard)", "zh": "目标 ≥ {pct:.0f}%（评分标准）"},
    "good_wait": {"en": "target p95 ≤ {minutes:.0f} min (scorecard)", "zh": "目标p95 ≤ {minutes:.0f} 分钟（评分标准）"},
    "good_wait_heat": {"en": "green: within the {minutes:.0f} min target; red: past it",
                       "zh": "绿色：在 {minutes:.0f} 分钟目标内；红色：超出目标"},
    "good_quota": {"en": "white = at quota (100 %); orange: above it (borrowing); blue: below it (unused quota)",
                   "zh": "白色 = 正好用满配额（100%）；橙色：超出（借用）；蓝色：未用满（配额闲置）"},
    "good_score": {"en": "100 = stage reached", "zh": "100 = 达到该阶段"},
    "good_headroom": {"en": "0 = no headroom left", "zh": "0 = 没有余量"},
    "cost_tick_note": {"en": "black tick: the pool's total", "zh": "黑色刻度：资源池总成本"},
    "tenant_model": {"en": "tenant · GPU model", "zh": "租户 · GPU型号"},
    "queue_tenant": {"en": "queue · tenant", "zh": "队列 · 租户"},
    "quota_pct_axis": {"en": "% of quota", "zh": "配额使用率（%）"},
    "ch_by_day_model": {"en": "{what} per day, by GPU model", "zh": "每日{what}（按GPU型号）"},
    "ch_by_day": {"en": "{what} per day, by {by}", "zh": "每日{what}（按{by}）"},
    "ch_per_day": {"en": "{what} per day", "zh": "每日{what}"},
    "ch_by": {"en": "{what}, by {by}", "zh": "{what}（按{by}）"},
    "ch_per_week_model": {"en": "{what} per week, by GPU model", "zh": "每周{what}（按GPU型号）"},
    "ch_scorecard": {"en": "Score per pooling stage, this month", "zh": "本月各资源池化阶段得分"},
    "ch_wait_p95": {"en": "Queue wait p95 per day, by queue · tenant", "zh": "每日排队等待p95（按队列 · 租户）"},
    "ch_wait_p50": {"en": "Queue wait p50 per day, by queue · tenant", "zh": "每日排队等待p50（按队列 · 租户）"},
    "ch_pending": {"en": "Pending GPUs per day, by GPU model", "zh": "每日待调度GPU（按GPU型号）"},
    "ch_interruptions": {"en": "Preemptions and requeues per day", "zh": "每日抢占与重新排队次数"},
    "ch_quota_usage": {"en": "Quota usage per day, by tenant · GPU model", "zh": "每日配额使用率（按租户 · GPU型号）"},
    "ch_quota_fit": {"en": "Where each quota's GPU-hours went, over the period", "zh": "时间段内各配额的GPU小时去向"},
    "ch_costs": {"en": "Cost per month, by tenant", "zh": "每月成本（按租户）"},
    "ch_mix_submissions": {"en": "Share of submissions per day, by template", "zh": "每日提交数占比（按模板）"},
    "ch_mix_hours": {"en": "Share of allocated GPU-hours per day, by template", "zh": "每日已分配GPU小时占比（按模板）"},
    "ch_gov_steps": {"en": "Policy steps per day, by outcome", "zh": "每日策略处置步骤（按结果）"},
    "ch_overrun_steps": {"en": "Overrun policy steps per day, by outcome", "zh": "每日超时策略处置步骤（按结果）"},
    "ch_reclaimed": {"en": "Recovered and reused GPU-hours per day", "zh": "每日回收与再利用的GPU小时"},
    "ch_fail_reasons": {"en": "Failed jobs by reason (top {n})", "zh": "失败作业（按原因，前 {n} 个）"},
    "ch_failed_hours": {"en": "GPU-hours of failed jobs per day, by final state",
                        "zh": "每日失败作业的GPU小时（按最终状态）"},
    "ch_work_lost": {"en": "Work lost at interruptions, by cause", "zh": "中断损失的工作量（按原因）"},
    "ch_artifacts": {"en": "Finished training jobs by what they left, per tenant", "zh": "已完成训练作业的产出（按租户）"},
    "ch_recs": {"en": "Capacity advice by expected impact", "zh": "容量建议（按预期影响）"},
    "ch_headroom_p95": {"en": "p95 allocated and demanded GPUs, by GPU model", "zh": "p95已分配与需求GPU（按GPU型号）"},
    "ch_trend": {"en": "Demand and capacity per week, by GPU model", "zh": "每周需求与容量（按GPU型号）"},
    "ch_host_day": {"en": "{what} per host and day", "zh": "各主机每日{what}"},
    "ch_audit": {"en": "Audit records per day, by category", "zh": "每日审计记录（按类别）"},
    "final_state": {"en": "final state", "zh": "最终状态"},
    "error_kind": {"en": "error kind", "zh": "错误类型"},
    "finding": {"en": "finding", "zh": "发现"},
    "col_quota_less_gpu_hours": {"en": "GPU-hours without a quota", "zh": "无配额的GPU小时"},
    "col_idle_quota_gpu_hours": {"en": "Idle quota GPU-hours", "zh": "闲置配额GPU小时"},
    # pages
    "page_pool": {"en": "Pool overview", "zh": "资源池概览"},
    "page_queues": {"en": "Queues and waiting", "zh": "队列与等待"},
    "page_tenants": {"en": "Tenants and quota", "zh": "租户与配额"},
    "page_idle": {"en": "Idle and reclaim", "zh": "空闲与回收"},
    "page_jobs": {"en": "Jobs", "zh": "作业"},
    "page_capacity": {"en": "Capacity", "zh": "容量"},
    "page_quality": {"en": "Data quality and freshness", "zh": "数据质量与新鲜度"},
    "page_audit": {"en": "Audit", "zh": "审计"},
    "page_catalog": {"en": "Metric catalog", "zh": "指标目录"},
    "page_packs": {"en": "Review packs", "zh": "月度评审报告"},
    "no_packs": {"en": "No review pack yet: run `gpupool pack --month YYYY-MM` (or the review_pack asset).",
                 "zh": "还没有月度评审报告：请运行 `gpupool pack --month YYYY-MM`（或review_pack资产）。"},
    # idle, jobs and capacity pages
    "idle_now": {"en": "Idle now", "zh": "当前空闲"},
    "idle_none_now": {"en": "No allocation is idle at the data's end for these filters.",
                      "zh": "在数据截止时，该筛选条件下没有空闲的分配。"},
    "idle_now_caption": {"en": "{n} allocations idle at the data's end, with the evidence window and the policy "
                               "thresholds applied (metrics.idle_allocations, is_ongoing).",
                         "zh": "数据截止时有 {n} 个分配处于空闲，附证据窗口和所用的策略阈值"
                               "（metrics.idle_allocations，is_ongoing）。"},
    "idle_windows_largest": {"en": "The period's largest idle windows (up to {n})", "zh": "该时间段内最大的空闲窗口（最多 {n} 个）"},
    "governance_steps": {"en": "Policy findings: steps by outcome", "zh": "策略发现：按结果统计的处置步骤"},
    "no_governance": {"en": "No governance steps in this period: the policies found nothing, or the governance "
                            "tick has not run (no decision log).",
                      "zh": "该时间段内没有治理步骤：策略未发现问题，或治理任务尚未运行（没有决策日志）。"},
    "steps_axis": {"en": "steps (actions)", "zh": "步骤（次）"},
    "enforcement_actions": {"en": "Enforcement actions", "zh": "执行动作"},
    "latest_rows": {"en": "The latest {n} rows.", "zh": "最近的 {n} 行。"},
    "reclaim_ledger": {"en": "Reclaim ledger", "zh": "回收台账"},
    "ledger_window": {"en": "Whole loaded window {first} … {last}, tenant {tenant} (metrics.governance_period).",
                      "zh": "整个已加载窗口 {first} … {last}，租户 {tenant}（metrics.governance_period）。"},
    "ledger_counts": {"en": "{reclaims} reclaims and preemptions applied, {fp} false positives; {reminders} reminders, "
                            "{released} released by their users within the grace.",
                      "zh": "已执行 {reclaims} 次回收和抢占，{fp} 次误判；{reminders} 次提醒，"
                            "其中 {released} 次用户在宽限期内自行释放。"},
    "no_reclaims": {"en": "No reclaim or preemption was applied in this period.", "zh": "该时间段内没有执行回收或抢占。"},
    "ledger_rows": {"en": "Ledger rows (latest {n})", "zh": "台账明细（最近 {n} 行）"},
    "exemptions": {"en": "Exemptions", "zh": "豁免"},
    "exemptions_source": {"en": "The policy catalog's exemptions file (models/policies/exemptions.yml or "
                                "gpupool.yml governance.exemptions) as the last model build loaded it "
                                "(governance.policy_exemptions); expiry read against the clock.",
                          "zh": "策略目录的豁免文件（models/policies/exemptions.yml或gpupool.yml的"
                                "governance.exemptions），为最近一次模型构建所加载的内容（governance.policy_exemptions）；"
                                "是否过期按当前时间判断。"},
    "exemptions_unreadable": {"en": "The exemptions file could not be read at the last build; the exemptions "
                                    "loaded before are shown:",
                              "zh": "最近一次构建时无法读取豁免文件；下面显示的是此前加载的豁免："},
    "no_exemptions": {"en": "No exemptions are configured for this scope.", "zh": "该范围内没有配置豁免。"},
    "expired": {"en": "Expired", "zh": "已过期"},
    "days_left": {"en": "Days left", "zh": "剩余天数"},
    "jobs_window": {"en": "Whole loaded window, the pool (metrics.job_period).", "zh": "整个已加载窗口，全资源池（metrics.job_period）。"},
    "failures_by_reason": {"en": "Failures by reason", "zh": "按原因统计的失败"},
    "no_failures": {"en": "No failed jobs in this period and these filters.", "zh": "该时间段和筛选条件下没有失败的作业。"},
    "top_reasons": {"en": "The {n} most frequent reasons.", "zh": "最常见的 {n} 个原因。"},
    "failed_gpu_hours": {"en": "GPU-hours allocated to the failed jobs, by final state",
                         "zh": "失败作业占用的GPU小时（按最终状态）"},
    "retry_jobs": {"en": "Jobs whose retries burned the most GPU-hours (up to {n})", "zh": "重试消耗GPU小时最多的作业（最多 {n} 个）"},
    "past_declared_time": {"en": "Jobs past their declared time", "zh": "超出声明时长的作业"},
    "overrun_steps": {"en": "Overrun policy steps by outcome", "zh": "超时策略的处置步骤（按结果）"},
    "no_overruns": {"en": "No job ran past its declared run time in this period.", "zh": "该时间段内没有作业超出声明的运行时长。"},
    "overrun_caption": {"en": "{n} jobs (latest submitted first) whose run time passed their declared expected run "
                              "time (else their time limit).",
                        "zh": "{n} 个作业（按提交时间倒序）的运行时长超过了声明的预期运行时长（否则为时间上限）。"},
    "oversized_requests": {"en": "Oversized requests", "zh": "申请过大的请求"},
    "pool_level_only": {"en": "Pool level per GPU model and request shape (metrics.spec_gaps has no tenant).",
                        "zh": "按GPU型号和请求规格的资源池级数据（metrics.spec_gaps不含租户）。"},
    "recommendations": {"en": "Recommendations", "zh": "建议"},
    "no_recommendations": {"en": "No capacity recommendations yet: run `gpupool recommend` (or the capacity asset).",
                           "zh": "还没有容量建议：请运行 `gpupool recommend`（或容量资产）。"},
    "wait_cause": {"en": "Wait cause", "zh": "等待原因"},
    "evidence": {"en": "Evidence", "zh": "证据"},
    "whatif": {"en": "What-if replay (predicted)", "zh": "假设回放（预测）"},
    "not_replayed": {"en": "Not replayed by the what-if (only the top recommendations are).",
                     "zh": "未经假设回放验证（只有排名靠前的建议会回放）。"},
    "smallest_change": {"en": "Smallest sufficient change (replayed curve)", "zh": "足够的最小变更（回放曲线）"},
    "no_sufficient_change": {"en": "none: the advised change itself is not sufficient",
                             "zh": "无：建议的变更本身也不够"},
    "headroom": {"en": "Headroom", "zh": "余量"},
    "no_headroom": {"en": "No headroom figures: the warehouse has no hourly pool data yet.",
                    "zh": "没有余量数据：数据仓库中还没有每小时的资源池数据。"},
    "headroom_window": {"en": "Whole loaded window {start} … {end} ({hours} h), metrics.capacity_headroom.",
                        "zh": "整个已加载窗口 {start} … {end}（{hours} 小时），metrics.capacity_headroom。"},
    "per_week": {"en": "per trailing week", "zh": "按滚动周"},
    "queue_headroom": {"en": "Queues against their quota", "zh": "各队列相对配额的余量"},
    "trend": {"en": "Weekly trend and forecast", "zh": "每周趋势与预测"},
    "no_trend": {"en": "No complete week of data yet: the weekly trend needs whole weeks.", "zh": "还没有完整一周的数据：每周趋势需要完整的周。"},
    "allocated": {"en": "allocated", "zh": "已分配"},
    "demand": {"en": "demand", "zh": "需求"},
    "observed": {"en": "observed", "zh": "观测"},
    "trend_line": {"en": "trend", "zh": "趋势"},
    "week_axis": {"en": "week (start, UTC)", "zh": "周（起始，UTC）"},
    "gpu_hours_per_week": {"en": "GPU-hours per week", "zh": "每周GPU小时"},
    "capacity_gpus": {"en": "capacity (GPUs)", "zh": "容量（GPU数）"},
    "peak_allocated_gpus": {"en": "peak held (GPUs)", "zh": "峰值占用（GPU数）"},
    "trend_caption": {"en": "Least-squares lines over the complete weeks (trend_weeks_used; a partial week is not "
                            "drawn); read each with its r2. Dashed: the line, extended 4 weeks ahead.",
                      "zh": "基于完整周（trend_weeks_used，不完整的周不绘制）的最小二乘直线；请结合r2解读。"
                            "虚线为趋势线，并向后延伸 4 周。"},
    # quality, audit, catalog pages
    "q_freshness": {"en": "Last ingest per source", "zh": "各数据源最近一次摄取"},
    "q_no_ingest": {"en": "Nothing has been ingested yet: run `gpupool demo`, `gpupool ingest` or the Dagster ingest "
                          "assets.", "zh": "尚未摄取任何数据：请运行 `gpupool demo`、`gpupool ingest` 或Dagster摄取资产。"},
    "q_loaded": {"en": "Records loaded and quarantined per day", "zh": "每日加载与隔离的记录数"},
    "q_quarantine": {"en": "Quarantined records by reason", "zh": "按原因的隔离记录"},
    "q_no_quarantine": {"en": "No record was quarantined in this period: every record read was loaded.",
                        "zh": "该时间段内没有记录被隔离：读取的记录全部加载。"},
    "q_checks": {"en": "Asset checks", "zh": "资产检查"},
    "q_no_checks": {"en": "No asset check has run for this period (checks run with the Dagster ingest assets).",
                    "zh": "该时间段内没有运行资产检查（检查随Dagster摄取资产运行）。"},
    "q_checks_failed": {"en": "Failed checks", "zh": "未通过的检查"},
    "q_checks_run": {"en": "Check results", "zh": "检查结果"},
    "q_all_passed": {"en": "Every check in this period passed.", "zh": "该时间段内所有检查均通过。"},
    "q_gaps": {"en": "Telemetry gaps (scrapes)", "zh": "遥测缺口（采集）"},
    "q_no_gaps": {"en": "No scrape gaps recorded: either no dcgm-exporter targets are scraped (telemetry comes from "
                        "files; `dcgm` targets in gpupool.yml), or every scrape in this period succeeded.",
                  "zh": "没有记录到采集缺口：可能未配置dcgm-exporter采集目标（遥测来自文件；见gpupool.yml中的 `dcgm` "
                        "目标），或该时间段内的采集全部成功。"},
    "q_reconciliation": {"en": "Allocations vs telemetry", "zh": "分配与遥测对账"},
    "q_no_findings": {"en": "Telemetry and the schedulers agree in this period: no finding.",
                      "zh": "该时间段内遥测与调度器一致：没有差异。"},
    "q_own_findings": {"en": "Findings on your tenant's allocations", "zh": "您租户分配的差异"},
    "records": {"en": "records", "zh": "记录数"},
    "gaps_unit": {"en": "gaps", "zh": "缺口数"},
    "gpu_hours_unit": {"en": "GPU-hours", "zh": "GPU小时"},
    "showing_rows": {"en": "Showing {shown:,} of {total:,} rows.", "zh": "显示 {total:,} 行中的 {shown:,} 行。"},
    "a_search": {"en": "Search actor, action, object, reason", "zh": "搜索操作者、操作、对象、原因"},
    "a_counts": {"en": "Audit records per day", "zh": "每日审计记录"},
    "a_records": {"en": "Audit records", "zh": "审计记录"},
    "a_no_records": {"en": "No audit record matches this period and search.", "zh": "没有符合该时间段和搜索条件的审计记录。"},
    "a_no_audit": {"en": "No audit source is loaded (allocator audit log or Kubernetes audit webhook; docs/connectors.md).",
                   "zh": "尚未加载审计数据源（分配器审计日志或Kubernetes审计webhook；见docs/connectors.md）。"},
    "a_detail": {"en": "Select a row to see the state before and after.", "zh": "选择一行查看变更前后的状态。"},
    "a_before": {"en": "Before", "zh": "变更前"},
    "a_after": {"en": "After", "zh": "变更后"},
    "a_scope": {"en": "Records on your tenant's objects only.", "zh": "仅显示与您租户对象相关的记录。"},
    "cat_permission_change": {"en": "Permission changes", "zh": "权限变更"},
    "cat_quota_change": {"en": "Quota changes", "zh": "配额变更"},
    "cat_approval": {"en": "Approvals", "zh": "审批"},
    "cat_enforcement": {"en": "Enforcement", "zh": "执行措施"},
    "cat_queue_change": {"en": "Queue changes", "zh": "队列变更"},
    "cat_other_change": {"en": "Other changes", "zh": "其他变更"},
    "cat_read": {"en": "Reads", "zh": "读取"},
    "cat_other": {"en": "Other", "zh": "其他"},
    "c_search": {"en": "Search name, label, definition, formula, view", "zh": "搜索名称、标签、定义、公式、视图"},
    "c_group": {"en": "Group", "zh": "分组"},
    "c_version": {"en": "Catalog version {version} · {count} metrics", "zh": "目录版本 {version} · {count} 个指标"},
    "c_no_match": {"en": "No metric matches this search.", "zh": "没有符合搜索条件的指标。"},
    "c_no_catalog": {"en": "The catalog is not built yet: run `gpupool build`.", "zh": "指标目录尚未构建：请运行 `gpupool build`。"},
    "c_detail": {"en": "Definition of a metric", "zh": "指标定义"},
    "group_resource": {"en": "Resource", "zh": "资源"},
    "group_task": {"en": "Task", "zh": "任务"},
    "group_governance": {"en": "Governance", "zh": "治理"},
    "col_metric": {"en": "Metric", "zh": "指标"},
    "col_label_en": {"en": "English", "zh": "英文"},
    "col_label_zh": {"en": "Chinese", "zh": "中文"},
    "col_grain": {"en": "Grain", "zh": "粒度"},
    "col_type": {"en": "Type", "zh": "类型"},
    "col_where": {"en": "View.column", "zh": "视图.列"},
    "col_formula": {"en": "Formula", "zh": "公式"},
    "col_description": {"en": "Definition", "zh": "定义"},
    "col_version": {"en": "Version", "zh": "版本"},
    "col_sources": {"en": "Source fields", "zh": "来源字段"},
    "col_also_in": {"en": "Also in", "zh": "同见于"},
    # pool, queues and tenants pages
    "gpus": {"en": "GPUs", "zh": "GPU"},
    "gpus_caption": {"en": "{n} GPUs, MIG instances and time-sliced shares as of {as_of} (metrics.gpu_status); "
                           "activity and memory of their latest telemetry minute.",
                     "zh": "截至 {as_of} 的 {n} 个GPU、MIG实例和时间切片份额（metrics.gpu_status）；"
                           "活跃度和显存取自最近一分钟的遥测。"},
    "no_gpus": {"en": "No GPU in the inventory for this model: load an inventory snapshot (gpupool ingest).",
                "zh": "该型号在资源清单中没有GPU：请先加载资源清单快照（gpupool ingest）。"},
    "pool_window_caption": {"en": "Whole loaded window {first} … {last}, GPU model {model} (metrics.pool_period).",
                            "zh": "整个已加载窗口 {first} … {last}，GPU型号 {model}（metrics.pool_period）。"},
    "no_scorecard": {"en": "No scorecard yet: the warehouse has no pool data, or its models predate catalog 1.3.0 "
                           "(run `gpupool build`).",
                     "zh": "还没有评分：数据仓库中没有资源池数据，或其模型早于指标目录 1.3.0（请运行 `gpupool build`）。"},
    "scorecard_caption": {"en": "The month of {first} … {last}. Each input is scored 0–100 between two "
                                "stated thresholds; a stage's score is the mean (metrics.pooling_scorecard).",
                          "zh": "{first} … {last} 所在月份。每项输入按两个给定阈值折算为 0–100 分；"
                                "阶段得分为其平均值（metrics.pooling_scorecard）。"},
    "stage_project_owned": {"en": "Project-owned: visibility", "zh": "项目独占：可见性"},
    "stage_shared_queues": {"en": "Shared queues: clear rules", "zh": "共享队列：规则清晰"},
    "stage_elastic_sharing": {"en": "Elastic sharing: utilisation", "zh": "弹性共享：利用率"},
    "stage_resource_operations": {"en": "Resource operations: decisions from data", "zh": "资源运营：数据驱动决策"},
    "score_axis": {"en": "score (0–100)", "zh": "得分（0–100）"},
    "input": {"en": "Input", "zh": "输入"},
    "value": {"en": "Value", "zh": "数值"},
    "rule": {"en": "Rule", "zh": "规则"},
    "no_data_yet": {"en": "No data yet: the warehouse has no pool days. Run `gpupool demo` or ingest a source.",
                    "zh": "还没有数据：数据仓库中没有资源池日期。请运行 `gpupool demo` 或接入数据源。"},
    "queues_headline_caption": {"en": "Wait percentiles (jobs that started) and, beside them, jobs still waiting "
                                      "at the data's end and jobs cancelled while queued: the pool's jobs over the "
                                      "whole loaded window (metrics.job_period). Preemptions and requeues: the "
                                      "period and filters (metrics.queue_daily).",
                                "zh": "等待时间分位数（已启动的作业），以及旁边在数据截止时仍在等待的作业和排队中取消的作业："
                                      "整个已加载窗口内全资源池的作业（metrics.job_period）。"
                                      "抢占和重新排队：所选时间段和筛选条件（metrics.queue_daily）。"},
    "wait_per_queue": {"en": "Queue wait per queue", "zh": "各队列的排队等待时间"},
    "no_waits": {"en": "No job started in this period and these filters, so there is no wait to show.",
                 "zh": "该时间段和筛选条件下没有作业启动，因此没有等待时间可显示。"},
    "wait_axis_min": {"en": "queue wait (min)", "zh": "排队等待（分钟）"},
    "waiting_work": {"en": "Waiting work: jobs still waiting at each day's end and jobs cancelled while queued, "
                           "with their pending age (minutes)",
                     "zh": "等待中的工作：每天结束时仍在等待的作业和排队中取消的作业，及其等待时长（分钟）"},
    "no_waiting_work": {"en": "No job was waiting or cancelled while queued in this period and these filters.",
                        "zh": "该时间段和筛选条件下没有等待中或排队中取消的作业。"},
    "pending_by_model": {"en": "Pending demand by GPU model", "zh": "按GPU型号的待调度需求"},
    "no_pending": {"en": "Nothing waited for a GPU in this period: no pending demand.",
                   "zh": "该时间段内没有等待GPU的请求：没有待调度需求。"},
    "pending_axis": {"en": "pending GPUs (daily mean)", "zh": "待调度GPU（日均）"},
    "spec_gaps_largest": {"en": "Spec gaps: demand the free GPUs could not serve at the peak hour (largest {n})",
                          "zh": "规格缺口：高峰小时空闲GPU无法满足的需求（最大的 {n} 个）"},
    "no_spec_gaps": {"en": "No spec gap: at each day's peak hour the asked model and shape had enough free GPUs.",
                     "zh": "没有规格缺口：每天高峰小时所需型号和规格的空闲GPU都足够。"},
    "wait_by_cause": {"en": "Waiting by cause", "zh": "按原因的等待"},
    "no_wait_causes": {"en": "No waiting in this period and these filters (metrics.wait_causes, from the capacity "
                             "analysis of free GPUs).",
                       "zh": "该时间段和筛选条件下没有等待（metrics.wait_causes，来自空闲GPU的容量分析）。"},
    "preemptions_requeues": {"en": "Preemptions and requeues", "zh": "抢占与重新排队"},
    "no_interruptions": {"en": "No attempt was preempted or requeued in this period and these filters.",
                         "zh": "该时间段和筛选条件下没有被抢占或重新排队的尝试。"},
    "quota_usage": {"en": "Usage against quota", "zh": "配额使用"},
    "no_quota": {"en": "No quota in this period and these filters: no queue snapshot names a quota for them.",
                 "zh": "该时间段和筛选条件下没有配额：队列快照中没有为其设置配额。"},
    "quota_fit": {"en": "Quota held, used, borrowed and idle", "zh": "配额的持有、使用、借用与闲置"},
    "quota_fit_caption": {"en": "Whole loaded window, per queue owner (metrics.quota_fit): in quota + idle quota = "
                                "quota GPU-hours; borrowed and quota-less GPU-hours ran above it.",
                          "zh": "整个已加载窗口，按队列所有者（metrics.quota_fit）：配额内 + 闲置配额 = 配额GPU小时；"
                                "借用和无配额的GPU小时超出配额运行。"},
    "cost_attribution": {"en": "Cost attribution", "zh": "成本分摊"},
    "no_costs": {"en": "No cost for this period: no month of capacity is loaded.",
                 "zh": "该时间段没有成本：没有加载任何月份的容量数据。"},
    "no_costs_tenant": {"en": "This tenant had no cost in this period.", "zh": "该租户在此时间段内没有成本。"},
    "cost_caption_operator": {"en": "Each month's bar stacks the tenants' total cost (allocated + their share of the "
                                    "unallocated); it reaches the pool's total cost (black tick) exactly.",
                              "zh": "每月柱形叠加各租户的总成本（已分配成本 + 分摊的未分配成本），恰好等于资源池总成本（黑色刻度）。"},
    "cost_caption_scoped": {"en": "The bar is this tenant's total cost; the black tick is the pool's total cost "
                                  "that all tenants' costs add up to.",
                            "zh": "柱形为该租户的总成本；黑色刻度为所有租户成本之和，即资源池总成本。"},
    "task_mix": {"en": "Task-type mix", "zh": "任务类型构成"},
    "no_jobs": {"en": "No job was submitted or ran in this period.", "zh": "该时间段内没有提交或运行的作业。"},
    "pool": {"en": "Pool", "zh": "资源池"},
    "submissions_share": {"en": "share of submissions", "zh": "提交数占比"},
    "gpu_hours_share": {"en": "share of allocated GPU-hours", "zh": "已分配GPU小时占比"},
    # health and failures page
    "page_health": {"en": "Health and failures", "zh": "健康与故障"},
    "h_causes": {"en": "Why attempts ended: failures by cause", "zh": "尝试结束原因：按原因的失败"},
    "h_causes_caption": {"en": "Every ended attempt has one cause, with its evidence (metrics.failure_causes, "
                               "monthly: the months the period touches, {first} … {last}).",
                         "zh": "每个结束的尝试都有一个原因及其证据（metrics.failure_causes，按月："
                               "所选时间段涉及的月份，{first} … {last}）。"},
    "h_no_attempts": {"en": "No attempt ended in these months and filters.",
                      "zh": "这些月份和筛选条件下没有结束的尝试。"},
    "h_no_failures": {"en": "No attempt failed in these months and filters.",
                      "zh": "这些月份和筛选条件下没有失败的尝试。"},
    "h_per_tenant": {"en": "Per tenant and month (the view's rows)", "zh": "按租户和月份（视图原始行）"},
    "h_not_user_fault_tenant": {"en": "Failures not the user's fault, per tenant", "zh": "各租户非用户原因失败占比"},
    "h_bad_gpus": {"en": "Bad GPUs: hardware faults and repeat offenders", "zh": "故障GPU：硬件故障与反复故障"},
    "h_bad_gpus_caption": {"en": "Whole loaded window (metrics.gpu_faults). A repeat offender had at least two "
                                 "hardware-fault minutes within 30 days; application XIDs (13, 31, 43, 45: raised "
                                 "by user code) are counted apart and are not faults.",
                           "zh": "整个已加载窗口（metrics.gpu_faults）。反复故障GPU：30 天内至少两个出现硬件故障的分钟；"
                                 "应用类XID（13、31、43、45：由用户代码引发）单独计数，不算故障。"},
    "h_gpus_with_faults": {"en": "GPUs with a hardware fault", "zh": "出现硬件故障的GPU"},
    "h_repeat_gpus": {"en": "Repeat-offender GPUs", "zh": "反复故障GPU"},
    "h_repeat_nodes": {"en": "Repeat-offender nodes", "zh": "反复故障节点"},
    "h_fault_history": {"en": "Fault history per GPU (every GPU with a health signal)",
                        "zh": "各GPU的故障历史（所有出现健康信号的GPU）"},
    "h_no_health": {"en": "No GPU health signal in the loaded window (no XID, ECC, row-remap, throttle, NVLink or "
                          "PCIe event in the DCGM telemetry).",
                    "zh": "已加载窗口内没有GPU健康信号（DCGM遥测中没有XID、ECC、行重映射、降频、NVLink或PCIe事件）。"},
    "h_mtbf": {"en": "Mean time between hardware faults per GPU model", "zh": "各GPU型号的平均硬件故障间隔"},
    "h_mtbf_caption": {"en": "Whole loaded window (metrics.gpu_model_reliability): observed GPU-hours over "
                             "hardware-fault minutes. A model without a fault has no MTBF yet (n/a).",
                       "zh": "整个已加载窗口（metrics.gpu_model_reliability）：观测GPU小时除以硬件故障分钟数。"
                             "没有故障的型号尚无平均故障间隔（n/a）。"},
    "h_hosts": {"en": "Hosts: CPU, memory, network and storage", "zh": "主机：CPU、内存、网络与存储"},
    "h_hosts_caption": {"en": "Per day and host from node_exporter (metrics.host_daily): the {shown} of {total} "
                              "hosts with the highest daily value of the chosen measure.",
                        "zh": "按天和主机，来自node_exporter（metrics.host_daily）：所选指标日值最高的 {shown} 台主机"
                              "（共 {total} 台）。"},
    "h_measure": {"en": "Measure", "zh": "指标"},
    "h_no_hosts": {"en": "No host metrics in this period: node_exporter is not scraped or loaded "
                         "(docs/connectors.md).",
                   "zh": "该时间段内没有主机指标：未采集或未加载node_exporter（见docs/connectors.md）。"},
    "h_host_rows": {"en": "Host metrics per day (the view's rows)", "zh": "每日主机指标（视图原始行）"},
    "h_drains": {"en": "Drains and undrains", "zh": "排空与解除排空"},
    "h_drains_caption": {"en": "GPUs and nodes the gpu-health policy drains for repeated hardware faults, and "
                               "undrains once healthy (metrics.drain_decisions). In shadow mode, the policy's "
                               "first rollout, a decision is logged and nothing is sent: it shows what the "
                               "policy would have done.",
                         "zh": "gpu-health策略因反复硬件故障而排空、恢复健康后解除排空的GPU和节点"
                               "（metrics.drain_decisions）。影子模式（策略上线的第一阶段）只记录决定、不下发："
                               "显示的是策略本会执行的操作。"},
    "h_shadow_drains": {"en": "Drains in shadow (would drain)", "zh": "影子模式排空（本会排空）"},
    "h_shadow_drains_help": {"en": "Drains decided while the policy is in shadow mode: logged, never sent to an engine.",
                             "zh": "策略处于影子模式时决定的排空：只记录，从不下发到执行引擎。"},
    "h_drain_shadow": {"en": "would drain (shadow)", "zh": "本会排空（影子模式）"},
    "h_undrain_shadow": {"en": "would undrain (shadow)", "zh": "本会解除排空（影子模式）"},
    "h_drain_enforce": {"en": "drain", "zh": "排空"},
    "h_undrain_enforce": {"en": "undrain", "zh": "解除排空"},
    "h_no_drain_decisions": {"en": "The gpu-health policy decided no drain or undrain in this period.",
                             "zh": "该时间段内gpu-health策略没有做出排空或解除排空决定。"},
    "h_drains_audited": {"en": "Drains and undrains the engines audited (metrics.enforcement_actions; also the "
                               "node health checker's)",
                         "zh": "执行引擎审计的排空与解除排空（metrics.enforcement_actions；含节点健康检查器的操作）"},
    "h_no_drains": {"en": "No drain or undrain was audited in this period.",
                    "zh": "该时间段内没有审计到排空或解除排空操作。"},
    "day_axis": {"en": "day (UTC)", "zh": "日期（UTC）"},
    "col_hardware_faults_last_30d": {"en": "Hardware faults, last 30 days", "zh": "近 30 天硬件故障"},
    "col_hardware_xids": {"en": "Hardware XIDs", "zh": "硬件类XID"},
    "col_application_xids": {"en": "Application XIDs (user code)", "zh": "应用类XID（用户代码）"},
    "col_ecc_sbe_errors": {"en": "ECC single-bit errors", "zh": "ECC单比特错误"},
    "col_warning_minutes": {"en": "Warning minutes (throttle, NVLink, PCIe)", "zh": "告警分钟数（降频、NVLink、PCIe）"},
    "col_gpus": {"en": "GPUs", "zh": "GPU数"},
    "col_observed_gpu_hours": {"en": "Observed GPU-hours", "zh": "观测GPU小时"},
    "col_hardware_faults": {"en": "Hardware faults", "zh": "硬件故障次数"},
    "col_gpus_with_faults": {"en": "GPUs with a hardware fault", "zh": "出现硬件故障的GPU"},
    "col_memory_total_bytes": {"en": "Memory (bytes)", "zh": "内存总量（字节）"},
    "col_minutes_with_data": {"en": "Minutes with data", "zh": "有数据的分钟数"},
    # jobs page: checkpoints and artifacts
    "checkpoints": {"en": "Checkpoints: policy breaches and work lost", "zh": "检查点：策略违反与损失的工作量"},
    "monthly_views": {"en": "Monthly figures: the months the period touches, per tenant (queue and GPU model do not "
                            "apply).",
                      "zh": "按月统计：所选时间段涉及的月份，按租户（不按队列和GPU型号筛选）。"},
    "breach_offenders": {"en": "Tenants breaking their declared checkpoint policy, most breaches first",
                         "zh": "违反所声明检查点策略的租户（按违反次数排序）"},
    "no_breaches": {"en": "No training attempt broke its checkpoint policy in these months.",
                    "zh": "这些月份内没有训练尝试违反其检查点策略。"},
    "work_lost_by_cause": {"en": "Work lost at preemptions, reclaims and failures, by cause",
                           "zh": "抢占、回收和失败造成的工作量损失（按原因）"},
    "no_work_lost": {"en": "No attempt was interrupted or failed in these months.",
                     "zh": "这些月份内没有被中断或失败的尝试。"},
    "with_checkpoint": {"en": "since the last checkpoint", "zh": "自上次检查点起"},
    "without_checkpoint": {"en": "no checkpoint: since the start", "zh": "无检查点：自开始起"},
    "no_artifacts": {"en": "No training job finished in these months.", "zh": "这些月份内没有完成的训练作业。"},
    "artifact_caption": {"en": "Finished training jobs per tenant by what they left: a registered model version, a "
                               "logged artifact only, or nothing (checkpoints alone are not a final artifact).",
                         "zh": "各租户已完成的训练作业按产出分类：已注册模型版本、仅记录了产物、或没有产物"
                               "（仅有检查点不算最终产物）。"},
    "artifact_registered": {"en": "Registered model", "zh": "已注册模型"},
    "artifact_logged_only": {"en": "Logged artifact only", "zh": "仅记录产物"},
    "artifact_none": {"en": "No artifact", "zh": "无产物"},
    "stalest_checkpoints": {"en": "Running training jobs with the stalest checkpoint",
                            "zh": "检查点最陈旧的运行中训练作业"},
    "no_running_training": {"en": "No training job is running at the data's end for these filters.",
                            "zh": "数据截止时，该筛选条件下没有运行中的训练作业。"},
    "stalest_caption": {"en": "{n} training attempts running at the data's end, oldest checkpoint first (each "
                              "attempt's latest row of metrics.checkpoint_age).",
                        "zh": "数据截止时运行中的 {n} 个训练尝试，按检查点由旧到新排序"
                              "（各尝试在metrics.checkpoint_age中的最新一行）。"},
    "no_checkpoint_yet": {"en": "none yet", "zh": "尚无"},
    "col_attempt": {"en": "Attempt", "zh": "尝试"},
    "col_checkpoint_policy": {"en": "Declared checkpoint policy", "zh": "声明的检查点策略"},
    "col_last_ok_checkpoint_at": {"en": "Last checkpoint (UTC)", "zh": "最近检查点（UTC）"},
    "col_is_checkpoint_overdue": {"en": "Overdue", "zh": "已超期"},
    # audit page: the schedulers' admin changes
    "a_scheduler": {"en": "Scheduler admin changes (Slurm accounts, users, associations, QOS; Kueue quotas)",
                    "zh": "调度器管理变更（Slurm账户、用户、关联、QOS；Kueue配额）"},
    "a_scheduler_caption": {"en": "Slurm's sacctmgr transactions and Kubernetes audit records of Kueue ClusterQueues "
                                  "and ResourceFlavors: who changed what, and the values set.",
                            "zh": "Slurm的sacctmgr事务记录，以及Kueue ClusterQueue和ResourceFlavor的Kubernetes"
                                  "审计记录：谁修改了什么，以及设置的值。"},
    "a_no_scheduler": {"en": "No Slurm admin transaction or Kueue quota change in this period (sources: "
                             "slurm_sacctmgr, k8s_audit; docs/connectors.md).",
                       "zh": "该时间段内没有Slurm管理事务或Kueue配额变更（数据源：slurm_sacctmgr、k8s_audit；"
                             "见docs/connectors.md）。"},
    "col_occurred_at": {"en": "Time (UTC)", "zh": "时间（UTC）"},
    "col_object_kind": {"en": "Object kind", "zh": "对象类型"},
    "col_object_namespace": {"en": "Namespace / account", "zh": "命名空间/账户"},
    "col_object_name": {"en": "Object", "zh": "对象"},
    "col_changed": {"en": "What changed", "zh": "变更内容"},
    "col_audit_id": {"en": "Audit id", "zh": "审计ID"},
    "cause_all": {"en": "All ended attempts", "zh": "全部结束的尝试"},
    "cause_completed": {"en": "Completed", "zh": "完成"},
    "cause_cancelled": {"en": "Cancelled", "zh": "取消"},
    "cause_hardware": {"en": "Hardware fault", "zh": "硬件故障"},
    "cause_preempted": {"en": "Preempted", "zh": "被抢占"},
    "cause_reclaimed": {"en": "Reclaimed by policy", "zh": "被策略回收"},
    "cause_capped": {"en": "Capped by policy", "zh": "被策略限时"},
    "cause_time_limit": {"en": "Time limit", "zh": "超出时限"},
    "cause_out_of_memory": {"en": "Out of memory", "zh": "内存不足"},
    "cause_user_code": {"en": "User code", "zh": "用户代码"},
    "cause_unknown": {"en": "Unknown", "zh": "未知"},
    "pack_pool": {"en": "pool", "zh": "资源池"},
    "pack_saving": {"en": "Saving {name}… (not saved? click here)", "zh": "正在保存 {name}……（未保存？点此）"},
    "pack_too_large": {"en": "Ask an operator for the file: its place on the server is shown on this page to operators.",
                       "zh": "请向运维人员索取该文件：运维人员在本页可以看到它在服务器上的位置。"},
    "no_tenant_packs": {"en": "No review pack for {tenant} yet: the monthly schedule builds one per tenant "
                               "(`gpupool pack --month YYYY-MM --tenant {tenant}`).",
                        "zh": "还没有 {tenant} 的月度评审报告：月度调度会为每个租户生成一份"
                              "（`gpupool pack --month YYYY-MM --tenant {tenant}`）。"},
}


def lang() -> str:
    value = st.query_params.get("lang", "en")
    return value if value in LANGUAGES else "en"


def t(key: str, **fields: object) -> str:
    """The interface word in the chosen language (the key itself when missing, so a gap shows); a column
    heading (`col_<column>`, or the column's own name) the packs share comes from pipelines/labels.py."""
    words = STRINGS.get(key) or COLUMN_LABELS.get(key.removeprefix("col_"), {})
    text = words.get(lang()) or words.get("en") or key
    return text.format(**fields) if fields else text


def column_word(column: str) -> str:
    """A column's label from pipelines/labels.py as a word on an axis or inside a sentence: lower case in
    English ("by tenant")."""
    text = t(column)
    return text[:1].lower() + text[1:] if lang() == "en" else text


def label(entry: dict | None, fallback: str) -> str:
    """A catalog entry's label in the chosen language."""
    if not entry:
        return fallback
    return entry.get("label_zh" if lang() == "zh" else "label_en") or fallback
