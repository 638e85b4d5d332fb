"""The Chinese packs are Chinese throughout, names aside (issue 32): page 1 (answers, decisions) and every
table of the pool's and a tenant's pack, rendered in Chinese, hold no English word but the names the data
carry (tenants, queues, policies, jobs, users, actors, GPU models, hosts, templates, a failure's message as
logged), the commands to run and the sources a table names, and a few technical tokens (units, GPU, p95,
UTC, MIG, XID...). The glossary is Chinese too: its definitions are the catalog's description_zh, which keep
the names they define a metric by (columns, parameters, relations and files, DCGM fields, job states, the
systems the data come from); its formulas are expressions over columns, and are left out."""
from __future__ import annotations

import datetime as dt
import html
import re

import pytest

from pipelines.catalog import load_catalog
from pipelines.contracts import PolicyKind
from pipelines.labels import VALUE_LABELS
from pipelines.pack.figures import collect
from pipelines.pack.questions import pool_answers
from pipelines.pack.render import _shown, render
from pipelines.pack.tenant import TENANT, tenant_answers, tenants_of_month
from pipelines.warehouse import Warehouse

pytestmark = pytest.mark.slow
MONTH = dt.date(2026, 11, 1)

# the columns whose values are names (or text as logged): shown as they are in either language
NAME_COLUMNS = {"tenant", "queue", "policy", "job_id", "job_name", "user_name", "actor", "gpu_model", "host", "template",
                "failure_message", "target"}
# technical tokens a Chinese text keeps: units, acronyms, the pack's own file names and commands
ALLOWED = {"GPU", "GPUs", "CPU", "GiB", "MiB", "MB", "s", "h", "min", "UTC", "MIG", "XID", "XIDs", "ECC", "DCGM",
           "node_exporter", "NVLink", "PCIe", "kWh"}
WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def page_text(page: str) -> str:
    """The text of a pack's HTML before its glossary: no style, no tags, entities decoded."""
    body = page.split('<h2 class="glossary"', 1)[0]
    body = re.sub(r"<style>.*?</style>|<title>.*?</title>", " ", body, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "\n", body))


# the names a definition keeps as they are: identifiers (columns, metrics, a policy's parameters, DCGM fields),
# relations and files, globs (dm-*, permission.*), an id's form, the systems and objects the data come from
IDENTIFIER = re.compile(r"\b[A-Za-z]\w*_\w*\b|\b(?:raw|staging|marts|metrics|seeds|ops|models)[./][\w./*-]*\w"
                        r"|\b[\w-]+\.(?:csv|yml|md)\b|\b[a-z]+-?\*|\b[a-z]+\.\*|<[^<>]*>-r<[^<>]*>",
                        re.ASCII)  # ASCII word boundaries: a name touches the Chinese around it
SYSTEMS = {"MLflow", "Slurm", "sacctmgr", "QOS", "Kubernetes", "Kueue", "ResponseComplete", "Role", "RoleBinding",
           "ClusterRole", "ClusterRoleBinding", "ResourceQuota", "ClusterQueue", "ResourceFlavor", "HTTP",
           "MemTotal", "MemAvailable", "Great Expectations", "SQL", "DCP", "VLAN", *VALUE_LABELS["final_state"],
           "CANCELLED", "PREEMPTED"}


def glossary_text(page: str) -> str:
    """The text of a pack's glossary, without its formulas and each metric's name and place: its title,
    the catalog version, the headings, and per metric its label, definition and unit."""
    glossary = page[page.index('<h2 class="glossary"'):]
    glossary = re.sub(r'<td class="fn">.*?</td>|<span class="fn">.*?</span>', " ", glossary, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "\n", glossary))


def english_words(text: str, names: set[str]) -> list[str]:
    """The words of `text` in Latin letters that are neither a name nor an allowed token, in order."""
    for name in sorted(names, key=len, reverse=True):  # names first: "platform-serve", "CUDA out of memory"
        text = text.replace(name, " ")
    text = re.sub(r"\b\d+(?:\.\d+)?[A-Za-z]+\b", " ", text)  # sizes and models' shapes: 1g, 3g.40gb, 80GB
    text = re.sub(r"\b(?:metrics|appendix)[./][\w./]+|, \.parquet", " ", text)  # the sources and files a table names
    text = re.sub(r"`[^`]*`", " ", text)  # a command to run, as typed: `gpupool recommend --month 2026-10`
    return [w for w in WORD.findall(text) if w not in ALLOWED and not re.fullmatch(r"[pP]\d+", w)]


