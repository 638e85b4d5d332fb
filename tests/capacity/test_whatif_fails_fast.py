"""`gpupool whatif` checks every option against the month's pool before any replay, `recommend` its month
against the months loaded: an unknown GPU model, queue or month, or too many nodes removed, is a usage error
(exit 2) naming what there is, and nothing is replayed (issue 33). The warehouse is stood in for: the demand
is a one-node H100 pool, the replay a tripwire."""
from __future__ import annotations

import datetime as dt

import duckdb
import pytest
from click.testing import CliRunner

from allocator.model import GpuSpec, NodeSpec, PoolConfig, QueueSpec
from allocator.sim.workload import Workload
from pipelines.capacity import replay, run
from pipelines.capacity.demand import Demand
from pipelines.cli import main
from pipelines.cli.common import EXIT_USAGE
from pipelines.warehouse import Warehouse

START = dt.datetime(2026, 11, 1)


@pytest.fixture
def replays() -> list[tuple]:
    return []


@pytest.fixture
def home(tmp_path, monkeypatch, replays):
    """A home whose warehouse the month's demand is read from (stood in for) and which no replay may run on."""
    wh = Warehouse(tmp_path / "gpupool")
    wh.db_path.parent.mkdir(parents=True)
    duckdb.connect(str(wh.db_path)).close()
    nodes = (NodeSpec("h01", tuple(GpuSpec("h01", i, "H100") for i in range(8))),)
    pool = PoolConfig(nodes=nodes, queues=(QueueSpec("train", "t", ("H100",), {"H100": 8.0}),), tenants=("t",))
    demand = Demand(START, 1, pool, Workload((), (), None, None, {}), (), False, {})
    monkeypatch.setattr(replay, "load_demand", lambda _con, _month, _days: demand)
    monkeypatch.setattr(replay, "observed", lambda _con, _start, _days: None)

    def tripwire(*args, **_kwargs):
        replays.append(args)
        raise AssertionError("a replay ran before the options were checked")

    monkeypatch.setattr(replay, "replay", tripwire)
    monkeypatch.setattr(replay, "_replay_job", tripwire)
    return wh.home


@pytest.mark.parametrize("option, value, names", [
    ("--add-nodes", "B200=1", "has ['H100']"),
    ("--add-nodes", "H100=-1", "the pool has 1 such nodes"),
    ("--quota", "nlp:H100=4", "queues: ['train']"),
    ("--quota", "train:A100=4", "queue train takes ['H100']"),
], ids=["unknown-model", "remove-every-node", "unknown-queue", "model-the-queue-does-not-take"])
def test_whatif_rejects_an_option_the_pool_cannot_take_before_any_replay(home, replays, option, value, names):
    result = CliRunner().invoke(main, ["whatif", "--home", str(home), option, value])
    assert replays == []
    assert result.exit_code == EXIT_USAGE, result.output
    assert names in result.output


@pytest.fixture
def november_home(tmp_path, monkeypatch, replays):
    """A warehouse holding days of November 2026 only; recommending must not start."""
    wh = Warehouse(tmp_path / "gpupool")
    wh.db_path.parent.mkdir(parents=True)
    with duckdb.connect(str(wh.db_path)) as con:
        con.execute("create schema metrics; create table metrics.pool_daily as select date '2026-11-02' as day")
    monkeypatch.setattr(run, "recommend_month", lambda *args, **_kwargs: replays.append(args))
    return wh.home


def test_recommend_refuses_a_month_without_data_naming_the_months_loaded(november_home, replays):
    result = CliRunner().invoke(main, ["recommend", "--home", str(november_home), "--month", "2026-10"])
    assert replays == []
    assert result.exit_code == EXIT_USAGE, result.output
    assert "months loaded: 2026-11" in result.output
