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
