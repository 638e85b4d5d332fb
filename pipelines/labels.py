"""Column labels in English and Chinese, shared by the review packs' tables (pipelines/pack/labels.py)
and the dashboards' column headings and axis words (dashboards/i18n.py `t("col_<column>")`,
`column_word`): the columns that are not catalog metrics (dimensions, and the tables' own derived
counts and shares). A catalog metric's label comes from the catalog (models/catalog/*.yml). Chinese
follows the catalog's style: no space between Chinese and Latin letters ("GPU型号")."""
from __future__ import annotations

COLUMN_LABELS: dict[str, dict[str, str]] = {
    "day": {"en": "Day", "zh": "日期"},
    "month": {"en": "Month", "zh": "月份"},
    "tenant": {"en": "Tenant", "zh": "租户"},
    "gpu_model": {"en": "GPU model", "zh": "GPU型号"},
    "queue": {"en": "Queue", "zh": "队列"},
    "host": {"en": "Host", "zh": "主机"},
    "gpu": {"en": "GPU", "zh": "GPU编号"},
    "cpus": {"en": "CPUs", "zh": "CPU数"},
    "cause": {"en": "Cause", "zh": "原因"},
    "template": {"en": "Template", "zh": "模板"},
    "share_mode": {"en": "Sharing mode", "zh": "共享方式"},
    "gpus_requested": {"en": "GPUs requested", "zh": "申请GPU数"},
    "quota_gpus": {"en": "Quota GPUs", "zh": "配额GPU数"},
    "failure_reason": {"en": "Failure reason", "zh": "失败原因"},
    "attempts": {"en": "Attempts", "zh": "尝试次数"},
    "failures": {"en": "Failures", "zh": "失败次数"},
    "jobs": {"en": "Jobs", "zh": "作业数"},
    "artifact_status": {"en": "Artifact status", "zh": "产出状态"},
    "jobs_share_pct": {"en": "Share of jobs", "zh": "作业占比"},
    "jobs_with_checkpoint": {"en": "Jobs with a checkpoint", "zh": "有检查点的作业数"},
    "attempts_without_checkpoint": {"en": "Attempts without a checkpoint", "zh": "无检查点的尝试次数"},
    "work_lost_with_checkpoint_gpu_hours": {"en": "Work lost with a checkpoint (GPU-h)", "zh": "有检查点时的损失（GPU小时）"},
    "work_lost_without_checkpoint_gpu_hours": {"en": "Work lost without a checkpoint (GPU-h)",
                                               "zh": "无检查点时的损失（GPU小时）"},
    "training_attempts": {"en": "Training attempts", "zh": "训练尝试次数"},
    "attempts_with_time_policy": {"en": "Attempts with a time policy", "zh": "有时间策略的尝试次数"},
    "breaches_without_checkpoint": {"en": "Breaches without a checkpoint", "zh": "无检查点的违规次数"},
    "is_repeat_offender": {"en": "Repeat offender", "zh": "反复故障"},
    "is_node_repeat_offender": {"en": "Node repeat offender", "zh": "节点反复故障"},
    "first_fault_at": {"en": "First fault", "zh": "首次故障时间"},
    "last_fault_at": {"en": "Last fault", "zh": "最近故障时间"},
    "xids_seen": {"en": "XIDs seen", "zh": "出现的XID"},
    "ecc_dbe_errors": {"en": "ECC double-bit errors", "zh": "ECC双比特错误"},
    "decided_at": {"en": "Decided at", "zh": "决定时间"},
    "action": {"en": "Action", "zh": "动作"},
    "mode": {"en": "Mode", "zh": "模式"},
    "target": {"en": "Target", "zh": "对象"},
    "target_kind": {"en": "Target kind", "zh": "对象类型"},
    "outcome": {"en": "Outcome", "zh": "结果"},
    "fault_minutes": {"en": "Fault minutes", "zh": "故障分钟数"},
    "faulty_gpus": {"en": "Faulty GPUs", "zh": "故障GPU数"},
    "source": {"en": "Source", "zh": "来源"},
    "action_kind": {"en": "Action kind", "zh": "动作类型"},
    "decision": {"en": "Decision", "zh": "决定"},
    "gpus_released": {"en": "GPUs released", "zh": "释放GPU数"},
    "actor_role": {"en": "Role", "zh": "角色"},
    "actor": {"en": "Actor", "zh": "操作人"},
    "category": {"en": "Category", "zh": "类别"},
    "policy": {"en": "Policy", "zh": "策略"},
    "actions": {"en": "Actions", "zh": "动作数"},
    "false_positives": {"en": "False positives", "zh": "误判次数"},
    "reminders_applied": {"en": "Reminders sent", "zh": "已发送提醒数"},
    "released_after_reminder": {"en": "Released after a reminder", "zh": "提醒后释放数"},
    "rank": {"en": "Rank", "zh": "排名"},
    "kind": {"en": "Kind", "zh": "类型"},
    "quantity": {"en": "Quantity", "zh": "数量"},
    "unit": {"en": "Unit", "zh": "单位"},
    "recommendation": {"en": "Advice (English)", "zh": "建议（英文）"},
    "recommendation_zh": {"en": "Advice (Chinese)", "zh": "建议"},
    "confidence": {"en": "Confidence", "zh": "置信度"},
    "impact_gpu_hours": {"en": "GPU-hours addressed", "zh": "涉及GPU小时"},
    "smallest_sufficient_quantity": {"en": "Smallest sufficient quantity (what-if)", "zh": "最小足够数量（模拟）"},
    "final_state": {"en": "Final state", "zh": "最终状态"},
    "review_verdict": {"en": "Verdict on this month's demand", "zh": "按本月需求的评判"},
    "review_applied": {"en": "Applied", "zh": "已执行"},
    "applied": {"en": "Applied", "zh": "已执行"},
    "replayed_wait_p95_with_change_s": {"en": "Replayed wait p95 with the advice", "zh": "回放P95等待（按建议）"},
    "replayed_wait_p95_without_change_s": {"en": "Replayed wait p95 without the advice", "zh": "回放P95等待（不按建议）"},
    "failure_message": {"en": "Error message (as logged)", "zh": "报错信息（原文）"},
    "failed_jobs_retries_exhausted": {"en": "Of which retries exhausted", "zh": "其中重试次数已用尽"},
    "whatif_confirms": {"en": "What-if confirms", "zh": "模拟验证通过"},
    "whatif_within_tolerance": {"en": "What-if baseline within tolerance", "zh": "模拟基线在容差内"},
    "physical_gpus_previous_month": {"en": "Physical GPUs last month", "zh": "上月物理GPU数"},
    "predicted_baseline_wait_p95_s": {"en": "Predicted wait p95 without the change",
                                      "zh": "预测P95等待（不变更）"},
    "predicted_wait_p95_s": {"en": "Predicted wait p95 with the change", "zh": "预测P95等待（变更后）"},
    "predicted_pool_utilisation_pct": {"en": "Predicted pool utilisation", "zh": "预测资源池利用率"},
    "stage": {"en": "Stage", "zh": "阶段"},
    "criterion": {"en": "Criterion", "zh": "标准"},
    "first_day": {"en": "First day", "zh": "首日"},
    "last_day": {"en": "Last day", "zh": "末日"},
    # the pool's targets the scorecard carries (models/metrics/pooling_scorecard.sql thresholds)
    "wait_p95_target_s": {"en": "Queue wait p95 target", "zh": "排队等待P95目标"},
    "utilisation_target_pct": {"en": "Utilisation target", "zh": "利用率目标"},
    # the tenant pack's tables (pipelines/pack/tenant.py)
    "acted_at": {"en": "Acted at", "zh": "执行时间"},
    "job_id": {"en": "Job", "zh": "作业"},
    "job_name": {"en": "Job name", "zh": "作业名称"},
    "user_name": {"en": "User", "zh": "用户"},
    "reason": {"en": "Reason", "zh": "原因说明"},
    "policy_kind": {"en": "Policy kind", "zh": "策略类型"},
    "jobs_with_checkpoint_policy": {"en": "Jobs with a checkpoint policy", "zh": "有检查点策略的作业数"},
    "cpu_busy_pct_p95_max_day": {"en": "CPU busy p95 (busiest day)", "zh": "CPU繁忙P95（最忙日）"},
    "memory_used_gib_mean": {"en": "Memory used, mean (GiB)", "zh": "内存使用均值（GiB）"},
    "memory_used_gib_peak": {"en": "Memory used, peak (GiB)", "zh": "内存使用峰值（GiB）"},
    "network_mb_per_s_mean": {"en": "Network, mean (MB/s)", "zh": "网络均值（MB/s）"},
    "disk_read_mb_per_s_mean": {"en": "Disk read, mean (MB/s)", "zh": "磁盘读均值（MB/s）"},
    "disk_written_mb_per_s_mean": {"en": "Disk written, mean (MB/s)", "zh": "磁盘写均值（MB/s）"},
}

