"""`gpupool sql` as a console people like (issue 33): tables that fit the terminal with numbers by unit and a
footer naming the rows and the release, machine formats that read back, a prompt with history, and the other
listings of the CLI through the same renderer. On a tiny home of its own (one table, one release): no dbt."""
from __future__ import annotations

import io
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner, Result

from pipelines.cli import main, render
from pipelines.cli.sql import Reader, _open, repl
from pipelines.warehouse import Warehouse

ROOT = Path(__file__).parents[2]
QUERY = "select * from metrics.sample order by id"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home whose one release holds metrics.sample: catalog metric columns (a percentage, seconds, USD), a
    float without unit, text, a long text, NULLs, a date and a timestamp."""
    home = tmp_path_factory.mktemp("console") / "gpupool"
    with Warehouse(home).writer() as con:
        con.execute("create schema if not exists metrics")
        con.execute("""create table metrics.sample as
            select i as id, 'tenant-' || i as tenant, date '2026-11-01' + i::integer as day,
                   timestamp '2026-11-01 10:00:00' + to_hours(i) as started_at,
                   45.678 + i as allocation_rate_pct, 453.67 * (i + 1) as queue_wait_p95_s,
                   1234.5 * (i + 1) as allocated_cost_usd, 9.968014 * (i + 1) as score, 1234567 * (i + 1) as n,
                   case when i % 2 = 0 then null else 'odd' end as maybe,
                   repeat('a long note ', 12) as note
            from range(3) t(i)""")
    return home


def sql(home: Path, *args: str, columns: int = 200, stdin: str | None = None) -> Result:
    result = CliRunner(env={"COLUMNS": str(columns), "NO_COLOR": "1"}).invoke(
        main, ["sql", "--home", str(home), *args], input=stdin)
    return result


def expected(home: Path) -> pl.DataFrame:
    with Warehouse(home).analyst_connect() as con:
        return con.sql(QUERY).pl()


# -- machine formats ----------------------------------------------------------------------------------
def test_csv_is_the_default_on_a_pipe_and_parses_back(home: Path) -> None:
    result = sql(home, QUERY)  # CliRunner's stdout is not a terminal
    assert result.exit_code == 0, result.output
    back = pl.read_csv(io.StringIO(result.stdout), try_parse_dates=True)
    assert back.columns == expected(home).columns and back.height == 3
    assert back["tenant"].to_list() == ["tenant-0", "tenant-1", "tenant-2"]
    assert back["maybe"].to_list() == [None, "odd", None]


def test_json_is_one_array_of_objects(home: Path) -> None:
    result = sql(home, "--format", "json", QUERY)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [r["id"] for r in rows] == [0, 1, 2] and rows[0]["maybe"] is None and rows[1]["maybe"] == "odd"


def test_parquet_reads_back_equal_to_the_query(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.parquet"
    result = sql(home, "--output", str(out), QUERY)  # the suffix says parquet
    assert result.exit_code == 0, result.output
    assert pl.read_parquet(out).equals(expected(home))
    assert list(tmp_path.iterdir()) == [out], "a partial file was left beside the output"
    piped = sql(home, "--format", "parquet", QUERY)  # not a terminal: the bytes go to stdout
    assert piped.exit_code == 0, piped.output
    assert pl.read_parquet(io.BytesIO(piped.stdout_bytes)).equals(expected(home))


def test_a_failed_query_leaves_no_output_file(home: Path, tmp_path: Path) -> None:
    out = tmp_path / "result.csv"
    result = sql(home, "--output", str(out), "select * from metrics.nope")
    assert result.exit_code == 1 and "query failed" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_markdown_has_a_header_row_and_formats_by_unit(home: Path) -> None:
    result = sql(home, "--format", "markdown", QUERY)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("| id | tenant | day | started_at | allocation_rate_pct |")
    assert re.fullmatch(r"\|(-{3}:?\|)+|\|(---:?\|)+", lines[1]), lines[1]
    assert len(lines) == 2 + 3 and "45.7%" in lines[2] and "None" not in result.stdout


# -- the table ----------------------------------------------------------------------------------------
def test_the_table_formats_numbers_by_unit_and_names_rows_and_release(home: Path) -> None:
    result = sql(home, "--format", "table", QUERY, columns=250)
    assert result.exit_code == 0, result.output
    out = result.stdout
    row = next(line for line in out.splitlines() if line.startswith((" 0 ", "0 ")))
    assert "45.7%" in row  # allocation_rate_pct: the catalog's percent
    assert "7 min 34 s" in row  # queue_wait_p95_s: the catalog's seconds
    assert "$1,234.50" in row  # allocated_cost_usd: the catalog's USD
    assert "9.97" in row and "9.968014" not in out  # a float without a unit: the decimals it needs
    assert "1,234,567" in row  # thousands separators
    assert "2026-11-01 10:00:00" in row  # a timestamp on one line
    assert "None" not in out and render.NULL in row  # NULL as a dash
    release = Warehouse(home).current_release()
    assert re.search(rf"^3 rows · release {release} \(published [0-9-]+ [0-9:]+ UTC\) · [0-9.]+ s$", out, re.MULTILINE), out


def test_a_wide_result_fits_80_columns_with_ellipses(home: Path) -> None:
    result = sql(home, "--format", "table", "select *, note as note_again from metrics.sample", columns=80)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, "\n".join(lines)
    assert "more columns not shown:" in result.stdout and "note_again" in result.stdout
    narrow = sql(home, "--format", "table", "select tenant, note from metrics.sample", columns=40)
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 40 and "…" in narrow.stdout, narrow.stdout


def test_columns_set_the_width(home: Path) -> None:
    wide = sql(home, "--format", "table", QUERY, columns=300).stdout
    narrow = sql(home, "--format", "table", QUERY, columns=100).stdout
    assert max(map(len, wide.splitlines())) > 100 >= max(map(len, narrow.splitlines()))


def test_a_pipe_closed_early_is_not_an_error(home: Path) -> None:
    """`gpupool sql ... | head -1`: the reader had enough; no traceback, exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(f"{sys.executable} -m pipelines.cli sql --home {home} 'select i from range(2000000) t(i)' "
                          "| head -1", check=False, shell=True, env=env, capture_output=True, text=True, timeout=120,
                          executable="/bin/bash")
    assert done.stdout == "i\n" and "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr


def test_more_rows_than_the_limit_say_so(home: Path) -> None:
    result = sql(home, "--format", "table", "--limit", "2", QUERY)
    assert "--limit N prints more rows" in result.stdout and "\nthe first 2 rows · release" in result.stdout, \
        result.stdout


def test_render_units_and_widths() -> None:
    assert render.duration(45.2) == "45 s" and render.duration(3 * 3600 + 300) == "3 h 05 min"
    assert render.size(3 * 2**30) == "3.0 GiB" and render.size(512) == "512 B"
    assert render.column_unit("pool_utilisation_pct") == "percent"  # the catalog's
    assert render.column_unit("wait_s") == "seconds" and render.column_unit("tenant") == ""  # the name's
    frame = pl.DataFrame({"x": [0.0123, 0.5], "whole": [3.0, 4.0], "big": [67211.43, 1.0]})
    text = render.table(frame, width=80)
    rows = [line.split() for line in text.splitlines()[2:]]
    # 3 significant digits of the largest value; whole numbers without decimals; one decimal from 100 on
    assert rows == [["0.012", "3", "67,211.4"], ["0.500", "4", "1.0"]], text


# -- the prompt and stdin -----------------------------------------------------------------------------
def test_a_script_on_stdin_runs_and_prints_the_last_statement(home: Path) -> None:
    result = sql(home, stdin="select 1 as a;\nselect 2 as b;\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["b", "2"]


def test_the_prompt_goes_on_after_an_error(home: Path, capsys: pytest.CaptureFixture) -> None:
    lines = iter(["select 41 + 1 as answer;", "select * from metrics.nope;", "delete from metrics.sample;",
                  "select tenant", "  from metrics.sample where id = 1;", ".tables", "", ".quit", "select 'never';"])

    def read_line(_prompt: str) -> str:
        return next(lines)

    reader: Reader = _open(Warehouse(home))
    try:
        failed = repl(reader, read_line, timeout=30)
    finally:
        reader.con.close()
    out, err = capsys.readouterr()
    assert failed == 2
    assert "42" in out and "tenant-1" in out and "sample" in out  # .tables lists metrics.sample
    assert "never" not in out, ".quit ended the session"
    assert "query failed" in err and "read-only" in err and "Traceback" not in err


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_the_interactive_prompt_on_a_terminal_keeps_history(home: Path, tmp_path: Path) -> None:
    """`gpupool sql` with no query on a terminal: readline's prompt, an error that does not end it, the
    history in HOME/.sql_history (0600)."""
    import pty

    history = home / ".sql_history"
    history.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100", "TERM": "dumb"}
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "sql", "--home", str(home)], stdin=follower,
                            stdout=follower, stderr=follower, env=env, close_fds=True, start_new_session=True)
    os.close(follower)
    seen = b""

    def until(marker: bytes, timeout: float = 30) -> str:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while marker not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.1)
            if ready:
                try:
                    seen += os.read(leader, 65536)
                except OSError:
                    break
        assert marker in seen, ANSI.sub("", seen.decode(errors="replace"))
        text, seen = seen.decode(errors="replace"), b""
        return ANSI.sub("", text)

    try:
        until(b"gpupool> ")
        os.write(leader, b"select * from metrics.nope;\r")
        assert "query failed" in until(b"gpupool> ")
        os.write(leader, b"select 6 * 7 as answer;\r")
        answered = until(b"gpupool> ")
        assert re.search(r"^\s*42\s*$", answered, re.MULTILINE) and "1 row · release" in answered, answered
        os.write(leader, b"\\q\r")
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    assert history.stat().st_mode & 0o777 == 0o600
    assert history.read_text().splitlines()[-3:] == ["select * from metrics.nope;", "select 6 * 7 as answer;", "\\q"]


def test_parquet_on_a_terminal_needs_an_output_file(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result = CliRunner().invoke(main, ["sql", "--home", str(home), "--output", "x.unknown", QUERY])
    assert result.exit_code == 2 and "--format" in result.output


# -- the other listings -------------------------------------------------------------------------------
def test_sources_fit_the_terminal_and_wrap(home: Path) -> None:
    result = CliRunner(env={"COLUMNS": "70"}).invoke(main, ["sources"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["source", "reads", "what"] and max(map(len, lines)) <= 70
    assert any(line.startswith("slurm_sacct ") for line in lines)


def test_releases_list_through_the_renderer(home: Path) -> None:
    result = CliRunner(env={"COLUMNS": "100"}).invoke(main, ["releases", "--home", str(home)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["release", "created", "(UTC)"]
    current = next(line for line in lines if line.startswith("*"))
    assert re.search(r"\d+ \d{4}-\d\d-\d\d \d\d:\d\d:\d\d +write +[\d.,]+ [KM]iB", " ".join(current.split()[1:]))
