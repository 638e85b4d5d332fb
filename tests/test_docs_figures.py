"""Docs whose figures cannot drift (issue 33): in README.md and docs/*.md, a version of a pinned
package, the metric catalog's version and a count of dbt models are the current ones, unless the
paragraph (or its heading) is dated, which makes it a record of a measurement; and every paragraph
that reports a measurement (a time or a size it "measured" or "took") carries its date. The checker
is also fed planted stale figures, each of which it must report."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from pipelines.build import prepared_manifest_path
from pipelines.paths import MODELS_DIR

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "data-dictionary.md")]
DATE = re.compile(r"\b20\d\d-\d\d(?:-\d\d)?\b")
MEASUREMENT = re.compile(r"\b(?:measured|took|takes about|median of)\b")
FIGURE = re.compile(r"\d[\d,.]*\s?(?:s|ms|min|minutes|seconds|GB|GiB|MB|MiB|x)\b")
PACKAGES = ("dagster", "dbt-core", "dbt-duckdb", "deltalake", "duckdb", "moto", "polars", "pyarrow", "sqlfluff")
VERSION = re.compile(r"\b(" + "|".join(map(re.escape, PACKAGES)) + r")\s+v?(\d+\.\d+\.\d+)\b", re.IGNORECASE)
CATALOG_VERSION = re.compile(r"\bcatalog\b[^.\n]{0,40}?\bversion\s+(\d+\.\d+\.\d+)|\bcatalog\s+(\d+\.\d+\.\d+)")
# a count of the dbt project's models (not of GPU models): said of a build, of dbt or of the project
MODEL_COUNT = re.compile(r"\b(?:build|built|dbt|project)\b[^.\n]{0,40}?\b(\d+) (?:dbt )?models\b")


@dataclass(frozen=True)
class Current:
    pins: dict[str, str]
    catalog: str
    models: int


@pytest.fixture(scope="module")
def current() -> Current:
    pins = dict(line.strip().lower().split("==", 1) for line in (ROOT / "requirements.lock").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    catalog = yaml.safe_load((MODELS_DIR / "catalog" / "version.yml").read_text())["version"]
    manifest = json.loads(prepared_manifest_path(MODELS_DIR).read_text())
    models = sum(1 for n in manifest["nodes"].values() if n["resource_type"] == "model")
    return Current(pins={p: pins[p] for p in PACKAGES}, catalog=str(catalog), models=models)


def paragraphs(text: str) -> list[tuple[str, str]]:
    """(the nearest heading above, the paragraph) for each paragraph: blank lines and headings end one."""
    out, heading, lines = [], "", []
    for line in [*text.splitlines(), ""]:
        if not line.strip() or line.startswith("#"):
            if lines:
                out.append((heading, "\n".join(lines)))
                lines = []
            heading = line if line.startswith("#") else heading
        else:
            lines.append(line)
    return out


def stale_figures(text: str, now: Current) -> list[str]:
    """What `text` states that is not current or not dated (module doc)."""
    stale = []
    for heading, para in paragraphs(text):
        if DATE.search(heading) or DATE.search(para):
            continue
        if MEASUREMENT.search(para) and FIGURE.search(para):
            stale.append(f"undated measurement: {para.splitlines()[0][:80]}")
        stale += [f"{name} {version} (pinned {now.pins[name.lower()]})" for name, version in VERSION.findall(para)
                  if version != now.pins[name.lower()]]
        stale += [f"catalog {v or w} (current {now.catalog})" for v, w in CATALOG_VERSION.findall(para)
                  if (v or w) != now.catalog]
        stale += [f"{n} models (the project has {now.models})" for n in MODEL_COUNT.findall(para) if int(n) != now.models]
    return stale


def test_the_checker_reports_planted_stale_figures(current: Current):
    planted = ("## Sizing\n\nA full refresh took 43 s on 2 cores.\n\n"
               "Built by dbt-core 0.1.0 and DuckDB 0.9.2 from the catalog (version 0.0.1). The dbt project has 3 models.\n"
               "Quotas of at most 256 models, a GPU model each.\n")
    assert len(stale_figures(planted, current)) == 5
    dated = "## Sizing (measured 2026-12-01)\n\nA full refresh took 43 s on 2 cores with DuckDB 0.9.2, 3 models.\n"
    assert stale_figures(dated, current) == []
    now = f"DuckDB {current.pins['duckdb']}, the catalog {current.catalog}, {current.models} models took nothing.\n"
    assert stale_figures(now, current) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_figures_in_the_docs_are_current_or_dated(doc: Path, current: Current):
    assert stale_figures(doc.read_text(), current) == []
