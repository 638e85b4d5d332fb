"""A site's configuration outside the repository (`gpupool --config FILE`, docs/configuration.md): its GPU
price and policy threshold reach the next build and tick, run from another folder; nothing under the
installed tree is written; bad site files fail naming the file and the problem; `gpupool --version`;
the demo's closing hints."""
from __future__ import annotations

import datetime as dt
import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml
from click.testing import CliRunner

from pipelines.capacity.recommend import RULES_PATH, RulesError, load_rules, rules_path
from pipelines.cli import main
from pipelines.cli.demo import CODE_LOCATION, next_steps
from pipelines.clock import utc_naive
from pipelines.config import ConfigError, use_config
from pipelines.governance.live import SAMPLE_SCHEMA, SCRAPE_SOURCE
from pipelines.paths import MODELS_DIR, REPO_ROOT
from pipelines.site import PACKAGED_GPU_MODELS, read_gpu_models, site_gpu_models
from tests.governance.test_running_work import GR, squeue_started_before

INSTALLED = ("pipelines", "models", "allocator", "dashboards", "docs")
PREPARED = ("models/target", "models/logs")  # the dbt manifest prepared at set-up (scripts/setup.sh)


@pytest.fixture(autouse=True)
def no_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """No configuration from the environment; what `gpupool --config` exports is undone after the test."""
    monkeypatch.delenv("GPUPOOL_CONFIG", raising=False)


def tree_state() -> dict[str, tuple[int, str]]:
    """Every file of the installed tree (bytecode caches and the prepared manifest aside): its mtime and
    content hash."""
    state = {}
    for top in INSTALLED:
        for path in (REPO_ROOT / top).rglob("*"):
            rel = path.relative_to(REPO_ROOT).as_posix()
            if path.is_file() and "__pycache__" not in rel and not rel.startswith(PREPARED):
                state[rel] = (path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest())
    return state