def names_of(figs) -> set[str]:
    found = {figs.tenant} if figs.tenant else set()
    for frame in figs.tables.values():
        for column in NAME_COLUMNS & set(frame.columns):
            found |= {str(v) for v in frame[column].drop_nulls().unique().to_list() if str(v).strip()}
    return found


@pytest.fixture
def chinese_packs(advised_demo_home, tmp_path, pdf_not_rendered):
    """The pool's pack and its first tenant's, rendered in Chinese: (html, names) each."""
    con = Warehouse(advised_demo_home).analyst_connect()
    try:
        pool = collect(con, MONTH)
        pool.answers, pool.decisions = pool_answers(con, pool)
        tenant = collect(con, MONTH, TENANT, tenants_of_month(con, MONTH)[0])
        tenant.answers, tenant.decisions = tenant_answers(con, tenant)
    finally:
        con.close()
    packs = []
    for figs in (pool, tenant):
        out = tmp_path / (figs.tenant or "pool")
        out.mkdir()
        packs.append(((render(figs, out, "zh")["html"]).read_text(encoding="utf-8"), names_of(figs), figs))
    return packs


def test_the_chinese_packs_have_no_english_but_names(chinese_packs):
    for page, names, figs in chinese_packs:
        assert figs.answers and figs.tables
        assert english_words(page_text(page), names) == [], figs.tenant or "pool"


def test_the_chinese_glossary_has_no_english_but_names(chinese_packs):
    for page, _, figs in chinese_packs:
        text = glossary_text(page)
        for metric in figs.spec.metrics():  # every definition of the glossary is the catalog's Chinese one
            assert html.escape(figs.catalog[metric]["description_zh"], quote=False) in page, metric
        assert re.search(r"[\u4e00-\u9fff]", text)
        assert english_words(IDENTIFIER.sub(" ", text), SYSTEMS) == [], figs.tenant or "pool"


def test_every_definition_in_chinese_has_no_english_but_names():
    """The whole catalog, not only the metrics a pack shows: the dashboards' catalog page reads them all."""
    for m in load_catalog().metrics:
        assert english_words(IDENTIFIER.sub(" ", m.description_zh), SYSTEMS) == [], m.name


def test_a_definitions_names_are_kept_and_its_english_found():
    text = ("活跃度取DCGM_FI_PROF_GR_ENGINE_ACTIVE（见marts.dim_idle_rules、models/policies/policies.yml），"
            "dm-*设备和permission.*记录，由MLflow和Slurm上报，编号<作业编号>-r<序号>；failed jobs are FAILED")
    assert english_words(IDENTIFIER.sub(" ", text), SYSTEMS) == ["failed", "jobs", "are"]


def test_the_pool_packs_decisions_are_chinese(chinese_packs):
    page, names, figs = chinese_packs[0]
    decisions = page_text(page).split("本月需决策事项", 1)[1].split("目录", 1)[0]
    assert figs.decisions and re.search(r"[\u4e00-\u9fff]", decisions)
    assert english_words(decisions, names) == []


def test_a_planted_english_phrase_is_found(chinese_packs):
    page, names, _ = chinese_packs[1]
    planted = page.replace("</h1>", "</h1><p>资源池 Approve the smallest change 即已足够</p>", 1)
    assert english_words(page_text(planted), names) == ["Approve", "the", "smallest", "change"]
    # a name is a name only where the data hold it: a tenant's name planted as a word is not English
    assert english_words("租户 vision 的作业 sat idle", {"vision"}) == ["sat", "idle"]


def test_a_policys_reason_is_its_kind_in_chinese_and_its_words_in_english():
    columns = ["job_id", "policy", "policy_kind", "reason", "recommendation", "recommendation_zh"]
    assert _shown(columns, "en") == ["job_id", "policy", "policy_kind", "reason", "recommendation"]
    assert _shown(columns, "zh") == ["job_id", "policy", "policy_kind", "recommendation_zh"]
    # every kind of policy has its words in both languages (pipelines/contracts.py PolicyKind)
    assert set(VALUE_LABELS["policy_kind"]) == {k.value for k in PolicyKind}