# The words of the packs' category columns: column -> the key stored in the warehouse -> its label. A
# table shows the label (pipelines/pack/render.py), its appendix keeps the key; a value not listed here is
# a name (a tenant, a queue, a GPU model, a policy) and is shown as it is. The causes are
# marts.fct_attempt_outcomes' and marts.fct_wait_causes', the statuses the models' accepted values.
_CAUSES = {
    "all": {"en": "All", "zh": "全部"},
    "completed": {"en": "Completed", "zh": "完成"},
    "cancelled": {"en": "Cancelled", "zh": "取消"},
    "hardware": {"en": "Hardware fault", "zh": "硬件故障"},
    "host_down": {"en": "Host down", "zh": "主机宕机"},
    "preempted": {"en": "Preempted", "zh": "被抢占"},
    "reclaimed": {"en": "Reclaimed by policy", "zh": "被策略回收"},
    "capped": {"en": "Capped by policy", "zh": "被策略限时"},
    "time_limit": {"en": "Time limit", "zh": "超出时限"},
    "out_of_memory": {"en": "Out of memory", "zh": "内存不足"},
    "user_code": {"en": "User code", "zh": "用户代码"},
    "unknown": {"en": "Unknown", "zh": "未知"},
    # waits
    "capacity_bound": {"en": "No free GPU of the kind asked", "zh": "所需型号无空闲GPU"},
    "fragmentation": {"en": "Fragmentation", "zh": "碎片化"},
    "quota_bound": {"en": "Queue quota", "zh": "队列配额已满"},
    "policy": {"en": "Queue policy", "zh": "队列策略"},
}
_OUTCOMES = {
    "applied": {"en": "Applied", "zh": "已执行"},
    "shadow": {"en": "Shadow (not sent)", "zh": "影子模式（未发送）"},
    "dropped": {"en": "Dropped", "zh": "已放弃"},
    "recommended": {"en": "Recommended", "zh": "已建议"},
    "exempt": {"en": "Exempt", "zh": "豁免"},
    "rate_limited": {"en": "Rate-limited", "zh": "被限流"},
    "queued": {"en": "Queued", "zh": "排队中"},
    "failed": {"en": "Failed", "zh": "失败"},
    "refused": {"en": "Refused", "zh": "被拒绝"},
    "proposed": {"en": "Proposed", "zh": "已提议"},
    "already_done": {"en": "Already done", "zh": "此前已完成"},
    "pending": {"en": "Pending", "zh": "待处理"},
    # the tenant pack's outcome of an action on a job
    "released after the reminder": {"en": "Released after the reminder", "zh": "提醒后已释放"},
    "not released": {"en": "Not released", "zh": "未释放"},
    "resubmitted within 1 h": {"en": "Resubmitted within 1 h", "zh": "1小时内重新提交"},
    "GPUs freed": {"en": "GPUs freed", "zh": "GPU已释放"},
}
_ACTIONS = {
    "remind": {"en": "Remind", "zh": "提醒"}, "reclaim": {"en": "Reclaim", "zh": "回收"},
    "preempt": {"en": "Preempt", "zh": "抢占"}, "cap_runtime": {"en": "Cap run time", "zh": "限制运行时间"},
    "quota_change": {"en": "Quota change proposal", "zh": "配额调整提议"},
    "quota_proposal": {"en": "Quota change proposal", "zh": "配额调整提议"},
    "drain": {"en": "Drain", "zh": "排空"}, "undrain": {"en": "Undrain", "zh": "恢复"},
}
_TEMPLATES = {
    "training": {"en": "Training", "zh": "训练"}, "inference": {"en": "Inference", "zh": "推理"},
    "experiment": {"en": "Experiment", "zh": "实验"}, "interactive": {"en": "Interactive", "zh": "交互式"},
    "none": {"en": "No template", "zh": "无模板"}, "all": {"en": "All", "zh": "全部"},
}
VALUE_LABELS: dict[str, dict[str, dict[str, str]]] = {
    "cause": _CAUSES,
    "artifact_status": {"registered": {"en": "Registered model", "zh": "已注册模型"},
                        "logged_only": {"en": "Logged artifact only", "zh": "仅记录产物"},
                        "none": {"en": "No artifact", "zh": "无产物"}},
    # capacity advice (pipelines/capacity/recommend.py)
    "kind": {"add_nodes": {"en": "Add nodes", "zh": "增加节点"}, "remove_nodes": {"en": "Remove nodes", "zh": "减少节点"},
             "resplit_mig": {"en": "Re-split MIG", "zh": "重新划分MIG"}, "move_quota": {"en": "Move quota", "zh": "调整配额"},
             "move_to_backfill": {"en": "Move to backfill", "zh": "转为回填"},
             "change_queue_limit": {"en": "Change a queue limit", "zh": "调整队列限制"}},
    # an advice's unit (governance.capacity_recommendations) and a catalog metric's (models/catalog/*.yml),
    # as the packs' tables and glossary show them
    "unit": {"nodes": {"en": "nodes", "zh": "台节点"}, "quota GPUs": {"en": "quota GPUs", "zh": "块GPU配额"},
             "GPUs": {"en": "GPUs", "zh": "块GPU"}, "jobs": {"en": "jobs", "zh": "个作业"},
             "GPU-hours": {"en": "GPU-hours", "zh": "GPU小时"}, "hours": {"en": "hours", "zh": "小时"},
             "actions": {"en": "actions", "zh": "次动作"}, "attempts": {"en": "attempts", "zh": "次尝试"},
             "bytes": {"en": "bytes", "zh": "字节"}, "bytes per second": {"en": "bytes per second", "zh": "字节/秒"},
             "faults": {"en": "faults", "zh": "次故障"}, "findings": {"en": "findings", "zh": "项发现"},
             "flag": {"en": "flag", "zh": "是/否"}, "gaps": {"en": "gaps", "zh": "次缺口"},
             "gpu_hours": {"en": "GPU-hours", "zh": "GPU小时"},
             "gpu_hours per week": {"en": "GPU-hours per week", "zh": "GPU小时/周"},
             "gpus": {"en": "GPUs", "zh": "块GPU"}, "gpus per week": {"en": "GPUs per week", "zh": "块GPU/周"},
             "hosts": {"en": "hosts", "zh": "台主机"}, "kwh": {"en": "kWh", "zh": "千瓦时"},
             "mib": {"en": "MiB", "zh": "MiB"}, "minutes": {"en": "minutes", "zh": "分钟"},
             "percent": {"en": "percent", "zh": "百分比"}, "recommendations": {"en": "recommendations", "zh": "条建议"},
             "records": {"en": "records", "zh": "条记录"}, "seconds": {"en": "seconds", "zh": "秒"},
             "usd": {"en": "USD", "zh": "美元"}, "windows": {"en": "windows", "zh": "个窗口"}},
    # the kind of policy behind a governance action (models/policies/policies.yml `kind`)
    "policy_kind": {"idle_allocation": {"en": "Idle allocated GPUs", "zh": "已分配GPU闲置"},
                    "idle_interactive": {"en": "Idle interactive session", "zh": "交互式会话闲置"},
                    "zombie": {"en": "Zombie job (no activity, no progress)", "zh": "僵尸作业（无活动、无进展）"},
                    "overrun": {"en": "Run time over the limit", "zh": "运行时间超限"},
                    "oversized": {"en": "Oversized request", "zh": "申请规格过大"},
                    "retry_storm": {"en": "Retry storm", "zh": "重试风暴"},
                    "template_breach": {"en": "Template rules broken", "zh": "违反模板规则"},
                    "gpu_health": {"en": "GPU health", "zh": "GPU健康"},
                    "host_bound": {"en": "Host-bound job", "zh": "受主机资源限制的作业"}},
    "confidence": {"high": {"en": "high", "zh": "高"}, "medium": {"en": "medium", "zh": "中"},
                   "low": {"en": "low", "zh": "低"}},
    # governance
    "mode": {"shadow": {"en": "Shadow", "zh": "影子模式"}, "enforce": {"en": "Enforce", "zh": "强制执行"}},
    "outcome": _OUTCOMES,
    "decision": _OUTCOMES,
    "action": _ACTIONS,
    "action_kind": _ACTIONS,
    "target_kind": {"gpu": {"en": "GPU", "zh": "GPU"}, "node": {"en": "Node", "zh": "节点"}},
    "actor_role": {"admin": {"en": "Administrator", "zh": "管理员"}, "system": {"en": "System", "zh": "系统"},
                   "governance_bot": {"en": "Governance bot", "zh": "治理机器人"},
                   "user": {"en": "User", "zh": "用户"}, "operator": {"en": "Operator", "zh": "运维人员"}},
    "category": {"permission_change": {"en": "Permission change", "zh": "权限变更"},
                 "quota_change": {"en": "Quota change", "zh": "配额变更"}, "approval": {"en": "Approval", "zh": "审批"},
                 "enforcement": {"en": "Enforcement", "zh": "执行动作"},
                 "queue_change": {"en": "Queue change", "zh": "队列变更"},
                 "other_change": {"en": "Other change", "zh": "其他变更"}, "read": {"en": "Read", "zh": "读取"},
                 "other": {"en": "Other", "zh": "其他"}},
    "source": {"allocator": {"en": "Allocator", "zh": "分配器"}, "slurm": {"en": "Slurm", "zh": "Slurm"},
               "k8s": {"en": "Kubernetes", "zh": "Kubernetes"}, "kueue": {"en": "Kueue", "zh": "Kueue"}},
    # jobs
    "template": _TEMPLATES,
    "share_mode": {"whole": {"en": "Whole GPU", "zh": "整卡"}, "mig": {"en": "MIG slice", "zh": "MIG切片"},
                   "timeslice": {"en": "Time-sliced", "zh": "时间片共享"}},
    # a failed job's final state: the scheduler's category of the failure
    "final_state": {"FAILED": {"en": "Failed (non-zero exit)", "zh": "异常退出"},
                    "TIMEOUT": {"en": "Time limit reached", "zh": "达到运行时间上限"},
                    "OUT_OF_MEMORY": {"en": "Out of memory", "zh": "内存不足"},
                    "NODE_FAIL": {"en": "Node failure", "zh": "节点故障"},
                    "BOOT_FAIL": {"en": "Boot failure", "zh": "启动失败"},
                    "DEADLINE": {"en": "Deadline passed", "zh": "超过截止时间"},
                    "OTHER": {"en": "Other reasons", "zh": "其他原因"}},
    # the fair judge of last month's advice (pipelines/capacity/review.py VERDICTS)
    "review_verdict": {"credited": {"en": "Credited", "zh": "建议有效"},
                       "would_have_helped": {"en": "Would have helped", "zh": "未执行但本会有效"},
                       "not_credited": {"en": "Did not help", "zh": "建议无效"},
                       "not_relied_on": {"en": "Replay not relied on", "zh": "回放不作依据"}},
    # the pooling scorecard (models/metrics/pooling_scorecard.sql)
    "stage": {"project_owned": {"en": "Project-owned", "zh": "项目独占"},
              "shared_queues": {"en": "Shared queues", "zh": "共享队列"},
              "elastic_sharing": {"en": "Elastic sharing", "zh": "弹性共享"},
              "resource_operations": {"en": "Resource operations", "zh": "资源运营"}},
    "criterion": {"visibility": {"en": "Visibility", "zh": "资源可见"}, "clear rules": {"en": "Clear rules", "zh": "规则清晰"},
                  "higher utilisation": {"en": "Higher utilisation", "zh": "利用率提升"},
                  "decisions from data": {"en": "Decisions from data", "zh": "数据驱动决策"}},
}


