"""The interface in English or Chinese. Metric names and definitions come from the catalog's own
en/zh labels; this holds the words of the interface itself."""
from __future__ import annotations

import streamlit as st

LANGUAGES = {"en": "English", "zh": "中文"}

STRINGS: dict[str, dict[str, str]] = {
    "app_title": {"en": "gpupool governance", "zh": "gpupool 治理"},
    "language": {"en": "Language", "zh": "语言"},
    "period": {"en": "Period", "zh": "时间段"},
    "tenant": {"en": "Tenant", "zh": "租户"},
    "queue": {"en": "Queue", "zh": "队列"},
    "gpu_model": {"en": "GPU model", "zh": "GPU 型号"},
    "all": {"en": "All", "zh": "全部"},
    "signed_in_as": {"en": "Signed in as", "zh": "当前用户"},
    "sign_in": {"en": "Sign in", "zh": "登录"},
    "sign_out": {"en": "Sign out", "zh": "退出"},
    "user": {"en": "User", "zh": "用户名"},
    "password": {"en": "Password", "zh": "密码"},
    "bad_login": {"en": "Unknown user or wrong password.", "zh": "用户不存在或密码错误。"},
    "sign_in_needed": {"en": "Sign in to see the pool.", "zh": "请登录后查看资源池。"},
    "no_users": {
        "en": "No dashboard users are configured: set GPUPOOL_DASHBOARD_USERS or [users] in Streamlit secrets "
              "(docs/dashboards.md), or start it with `gpupool dashboard`.",
        "zh": "尚未配置仪表盘用户：请设置 GPUPOOL_DASHBOARD_USERS 或 Streamlit secrets 中的 [users]"
              "（见 docs/dashboards.md），或使用 `gpupool dashboard` 启动。"},
    "no_warehouse": {"en": "No warehouse yet", "zh": "还没有数据仓库"},
    "busy": {"en": "The pipeline is writing; reload in a moment.", "zh": "数据管道正在写入，请稍后刷新。"},
    "no_data_period": {"en": "No data for this period and these filters.", "zh": "该时间段和筛选条件下没有数据。"},
    "definition": {"en": "Definition", "zh": "定义"},
    "tenant_scope": {"en": "Your tenant only: {tenant}", "zh": "仅限您的租户：{tenant}"},
    "operator_scope": {"en": "Operator: the whole pool", "zh": "运维人员：整个资源池"},
    "scorecard": {"en": "Pooling stages scorecard", "zh": "资源池化阶段评分"},
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
    "action_kind": {"en": "Action kind", "zh": "动作类型"},
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
    "exemptions_source": {"en": "From the policy catalog's exemptions file (models/policies/exemptions.yml or "
                                "gpupool.yml governance.exemptions), read live: it is configuration, not warehouse data.",
                          "zh": "来自策略目录的豁免文件（models/policies/exemptions.yml 或 gpupool.yml 的 "
                                "governance.exemptions），实时读取：它是配置，而非数据仓库中的数据。"},
    "exemptions_unreadable": {"en": "The exemptions file cannot be read:", "zh": "无法读取豁免文件："},
    "no_exemptions": {"en": "No exemptions are configured for this scope.", "zh": "该范围内没有配置豁免。"},
    "expired": {"en": "Expired", "zh": "已过期"},
    "days_left": {"en": "Days left", "zh": "剩余天数"},
    "jobs_window": {"en": "Whole loaded window, the pool (metrics.job_period).", "zh": "整个已加载窗口，全资源池（metrics.job_period）。"},
    "failures_by_reason": {"en": "Failures by reason", "zh": "按原因统计的失败"},
    "no_failures": {"en": "No failed jobs in this period and these filters.", "zh": "该时间段和筛选条件下没有失败的作业。"},
    "top_reasons": {"en": "The {n} most frequent reasons.", "zh": "最常见的 {n} 个原因。"},
    "jobs_axis": {"en": "jobs", "zh": "作业数"},
    "failed_gpu_hours": {"en": "GPU-hours allocated to the failed jobs, by final state",
                         "zh": "失败作业占用的 GPU 小时（按最终状态）"},
    "retry_jobs": {"en": "Jobs whose retries burned the most GPU-hours (up to {n})", "zh": "重试消耗 GPU 小时最多的作业（最多 {n} 个）"},
    "past_declared_time": {"en": "Jobs past their declared time", "zh": "超出声明时长的作业"},
    "overrun_steps": {"en": "Overrun policy steps by outcome", "zh": "超时策略的处置步骤（按结果）"},
    "no_overruns": {"en": "No job ran past its declared run time in this period.", "zh": "该时间段内没有作业超出声明的运行时长。"},
    "overrun_caption": {"en": "{n} jobs (latest submitted first) whose run time passed their declared expected run "
                              "time (else their time limit).",
                        "zh": "{n} 个作业（按提交时间倒序）的运行时长超过了声明的预期运行时长（否则为时间上限）。"},
    "oversized_requests": {"en": "Oversized requests", "zh": "申请过大的请求"},
    "pool_level_only": {"en": "Pool level per GPU model and request shape (metrics.spec_gaps has no tenant).",
                        "zh": "按 GPU 型号和请求规格的资源池级数据（metrics.spec_gaps 不含租户）。"},
    "recommendations": {"en": "Recommendations", "zh": "建议"},
    "no_recommendations": {"en": "No capacity recommendations yet: run `gpupool recommend` (or the capacity asset).",
                           "zh": "还没有容量建议：请运行 `gpupool recommend`（或容量资产）。"},
    "month": {"en": "Month", "zh": "月份"},
    "impact_axis": {"en": "GPU-hours addressed", "zh": "涉及的 GPU 小时"},
    "confidence": {"en": "Confidence", "zh": "置信度"},
    "quantity": {"en": "Quantity", "zh": "数量"},
    "impact": {"en": "GPU-hours addressed", "zh": "涉及的 GPU 小时"},
    "wait_cause": {"en": "Wait cause", "zh": "等待原因"},
    "evidence": {"en": "Evidence", "zh": "证据"},
    "whatif": {"en": "What-if replay (predicted)", "zh": "假设回放（预测）"},
    "not_replayed": {"en": "Not replayed by the what-if (only the top recommendations are).",
                     "zh": "未经假设回放验证（只有排名靠前的建议会回放）。"},
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
    "gpu_hours_per_week": {"en": "GPU-hours per week", "zh": "每周 GPU 小时"},
    "capacity_gpus": {"en": "capacity (GPUs)", "zh": "容量（GPU 数）"},
    "peak_allocated_gpus": {"en": "peak held (GPUs)", "zh": "峰值占用（GPU 数）"},
    "trend_caption": {"en": "Least-squares lines over the complete weeks (trend_weeks_used; a partial week is not "
                            "drawn); read each with its r2. Dashed: the line, extended 4 weeks ahead.",
                      "zh": "基于完整周（trend_weeks_used，不完整的周不绘制）的最小二乘直线；请结合 r2 解读。"
                            "虚线为趋势线，并向后延伸 4 周。"},
}


def lang() -> str:
    value = st.query_params.get("lang", "en")
    return value if value in LANGUAGES else "en"


def t(key: str, **fields: object) -> str:
    """The interface word in the chosen language (the key itself when missing, so a gap shows)."""
    text = STRINGS.get(key, {}).get(lang()) or STRINGS.get(key, {}).get("en") or key
    return text.format(**fields) if fields else text


def label(entry: dict | None, fallback: str) -> str:
    """A catalog entry's label in the chosen language."""
    if not entry:
        return fallback
    return entry.get("label_zh" if lang() == "zh" else "label_en") or fallback
