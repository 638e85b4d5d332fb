"""docs/operators.md's table of every command's exit codes stays true: each command of `gpupool --help` has a
row, and the codes a row names are exactly those the command's code path can exit with.

The code path is the source of the command's callbacks (a group's subcommands included) and of the
functions of its module and of pipelines/cli/common.py they call, transitively: a code is there when it
uses a named exit code of common.py (EXIT_BLOCKED...). 0, 1 and 2 are every command's (EVERY_COMMAND)."""
from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterator
from types import ModuleType

import click

from pipelines.cli import common, main
from pipelines.paths import REPO_ROOT

OPERATORS = REPO_ROOT / "docs" / "operators.md"
EXIT_NAMES = {name: value for name, value in vars(common).items() if name.startswith("EXIT_")}
SIGNALLED = f"{common.EXIT_SIGNAL_BASE}+N"  # how the table writes 128 + the signal's number
# 0 done, 1 failed (a click.ClickException, or any error not caught), 2 click's usage errors
EVERY_COMMAND = {str(common.EXIT_OK), str(common.EXIT_FAILED), str(common.EXIT_USAGE)}
ROW = re.compile(r"^\| `gpupool ([a-z0-9-]+)[^`]*`[^|]* \| ([^|]+) \|")


def documented() -> dict[str, set[str]]:
    """The table under "## Exit codes": command -> its codes as written ("0", "3", "128+N")."""
    text = OPERATORS.read_text()
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if match := ROW.match(line):
            rows[match.group(1)] = {code.strip() for code in match.group(2).split(",")}
    return rows


def callbacks(command: click.Command) -> Iterator:
    if command.callback is not None:
        yield command.callback
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from callbacks(sub)


def functions(module: ModuleType) -> dict[str, str]:
    """The module's top-level functions, by name: their source."""
    return {name: textwrap.dedent(inspect.getsource(obj)) for name, obj in vars(module).items()
            if inspect.isfunction(obj) and obj.__module__ == module.__name__}


def called_names(source: str) -> set[str]:
    return {node.id for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Name)} | {
        node.attr for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Attribute)}


def codes_in(source: str) -> set[str]:
    names = called_names(source)
    codes = {str(value) for name, value in EXIT_NAMES.items() if name in names and name != "EXIT_SIGNAL_BASE"}
    if "EXIT_SIGNAL_BASE" in names:
        codes.add(SIGNALLED)
    return codes


def code_path_exits(command: click.Command) -> set[str]:
    """Every code the command's code path can exit with (module doc)."""
    codes = set(EVERY_COMMAND)
    for callback in callbacks(command):
        function = inspect.unwrap(callback)
        known = {**functions(common), **functions(inspect.getmodule(function))}
        sources, seen = [textwrap.dedent(inspect.getsource(function))], set()
        while sources:
            source = sources.pop()
            codes |= codes_in(source)
            for name in called_names(source) & known.keys() - seen:
                seen.add(name)
                sources.append(known[name])
    return codes


def test_every_command_of_gpupool_help_has_a_row_and_every_row_a_command():
    assert set(documented()) == set(main.commands)


def test_each_row_names_exactly_the_codes_its_command_can_exit_with():
    rows = documented()
    wrong = {name: (sorted(rows[name]), sorted(code_path_exits(command)))
             for name, command in main.commands.items() if rows.get(name) != code_path_exits(command)}
    assert not wrong, f"docs/operators.md exit codes (documented, in the code): {wrong}"


def test_click_usage_errors_exit_with_the_named_usage_code():
    assert click.UsageError("x").exit_code == click.BadParameter("x").exit_code == common.EXIT_USAGE
    assert click.ClickException("x").exit_code == common.EXIT_FAILED


def test_the_scanner_finds_a_code_through_the_helpers_a_command_calls():
    assert codes_in("raise ExitError('x', EXIT_BLOCKED)") == {str(common.EXIT_BLOCKED)}
    assert str(common.EXIT_BLOCKED) in code_path_exits(main.commands["land"])  # via common.rebuild_unless_blocked
