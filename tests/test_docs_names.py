"""Docs that cannot drift (issue 33): every `gpupool` command and option, every metrics and marts
relation, and every Dagster schedule, sensor and job that README.md and docs/*.md name in code exists.
The checker is also fed planted wrong names, each of which it must report."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from pipelines.build import prepared_manifest_path
from pipelines.cli import main
from pipelines.paths import MODELS_DIR

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a name in code: an inline code span, or a line of a fenced block
CODE_SPAN = re.compile(r"`([^`\n]+)`")
COMMAND = re.compile(r"(?<![<\w.-])gpupool((?: --?[a-z][a-z-]*(?: [^\s-][^\s]*)?)*) ([a-z][a-z0-9-]*)(?: ([a-z][a-z0-9-]*))?([^|;&#]*)")
# `gpupool` as another tool's argument (`docker compose -p gpupool up`, `sacctmgr ... user gpupool`)
NOT_THE_COMMAND = re.compile(r"(?:^|\s)(?:-\w|--[\w-]+|user|namespace)\s+$")
RELATION = re.compile(r"\b(metrics|marts)\.([a-z_][a-z0-9_]*)\b")
DAGSTER = re.compile(r"\b([a-z][a-z0-9_]*_(?:schedule|sensor))\b")  # a job's name has no suffix to tell it by
# a whole code span that reads like a Dagster definition or a daily/monthly relation (`capacity_monthly`)
SCHEDULED_NAME = re.compile(r"`([a-z][a-z0-9_]*_(?:schedule|sensor|daily|monthly|hourly|job))`")
GLOBAL_OPTIONS = {"--config", "--version", "--help"}


@dataclass(frozen=True)
class Known:
    commands: click.Group
    relations: set[str]
    dagster: set[str]
    identifiers: set[str]  # Dagster's schedules, sensors, jobs and assets, dbt's nodes and their columns


def code_lines(text: str) -> list[str]:
    """The inline code spans and the fenced blocks' lines of a Markdown text."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        out += [line] if fenced else CODE_SPAN.findall(line)
    return [re.sub(r"(?:^|\s)#.*", "", line) for line in out]  # shell comments are prose


def _options(command: click.Command) -> set[str]:
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts)} | {"--help"}


def wrong_names(text: str, known: Known) -> list[str]:
    """What `text` names in code that does not exist."""
    wrong = [f"name {name}" for name in SCHEDULED_NAME.findall(text) if name not in known.identifiers]
    for code in code_lines(text):
        for match in COMMAND.finditer(code):
            if NOT_THE_COMMAND.search(code[:match.start()]):
                continue
            name, sub, rest = match.group(2), match.group(3), match.group(4)
            command = known.commands.commands.get(name)
            if command is None:
                wrong.append(f"command gpupool {name}")
                continue
            if isinstance(command, click.Group):
                if sub is None:  # the group itself
                    continue
                if sub not in command.commands:
                    wrong.append(f"command gpupool {name} {sub}")
                    continue
                command = command.commands[sub]
            options = _options(command) | GLOBAL_OPTIONS
            wrong += [f"option gpupool {name} {option}" for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest)
                      if option not in options]
        wrong += [f"relation {schema}.{rel}" for schema, rel in RELATION.findall(code)
                  if f"{schema}.{rel}" not in known.relations]
        wrong += [f"Dagster {name}" for name in DAGSTER.findall(code) if name not in known.dagster]
    return wrong


@pytest.fixture(scope="module")
def known() -> Known:
    from pipelines.definitions import defs

    manifest = json.loads(prepared_manifest_path(MODELS_DIR).read_text())
    relations = {f"{node['schema']}.{node['alias']}" for node in manifest["nodes"].values()}
    dagster = {d.name for d in (*defs.schedules, *defs.sensors)}
    identifiers = ({d.name for d in (*defs.schedules, *defs.sensors, *defs.jobs)}
                   | {key.path[-1] for key in defs.resolve_asset_graph().get_all_asset_keys()}
                   | {node["alias"] for node in manifest["nodes"].values()}
                   | {column for node in manifest["nodes"].values() for column in node.get("columns", {})})
    return Known(main, relations, dagster, identifiers)


def test_the_checker_reports_planted_wrong_names(known: Known):
    text = ("Run `gpupool pakc --month 2026-11`, `gpupool pack --monht 2026-11`, `gpupool backfill prometeus`,\n"
            "read `metrics.pool_dayly` and `marts.fct_gpu_activty`; Dagster runs `capacity_monthly_schedule`\n"
            "(`reclaim_monthly`).\n"
            "```\ngpupool --home /tmp/h sql --format tsv 'select 1'\n```\n"
            "Right: `gpupool pack --month 2026-11 --lang zh`, `gpupool backfill prometheus --from T --to T`, "
            "`metrics.pool_daily`, `capacity_schedule`.\n")
    assert wrong_names(text, known) == [
        "name capacity_monthly_schedule", "name reclaim_monthly", "command gpupool pakc", "option gpupool pack --monht", "command gpupool backfill prometeus",
        "relation metrics.pool_dayly", "relation marts.fct_gpu_activty", "Dagster capacity_monthly_schedule",
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_name_in_the_docs_exists(doc: Path, known: Known):
    assert wrong_names(doc.read_text(), known) == [], doc


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip("# ").lower()).replace(" ", "-")


def broken_links(doc: Path, text: str) -> list[str]:
    """Relative links of `text` (a file in `doc`'s folder) to a file or a heading that does not exist."""
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http(s), mailto: not ours to check
            continue
        path, _, fragment = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            broken.append(target)
        elif fragment and file.suffix == ".md":
            headings = {anchor(line) for line in file.read_text().splitlines() if line.startswith("#")}
            if fragment not in headings:
                broken.append(target)
    return broken


def test_the_link_checker_reports_planted_broken_links(tmp_path: Path):
    doc = tmp_path / "a.md"
    doc.write_text("# A\n\n## DuckDB's memory\n")
    text = "[x](a.md#duckdbs-memory) [y](#duckdbs-memory) [z](b.md) [w](a.md#no-such) [u](https://example.org/x)"
    assert broken_links(doc, text) == ["b.md", "a.md#no-such"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_in_the_docs_resolves(doc: Path):
    assert broken_links(doc, doc.read_text()) == []