def value_label(column: str, value: object, lang: str) -> object:
    """The label of a category key in a pack table's column (VALUE_LABELS); any other value as it is."""
    words = VALUE_LABELS.get(column, {}).get(value) if isinstance(value, str) else None
    return value if words is None else words[lang]


# The kinds of source a period's coverage counts (pipelines/coverage.py groups the sources into them), and
# the words every surface that shows a coverage uses (the packs' page 1, the Capacity page's advice).
COVERAGE_KINDS: dict[str, dict[str, str]] = {
    "gpu_telemetry": {"en": "GPU telemetry (DCGM)", "zh": "GPU遥测（DCGM）"},
    "scheduler": {"en": "Scheduler and allocator events", "zh": "调度器与分配器事件"},
    "host_telemetry": {"en": "Host telemetry (node_exporter)", "zh": "主机遥测（node_exporter）"},
    "inventory": {"en": "Pool inventory and quotas", "zh": "资源池清单与配额"},
    "audit": {"en": "Audit logs", "zh": "审计日志"},
    "governance": {"en": "Governance decisions", "zh": "治理决策"},
    "artifacts": {"en": "Checkpoints and artifacts", "zh": "检查点与产出"},
    "other": {"en": "Other sources", "zh": "其他来源"},
}
COVERAGE_WORDS: dict[str, dict[str, str]] = {
    "coverage": {"en": "Data coverage", "zh": "数据覆盖"},
    "not_collected": {"en": "not collected", "zh": "未采集"},
}


def coverage_phrase(days_with_data: int, days_in_period: int, lang: str) -> str:
    """ "3 of 30 days with data" / "30天中3天有数据" """
    if lang == "zh":
        return f"{days_in_period}天中{days_with_data}天有数据"
    return f"{days_with_data} of {days_in_period} days with data"
