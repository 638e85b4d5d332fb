"""Replays kept in the home (pipelines/capacity/replay_cache.py): a search or a what-if asked again takes
the figures of the replays run before instead of replaying, gives the same answer, and never takes a
replay of other demand, policies, catalog or code; a damaged entry is a miss, a home that cannot keep
one still answers."""
from __future__ import annotations

import dataclasses
import shutil
from importlib.metadata import version
from pathlib import Path

import pytest

from pipelines.capacity import recommend, replay_cache
from pipelines.capacity import replay as replay_module
from pipelines.capacity.recommend import load_rules, search, search_summary
from pipelines.capacity.replay import Change, kept_figures, kept_replay_key, replay, whatif
from pipelines.capacity.replay_cache import FOLDER, ReplayCache, code_digest, demand_digest, replay_key
from pipelines.cli.capacity import curve_lines
from pipelines.policies.catalog import load_catalog
from tests.capacity.tiny import advice, demand, sizes
from tests.conftest import copy_home


def _no_replay(*_args, **_kwargs):
    raise AssertionError("replayed although the replay was kept")


def _ran_now(figures) -> dict:
    """A replay's figures less what says when and whether it ran now."""
    return {k: v for k, v in dataclasses.asdict(figures).items() if k not in ("seconds", "kept")}


def test_a_search_asked_again_takes_every_replay_kept_and_finds_the_same(tmp_path: Path, monkeypatch) -> None:
    cache = ReplayCache(tmp_path)
    first = search(demand(8), advice(4), sizes(4), load_rules(), policies=False, workers=1, cache=cache)
    assert len(list((tmp_path / FOLDER).glob("*.json"))) == len(first.figures) == 4  # rounds: {0}, {4}, {2}, {1}
    monkeypatch.setattr(recommend, "_replay_size", _no_replay)
    steps: list[str] = []
    again = search(demand(8), advice(4), sizes(4), load_rules(), policies=False, workers=1, cache=cache,
                   on_step=steps.append)
    assert again.smallest == first.smallest == 2 and again.enough == first.enough
    assert {n: _ran_now(f) for n, f in again.figures.items()} == {n: _ran_now(f) for n, f in first.figures.items()}
    assert all(f.kept and f.seconds == 0.0 for f in again.figures.values())
    assert not any(s.startswith("replaying") for s in steps)
    said = curve_lines(search_summary(advice(4), again, sizes(4), load_rules()), "H100")[0]
    assert "4 replays (0 run now, 4 kept from earlier runs), 0 s of replay" in said


def test_a_kept_baseline_leaves_its_worker_to_a_size_between(tmp_path: Path) -> None:
    cache, month = ReplayCache(tmp_path), demand(8)
    baseline, _ = replay(month, policies=False)
    cache.put(kept_replay_key(demand_digest(month), month, None, False), baseline)
    steps: list[str] = []
    found = search(month, advice(4), sizes(4), load_rules(), policies=False, workers=2, cache=cache,
                   on_step=steps.append)
    assert found.figures[0].kept and _ran_now(found.figures[0]) == _ran_now(baseline)
    assert steps[0].startswith("baseline: kept from an earlier replay")
    assert steps[1] == "replaying +4 H100 nodes, +2 H100 nodes side by side"  # was: baseline and +4
    assert found.smallest == 2


def test_other_demand_policies_catalog_or_code_never_match(tmp_path: Path, monkeypatch) -> None:
    month, busier = demand(8), demand(4)
    month_key = demand_digest(month)
    assert demand_digest(demand(8)) == month_key != demand_digest(busier)
    base = kept_replay_key(month_key, month, None, False)
    assert base == kept_replay_key(demand_digest(demand(8)), demand(8), None, False)
    assert len({base, kept_replay_key(demand_digest(busier), busier, None, False),
                kept_replay_key(month_key, month, None, True),
                kept_replay_key(month_key, month, Change(add_nodes={"H100": 1}), False),
                kept_replay_key(month_key, month, Change(idle_window_minutes=15), False)}) == 5
    catalog = load_catalog()
    other = dataclasses.replace(catalog, version=catalog.version + "-edited")
    assert replay_key(month_key, "", True, catalog) != replay_key(month_key, "", True, other)
    # the code: a copy of the replaying packages, then one byte changed in one of them
    for folder in ("allocator", "pipelines/capacity", "pipelines/governance", "pipelines/policies"):
        shutil.copytree(Path(recommend.__file__).parents[2] / folder, tmp_path / "code" / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    before = code_digest(tmp_path / "code")
    planner = tmp_path / "code" / "pipelines" / "policies" / "planner.py"
    planner.write_text(planner.read_text() + "\n")
    code_digest.cache_clear()
    changed = code_digest(tmp_path / "code")
    assert changed != before
    # and the libraries that compute a replay: another Polars is another key
    monkeypatch.setattr(replay_cache, "version", lambda name: "0.0.1" if name == "polars" else version(name))
    code_digest.cache_clear()
    assert code_digest(tmp_path / "code") != changed
    code_digest.cache_clear()


@pytest.mark.parametrize("damage", ["cut short", "not an entry", "another key's entry", "other fields"])
def test_a_damaged_entry_is_a_miss_and_a_replay_replaces_it(tmp_path: Path, damage: str) -> None:
    cache, month = ReplayCache(tmp_path), demand(4)
    key = kept_replay_key(demand_digest(month), month, None, False)
    figures, _ = replay(month, policies=False)
    assert cache.put("another", figures)
    entry = (tmp_path / FOLDER / "another.json").read_text()
    (tmp_path / FOLDER / f"{key}.json").write_text({
        "cut short": entry[:len(entry) // 2], "not an entry": "[]", "another key's entry": entry,
        "other fields": f'{{"key": "{key}", "figures": {{"jobs": 1}}}}'}[damage])
    assert kept_figures(cache, key) is None
    assert cache.put(key, figures)
    assert _ran_now(kept_figures(cache, key)) == _ran_now(figures)


def test_a_home_that_cannot_keep_a_replay_still_answers(tmp_path: Path) -> None:
    (tmp_path / "capacity").write_text("a file where the folder would be")  # root ignores modes: this blocks it
    month = demand(4)
    found = search(month, advice(3), sizes(3), load_rules(), policies=False, workers=1, cache=ReplayCache(tmp_path))
    assert found.smallest == 1 and not any(f.kept for f in found.figures.values())


def test_whatif_asked_again_replays_nothing_and_prints_the_same_table(home: Path, tmp_path: Path,
                                                                    monkeypatch) -> None:
    mine = copy_home(home, tmp_path / "gpupool")
    shutil.rmtree(mine / FOLDER, ignore_errors=True)  # a fresh home: nothing kept yet
    one_node, two_nodes = Change(add_nodes={"H100": 1}), Change(add_nodes={"H100": 2})
    first = whatif(mine, one_node, parallel=False)  # no fork from the test session's threads
    assert "baseline replayed in" in first.table() and "change replayed in" in first.table()
    calls: list[Change | None] = []

    def counted(month, change=None, **options):
        calls.append(change)
        return replay(month, change, **options)

    monkeypatch.setattr(replay_module, "replay", counted)
    again = whatif(mine, one_node, parallel=False)
    assert calls == []
    assert again.rows() == first.rows()
    assert again.table().endswith("baseline kept from an earlier replay, change kept from an earlier replay")
    other = whatif(mine, two_nodes, parallel=False)
    assert calls == [two_nodes]  # another change replays; its baseline is the one kept
    assert other.baseline.kept and other.rows()[0][2] == first.rows()[0][2]
