"""The house's import rules (docs/architecture.md), checked on the source with `ast`.

Each rule names a layer and what it must never import; a new import that breaks one fails here
with the file, the line and the rule's reason. Imports inside `if TYPE_CHECKING:` count too: a
type-only import still ties two rooms together.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

from pipelines.paths import REPO_ROOT

PACKAGES = ("pipelines", "allocator", "dashboards", "expectations")
MAX_LINES = 800


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted (a module, or a module's attribute)
    path: Path
    line: int


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[Import]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [Import(name, alias.name, path, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found += [Import(name, f"{module}.{alias.name}", path, node.lineno) for alias in node.names]
    return found


def _source_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (REPO_ROOT / pkg).rglob("*.py"))


ALL_IMPORTS = [imp for path in _source_files() for imp in _imports(path)]
MODULES = {_module_name(p) for p in _source_files()}


def _resolve(target: str) -> str | None:
    """The project module an import loads: `a.b.c` if it is a module, else its longest module prefix
    (`from a.b import name` loads a.b)."""
    while target:
        if target in MODULES:
            return target
        target = target.rpartition(".")[0]
    return None


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


@dataclass(frozen=True)
class Rule:
    layer: str  # the importing modules: this dotted prefix
    forbidden: tuple[str, ...]  # what they must not import (dotted prefixes)
    why: str
    except_targets: tuple[str, ...] = ()  # forbidden prefixes' members that are fine
    except_layers: tuple[str, ...] = ()  # importers under the layer that the rule does not bind


RULES = [
    Rule("pipelines.sources", ("pipelines.connectors", "pipelines.warehouse", "pipelines.ingest", "pipelines.policies",
                               "pipelines.governance", "pipelines.enforcement", "pipelines.resources",
                               "pipelines.assets", "requests", "dagster"),
         "parsers are pure: bytes in, frames and quarantine out; no network, warehouse or Dagster"),
    Rule("pipelines.connectors", ("pipelines.warehouse", "pipelines.ingest", "pipelines.assets", "pipelines.resources",
                                  "pipelines.governance", "pipelines.policies", "dagster"),
         "connectors fetch and land files; ingest writes the warehouse, resources and assets wire them"),
    Rule("pipelines.policies", ("pipelines.governance", "pipelines.enforcement", "pipelines.connectors",
                                "pipelines.warehouse", "pipelines.resources", "pipelines.assets", "allocator.sim",
                                "allocator.store", "allocator.service", "requests", "dagster"),
         "policies are rules as data plus pure evaluation and planning; the loop that acts is pipelines.governance"),
    Rule("pipelines.contracts", ("pipelines", "allocator", "dashboards"),
         "contracts are the bottom layer: every room may read them, they read no room",
         except_targets=("pipelines.contracts", "pipelines.paths")),
    Rule("pipelines.warehouse", ("pipelines.capacity", "pipelines.connectors", "pipelines.policies",
                                 "pipelines.governance", "pipelines.sources", "pipelines.assets"),
         "the warehouse takes every table's DDL from the contracts"),
    Rule("pipelines.dictionary", ("pipelines.capacity", "pipelines.connectors", "pipelines.policies",
                                  "pipelines.governance", "pipelines.assets"),
         "the dictionary documents tables from the contracts and the catalog"),
    Rule("pipelines.enforcement", ("pipelines.governance", "pipelines.assets", "pipelines.resources",
                                   "pipelines.warehouse"),
         "enforcers apply one action to one system; the governance loop calls them"),
    Rule("pipelines.notify", ("pipelines.governance", "pipelines.enforcement", "pipelines.connectors",
                              "pipelines.warehouse", "pipelines.resources", "pipelines.assets", "dagster"),
         "reminders compose and send messages; the governance loop's outbox decides when"),
    Rule("dashboards", ("pipelines", "allocator"),
         "dashboards read the warehouse's views through dashboards/data.py, never files or pipeline code",
         except_targets=("pipelines.paths", "pipelines.sandbox", "pipelines.warehouse", "pipelines.config",
                         "pipelines.contracts", "pipelines.clock", "pipelines.labels")),
    Rule("allocator", ("pipelines", "dashboards", "dagster"),
         "the allocator is a service of its own; the pipelines read it over HTTP and its log files"),
    Rule("allocator", ("allocator.sim",), "the live service never loads the simulation",
         except_layers=("allocator.sim",)),
    Rule("expectations", ("pipelines.assets", "pipelines.resources", "pipelines.governance", "dashboards"),
         "expectation suites are built from the contracts and the catalog"),
]


def _violations(rule: Rule, imports: list[Import]) -> list[str]:
    bad = []
    for imp in imports:
        if not _within(imp.module, rule.layer) or any(_within(imp.module, e) for e in rule.except_layers):
            continue
        target = _resolve(imp.target) or imp.target
        if (any(_within(target, f) for f in rule.forbidden)
                and not any(_within(target, e) for e in rule.except_targets)):
            bad.append(f"{imp.path.relative_to(REPO_ROOT)}:{imp.line} imports {target}")
    return bad


@pytest.mark.parametrize("rule", RULES, ids=[f"{r.layer}-x-{r.forbidden[0]}" for r in RULES])
def test_layer_never_imports_what_it_must_not(rule: Rule) -> None:
    bad = _violations(rule, ALL_IMPORTS)
    assert not bad, f"{rule.why}:\n  " + "\n  ".join(bad)


def _cycles() -> list[list[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in ALL_IMPORTS:
        target = _resolve(imp.target)
        if target and target != imp.module and not _within(imp.module, target):
            graph[imp.module].add(target)
    # Tarjan's strongly connected components; any component of two or more is a circle.
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_circles() -> None:
    assert _cycles() == []


def test_no_python_file_over_the_size_limit() -> None:
    files = [*_source_files(), *(REPO_ROOT / "tests").rglob("*.py"), *(REPO_ROOT / "bench").rglob("*.py")]
    big = {str(p.relative_to(REPO_ROOT)): n for p in files
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert big == {}, f"split these at a seam (limit {MAX_LINES} lines): {big}"


def test_the_checker_sees_a_violation() -> None:
    """A parser importing the warehouse is caught with its file and line; one under an exempt layer
    is not."""
    registry = REPO_ROOT / "pipelines" / "sources" / "registry.py"
    assert _imports(registry), "the checker reads imports"
    sources_rule = next(r for r in RULES if r.layer == "pipelines.sources")
    bad = Import("pipelines.sources.registry", "pipelines.warehouse.Warehouse", registry, 3)
    assert _violations(sources_rule, [bad]) == ["pipelines/sources/registry.py:3 imports pipelines.warehouse"]
    sim_rule = next(r for r in RULES if r.forbidden == ("allocator.sim",))
    inside = Import("allocator.sim.simulator", "allocator.sim.workload.Workload", registry, 1)
    outside = Import("allocator.service", "allocator.sim.workload.Workload", registry, 1)
    assert _violations(sim_rule, [inside]) == []
    assert len(_violations(sim_rule, [outside])) == 1
