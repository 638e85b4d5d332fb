"""Human column names for the packs' tables, in English and Chinese: a column that carries a catalog
metric takes the catalog's label; any other column (a dimension, a count the table derives) takes its
label from DIMENSIONS. A raw key is never shown: column_label raises on a column neither knows, and a
test runs it over every table of every pack."""
from __future__ import annotations

# columns that are not catalog metrics: dimensions, and the tables' own derived counts and shares
DIMENSIONS: dict[str, dict[str, str]] = {
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
    "smallest_sufficient_change": {"en": "Smallest sufficient change (what-if)", "zh": "最小足够变更（模拟）"},
    "whatif_confirms": {"en": "What-if confirms", "zh": "模拟验证通过"},
    "physical_gpus_previous_month": {"en": "Physical GPUs last month", "zh": "上月物理GPU数"},
    "predicted_baseline_wait_p95_s": {"en": "Predicted wait p95 without the change",
                                      "zh": "预测P95等待（不变更）"},
    "predicted_wait_p95_s": {"en": "Predicted wait p95 with the change", "zh": "预测P95等待（变更后）"},
    "predicted_pool_utilisation_pct": {"en": "Predicted pool utilisation", "zh": "预测资源池利用率"},
    "stage": {"en": "Stage", "zh": "阶段"},
    "criterion": {"en": "Criterion", "zh": "标准"},
    "first_day": {"en": "First day", "zh": "首日"},
    "last_day": {"en": "Last day", "zh": "末日"},
    # the tenant pack's tables (pipelines/pack/tenant.py)
    "acted_at": {"en": "Acted at", "zh": "执行时间"},
    "job_id": {"en": "Job", "zh": "作业"},
    "job_name": {"en": "Job name", "zh": "作业名称"},
    "user_name": {"en": "User", "zh": "用户"},
    "reason": {"en": "Reason", "zh": "原因说明"},
    "jobs_with_checkpoint_policy": {"en": "Jobs with a checkpoint policy", "zh": "有检查点策略的作业数"},
    "cpu_busy_pct_p95_max_day": {"en": "CPU busy p95 (busiest day)", "zh": "CPU繁忙P95（最忙日）"},
    "memory_used_gib_mean": {"en": "Memory used, mean (GiB)", "zh": "内存使用均值（GiB）"},
    "memory_used_gib_peak": {"en": "Memory used, peak (GiB)", "zh": "内存使用峰值（GiB）"},
    "network_mb_per_s_mean": {"en": "Network, mean (MB/s)", "zh": "网络均值（MB/s）"},
    "disk_read_mb_per_s_mean": {"en": "Disk read, mean (MB/s)", "zh": "磁盘读均值（MB/s）"},
    "disk_written_mb_per_s_mean": {"en": "Disk written, mean (MB/s)", "zh": "磁盘写均值（MB/s）"},
}


def _catalog_columns(catalog: dict[str, dict]) -> dict[str, dict]:
    """metrics.<view>.<column> -> the catalog row that defines it (its own view and column, and also_in)."""
    found = {}
    for row in catalog.values():
        found[f"{row['view_name']}.{row['column_name']}"] = row
        for other in filter(None, (row.get("also_in") or "").split(", ")):
            found.setdefault(other, row)
    return found


def column_label(view: str, column: str, lang: str, catalog: dict[str, dict]) -> str:
    """The heading of a pack table's column: the label of the catalog metric held at metrics.<view>.<column>,
    else DIMENSIONS' label, else the label of the catalog metric whose own column has that name. The
    dimensions come before that last guess: a plain `jobs` or `attempts` column is not the metric of
    another view that happens to share the name (artifact status, attempts by cause). `catalog`: every
    catalog row by metric name (Figures.catalog)."""
    row = _catalog_columns(catalog).get(f"metrics.{view}.{column}")
    if row is None and column in DIMENSIONS:
        return DIMENSIONS[column][lang]
    row = row or next((r for r in catalog.values() if r["column_name"] == column), None)
    if row is not None:
        return row["label_zh" if lang == "zh" else "label_en"]
    raise KeyError(f"pack column {column!r} of metrics.{view} has no label: add it to the catalog or to "
                   "pipelines/pack/labels.py DIMENSIONS (en and zh)")