def gpupool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`gpupool ARGS` in a process of its own, in another folder than the repository's."""
    env = {k: v for k, v in os.environ.items() if k not in ("GPUPOOL_CONFIG", "GPUPOOL_HOME")}
    env["PYTHONPATH"] = str(REPO_ROOT)  # this checkout's package, as an installed one is found from anywhere
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def executable(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def site_files(folder: Path) -> Path:
    """gpupool.yml with an H100 price, a policy catalog whose idle threshold is 0.95 (packaged: 0.05), and
    Slurm as the engine: squeue answers the recorded queue, scontrol notes what it was asked."""
    folder.mkdir()
    packaged = (MODELS_DIR / "policies" / "policies.yml").read_text()
    assert "activity_threshold: 0.05 " in packaged
    (folder / "policies.yml").write_text(packaged.replace("activity_threshold: 0.05 ", "activity_threshold: 0.95 ", 1))
    squeue = executable(folder, "squeue", f"cat {squeue_started_before(utc_naive(), folder)}")
    scontrol = executable(folder, "scontrol", f'echo "$@" >> {folder / "scontrol.log"}')
    config = folder / "gpupool.yml"
    config.write_text(
        "gpu_models:\n  prices: {H100: 9.5}\n"
        "governance:\n  policies: policies.yml\n"  # relative: read from gpupool.yml's folder
        f"slurm:\n  squeue: {squeue}\n  scontrol: {scontrol}\n  governance:\n    partitions: [batch, urgent]\n")
    return config


def land_recent_rounds(home: Path, now: dt.datetime) -> None:
    """The last 40 minutes of scrape rounds: Slurm job 74's GPUs (localhost 0-2) at 0.9 activity, the
    others idle."""
    for m in range(1, 40):
        t = now - dt.timedelta(minutes=m)
        folder = home / "landing" / SCRAPE_SOURCE / t.date().isoformat()  # a round lands in its own day
        folder.mkdir(parents=True, exist_ok=True)
        rows = [(t, "localhost", gpu, None, GR, 0.9 if gpu < 3 else 0.0) for gpu in range(8)]
        pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row").write_parquet(folder / f"scrape-{t:%H%M%S}-r{m}.parquet")


def query(home: Path, sql: str) -> list[dict]:
    import json

    result = CliRunner().invoke(main, ["sql", "--home", str(home), "--format", "json", sql])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.slow  # a build and a tick, each in a process of its own
def test_a_site_config_outside_the_repository_reaches_the_next_build_and_tick_and_writes_nothing_installed(
        tmp_path: Path) -> None:
    config, home, elsewhere = site_files(tmp_path / "site"), tmp_path / "home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    before = tree_state()

    built = gpupool("--config", str(config), "build", "--home", str(home), cwd=elsewhere)
    assert built.returncode == 0, built.stdout + built.stderr
    [price] = query(home, "select price_per_gpu_hour from seeds.gpu_models where gpu_model = 'H100'")
    assert price["price_per_gpu_hour"] == 9.5  # packaged: 3.00
    [rule] = query(home, "select activity_threshold from marts.dim_idle_rules where queue is null and template is null")
    assert rule["activity_threshold"] == 0.95

    land_recent_rounds(home, dt.datetime.now(dt.UTC).replace(tzinfo=None))
    ticked = gpupool("--config", str(config), "reclaim", "--home", str(home), cwd=elsewhere)
    assert ticked.returncode == 0, ticked.stdout + ticked.stderr
    reminded = {line.split()[1]: line for line in (tmp_path / "site" / "scontrol.log").read_text().splitlines()}
    assert "policy idle-allocation" in reminded["JobId=73"]  # idle under any threshold
    # busy at 0.9: idle only under the site's 0.95
    assert "threshold 95%" in reminded["JobId=74"] and "policy idle-allocation" in reminded["JobId=74"]

    wrote = gpupool("dictionary", "--home", str(home), cwd=elsewhere)
    assert wrote.returncode == 0, wrote.stdout + wrote.stderr
    assert (home / "docs" / "data-dictionary.md").is_file()
    assert tree_state() == before


def test_the_sql_hint_of_the_demo_runs_from_any_folder(built_empty_home: Path) -> None:
    sql, dagster = (line.split(": ", 1)[1] for line in next_steps(built_empty_home).strip().splitlines())
    argv = shlex.split(sql)
    assert argv[:4] == ["gpupool", "sql", "--home", str(built_empty_home.resolve())]
    result = CliRunner().invoke(main, argv[1:])
    assert result.exit_code == 0, result.output
    # Dagster loads the code location by module from any folder: tests/pipelines/test_definitions.py
    assert shlex.split(dagster.split("(")[0]) == [
        f"GPUPOOL_HOME={built_empty_home.resolve()}", "dagster", "dev", "-m", CODE_LOCATION]


def test_version_prints_the_package_catalog_and_dbt_project_versions() -> None:
    result = CliRunner().invoke(main, ["--version"])
    catalog = yaml.safe_load((MODELS_DIR / "catalog" / "version.yml").read_text())["version"]
    project = yaml.safe_load((MODELS_DIR / "dbt_project.yml").read_text())["version"]
    assert result.exit_code == 0
    assert result.output.splitlines()[1:] == [f"metric catalog {catalog}", f"dbt project {project}"]
    assert result.output.startswith("gpupool ")


def test_the_config_in_force_is_exported_as_an_absolute_path_for_child_processes(tmp_path, monkeypatch) -> None:
    (tmp_path / "site.yml").write_text("governance: {}\n")
    monkeypatch.chdir(tmp_path)
    assert use_config(Path("site.yml")) == tmp_path / "site.yml"
    assert os.environ["GPUPOOL_CONFIG"] == str(tmp_path / "site.yml")
    monkeypatch.delenv("GPUPOOL_CONFIG")
    assert use_config(None) is None  # no ./gpupool.yml: nothing exported
    assert "GPUPOOL_CONFIG" not in os.environ


def test_a_price_for_a_model_the_table_lacks_fails_the_build_naming_the_file(tmp_path: Path) -> None:
    config = tmp_path / "gpupool.yml"
    config.write_text("gpu_models:\n  prices: {B300: 5.0}\n")
    result = CliRunner().invoke(main, ["--config", str(config), "build", "--home", str(tmp_path / "home")])
    assert result.exit_code == 1
    assert f"{config}: section gpu_models: prices: B300 is not a GPU model of the table" in result.output


def test_a_site_table_replaces_the_packaged_one_and_prices_apply_over_it(tmp_path: Path) -> None:
    table = PACKAGED_GPU_MODELS.read_text() + "B200,B200\\b,7,184320,6.00\n"
    (tmp_path / "gpus.csv").write_text(table)
    config = tmp_path / "gpupool.yml"
    config.write_text("gpu_models:\n  file: gpus.csv\n  prices: {B200: 5.5}\n")
    rows = {r["gpu_model"]: r for r in read_gpu_models(PACKAGED_GPU_MODELS)}
    seeded = site_gpu_models(config).splitlines()
    assert seeded[-1] == "B200,B200\\b,7,184320,5.5"
    assert seeded[1].endswith(f",{rows['H200']['price_per_gpu_hour']}")  # the others as they were
    assert site_gpu_models(tmp_path / "absent.yml") is None  # no file, no section: the packaged seed


@pytest.mark.parametrize(("table", "problem"), [
    ("gpu_model,price_per_gpu_hour\nH100,3\n", "columns ['gpu_model', 'price_per_gpu_hour']; expected"),
    ("HEADER\nH100,H100\\b,7,81559,3.00\nH100,H100\\b,7,81559,3.00\n", "line 3: gpu_model 'H100' is repeated"),
    ("HEADER\nH100,H100\\b,7,81559,cheap\n", "line 2: price_per_gpu_hour 'cheap' is not a number"),
])
def test_a_bad_site_table_is_refused_naming_the_file_and_the_problem(tmp_path: Path, table: str, problem: str) -> None:
    path = tmp_path / "gpus.csv"
    path.write_text(table.replace("HEADER", PACKAGED_GPU_MODELS.read_text().splitlines()[0]))
    with pytest.raises(ConfigError, match="^" + str(path) + ": ") as raised:
        read_gpu_models(path)
    assert problem in str(raised.value)


def test_capacity_rules_come_from_the_site_file_gpupool_yml_names(tmp_path: Path, monkeypatch) -> None:
    assert rules_path() == RULES_PATH
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES_PATH.read_text().replace('version: "', 'version: "site-', 1))
    (tmp_path / "gpupool.yml").write_text("capacity:\n  rules: rules.yml\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "gpupool.yml"))
    assert load_rules()["version"].startswith("site-")
    rules.write_text("add_nodes: [\n")
    with pytest.raises(RulesError, match=f"^{rules}: not valid YAML"):
        load_rules()


@pytest.mark.slow  # dbt parses the site's copy of the project
def test_the_dagster_build_seeds_the_sites_prices_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dagster as dg

    from pipelines.assets.marts import dbt_models
    from pipelines.resources.dbt import dbt_resource
    from pipelines.resources.warehouse import WarehouseResource

    config, home = tmp_path / "gpupool.yml", tmp_path / "home"
    config.write_text("gpu_models:\n  prices: {H100: 9.5}\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(config))
    result = dg.materialize([dbt_models], selection=[dg.AssetKey(["seeds", "gpu_models"])], partition_key="2026-11-01",
                            resources={"dbt": dbt_resource(), "warehouse": WarehouseResource(home=str(home))})
    assert result.success
    [price] = query(home, "select price_per_gpu_hour from seeds.gpu_models where gpu_model = 'H100'")
    assert price["price_per_gpu_hour"] == 9.5


def test_the_dictionary_rewrites_the_committed_files_only_when_asked_and_alone(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["dictionary", "--in-tree", "--out", str(tmp_path / "d.md")])
    assert result.exit_code == 2 and "--in-tree rewrites the committed files" in result.output
