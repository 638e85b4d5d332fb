"""The sample generator: deterministic, well-formed in every format, and telemetry that follows the jobs."""
from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path

import polars as pl
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipelines.sample import SampleManifest, generate_sample

START = dt.date(2026, 11, 1)
DAYS = 2  # the idle session runs across the first midnight; every known fact falls inside two days
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")
SAMPLE_LINE = (r'^(?<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?<labels>[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"'
               r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*")*)\} (?<value>-?[0-9]+(?:\.[0-9]+)?) (?<ts>[0-9]+)$')
EVENT_TYPES = {"submit", "admit", "start", "requeue", "preempt", "finish"}
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
DECISIONS = {"allow", "deny", "applied", "refused", "already_done", "dry_run", "proposed", "approved"}


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> SampleManifest:
    return generate_sample(tmp_path_factory.mktemp("sample"), START, days=DAYS, seed=7)


def ts(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=None)


def read_jsonl(paths) -> list[dict]:
    return [json.loads(line) for p in paths for line in p.read_text().splitlines()]


def read_prom(path: Path) -> pl.DataFrame:
    """Samples of an exposition file (comment lines dropped), with the labels the tests need."""
    lines = pl.DataFrame({"line": path.read_text().splitlines()})
    samples = lines.filter(~pl.col("line").str.starts_with("#"))
    parsed = samples.with_columns(pl.col("line").str.extract_groups(SAMPLE_LINE).alias("p")).unnest("p")
    bad = parsed.filter(pl.col("metric").is_null())
    assert bad.height == 0, f"{path}: not valid exposition: {bad['line'][0]}"
    label = lambda name: pl.col("labels").str.extract(rf'(?:^|,){name}="([^"]*)"')
    return parsed.select(
        "metric",
        host=label("Hostname"),
        gpu=label("gpu").cast(pl.Int32),
        instance=label("GPU_I_ID").cast(pl.Int32),
        hpc_job=label("hpc_job"),
        series=pl.col("labels").str.replace(r',hpc_job="[^"]*"', ""),
        value=pl.col("value").cast(pl.Float64),
        at=pl.from_epoch(pl.col("ts").cast(pl.Int64), time_unit="ms"),
    )


@pytest.fixture(scope="module")
def telemetry(sample) -> pl.DataFrame:
    return pl.concat([read_prom(p) for p in sample.files["dcgm_text"]])


@pytest.fixture(scope="module")
def events(sample) -> list[dict]:
    return read_jsonl(sample.files["allocator_events"])


@pytest.fixture(scope="module")
def holdings(sample, events) -> pl.DataFrame:
    """Who held which GPU (or instance, or replica) when, rebuilt from the event log alone."""
    window_end = sample.window[1]
    starts = pl.DataFrame(
        [{"job_id": e["job_id"], "attempt": e["attempt"], "start": ts(e["ts"]), "host": g["host"], "gpu": g["gpu"],
          "instance": g.get("gpu_instance_id"), "share": g.get("gpu_instance_profile") is not None}
         for e in events if e["type"] == "start" for g in e["gpus"]])
    ends = pl.DataFrame(
        [{"job_id": e["job_id"], "attempt": e["attempt"], "end": ts(e["ts"])}
         for e in events if e["type"] in {"preempt", "requeue", "finish"}])
    return (
        starts.join(ends, on=["job_id", "attempt"], how="left")
        .with_columns(pl.col("end").fill_null(window_end),
                      # telemetry keys MIG instances by GPU_I_ID; a time-sliced replica is its whole GPU
                      instance=pl.when(pl.col("share")).then(pl.col("instance")).cast(pl.Int32),
                      gpu=pl.col("gpu").cast(pl.Int32))
    )


def activity(telemetry: pl.DataFrame) -> pl.DataFrame:
    """One activity value per series sample: GR_ENGINE_ACTIVE where exported, else GPU_UTIL / 100."""
    prof = telemetry.filter(pl.col("metric") == "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    util = telemetry.filter(pl.col("metric") == "DCGM_FI_DEV_GPU_UTIL").join(
        prof.select("host").unique(), on="host", how="anti").with_columns(pl.col("value") / 100)
    return pl.concat([prof, util])


def test_layout_and_manifest(sample):
    dates = [START + dt.timedelta(days=i) for i in range(DAYS)]
    assert list(sample.dates) == dates
    expected = {"allocator_pool": "pool.json", "allocator_events": "events.jsonl",
                "allocator_audit": "audit.jsonl"}
    for source, name in expected.items():
        assert [p.relative_to(sample.out_dir) for p in sample.files[source]] == [
            Path(source, d.isoformat(), name) for d in dates]
    assert [p.relative_to(sample.out_dir) for p in sample.files["dcgm_text"]] == [
        Path("dcgm_text", d.isoformat(), f"{h}.prom") for d in dates for h in sample.hosts]
    assert sample.jobs >= 12
    assert sample.total_bytes < 130_000_000  # two days at one sample a minute


def test_same_seed_gives_identical_bytes_and_a_longer_window_repeats_the_first_days(tmp_path, sample):
    a = generate_sample(tmp_path / "a", START, days=1, seed=7)
    b = generate_sample(tmp_path / "b", START, days=1, seed=7)
    for source, paths in a.files.items():
        for pa, pb, p2 in zip(paths, b.files[source], sample.files[source], strict=False):
            assert pa.read_bytes() == pb.read_bytes(), pa
            assert pa.read_bytes() == p2.read_bytes(), f"{pa} differs from the 2-day window's first day"


def test_another_seed_gives_other_background_and_noise(tmp_path, sample):
    other = generate_sample(tmp_path / "c", START, days=1, seed=8)
    for source in ("allocator_events", "dcgm_text"):
        assert other.files[source][0].read_bytes() != sample.files[source][0].read_bytes(), source
    # the scenario itself does not depend on the seed
    assert other.facts == sample.facts
    assert other.files["allocator_pool"][0].read_bytes() == sample.files["allocator_pool"][0].read_bytes()


def test_events_are_valid_lines_of_the_event_format(sample, events):
    assert len(events) > 50
    assert len({e["event_id"] for e in events}) == len(events)
    for path in sample.files["allocator_events"]:
        day = path.parent.name
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            e = json.loads(line)
            where = f"{path.name} {day} line {n}"
            assert e["schema"] == "gpupool.event/v1", where
            assert RFC3339.match(e["ts"]) and e["ts"].startswith(day), where
            assert e["type"] in EVENT_TYPES, where
            assert isinstance(e["job_id"], str) and isinstance(e["event_id"], str), where
            assert isinstance(e["attempt"], int) and e["attempt"] >= 1, where
            if e["type"] == "submit":
                for key in ("tenant", "queue", "user", "job_name", "template", "gpu_model"):
                    assert isinstance(e[key], str), f"{where}: {key}"
                assert e["template"] in {"training", "inference", "experiment", "interactive"}, where
                assert isinstance(e["gpus"], int) and e["gpus"] >= 1, where
                assert e["share_mode"] in {"whole", "mig", "timeslice"}, where
                if e["template"] == "training":
                    assert {"expected_runtime_s", "checkpoint_policy"} <= set(e["spec"]), where
                if e["template"] == "inference":
                    assert {"min_replicas", "rollback"} <= set(e["spec"]), where
            if e["type"] == "start":
                assert e["gpus"] and all({"host", "gpu", "uuid", "fraction"} <= set(g) for g in e["gpus"]), where
            if e["type"] == "finish":
                assert e["state"] in FINAL_STATES, where
    stamps = [ts(e["ts"]) for e in events]
    assert stamps == sorted(stamps)


def test_attempts_follow_the_log_rules(events):
    """Each start carries 1 + the number of preempt/requeue lines before it; nothing follows a finish."""
    by_job: dict[str, list[dict]] = {}
    for e in events:
        by_job.setdefault(e["job_id"], []).append(e)
    for job_id, evs in by_job.items():
        assert evs[0]["type"] == "submit", job_id
        ended = 0
        for e in evs[1:]:
            if e["type"] in {"admit", "start"}:
                assert e["attempt"] == ended + 1, f"{job_id}: {e}"
            if e["type"] in {"preempt", "requeue"}:
                assert e["attempt"] == ended + 1, f"{job_id}: {e}"
                ended += 1
        finishes = [i for i, e in enumerate(evs) if e["type"] == "finish"]
        assert finishes in ([], [len(evs) - 1]), job_id


def test_audit_records_are_valid_and_cover_the_governance_cases(sample):
    records = read_jsonl(sample.files["allocator_audit"])
    for r in records:
        assert r["schema"] == "gpupool.audit/v1"
        assert RFC3339.match(r["ts"])
        for key in ("audit_id", "actor", "action", "object_kind", "object_name", "decision"):
            assert isinstance(r[key], str), f"{r}: {key}"
        assert r["decision"] in DECISIONS, r
    actions = [(r["action"], r["object_name"], r["decision"]) for r in records]
    assert sum(a == "quota.update" for a, _, _ in actions) >= 3
    assert any(a == "permission.grant" for a, _, _ in actions)
    assert any(a == "approval.grant" and d == "approved" for a, _, d in actions)
    f = sample.facts
    assert ("enforcement.remind", f.idle_session_job_id, "applied") in actions
    assert ("enforcement.reclaim", f.idle_session_job_id, "applied") in actions
    assert ("enforcement.reclaim", f.refused_reclaim_job_id, "refused") in actions


def test_pool_snapshot_describes_the_pool_and_applies_quota_changes(sample):
    first, second = (json.loads(p.read_text()) for p in sample.files["allocator_pool"])
    assert first["schema"] == "gpupool.pool/v1" and first["snapshot_at"] == "2026-11-01T00:00:00Z"
    gpus = {n["host"]: n["gpus"] for n in first["nodes"]}
    assert {h: len(g) for h, g in gpus.items()} == {"h100-01": 8, "h100-02": 8, "a100-01": 8, "l40s-01": 4}
    mig = gpus["a100-01"][0]
    assert mig["share_mode"] == "mig"
    assert sorted(i["profile"] for i in mig["instances"]) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert sum(i["fraction"] for i in mig["instances"]) == pytest.approx(1.0, abs=1e-5)
    assert gpus["l40s-01"][3]["share_mode"] == "timeslice" and gpus["l40s-01"][3]["replicas"] == 4
    assert {q["tenant"] for q in first["queues"]} == {"vision", "nlp", "speech", "platform"}
    quota = lambda snap, queue: next(q["quota"] for q in snap["queues"] if q["queue"] == queue)
    assert quota(first, "vision-train")["A100"] == 2
    assert quota(second, "vision-train")["A100"] == 4  # quota.update on day one


def test_prometheus_client_parses_the_exposition(sample):
    day = sample.files["dcgm_text"][: len(sample.hosts)]
    l40s = next(p for p in day if p.name == "l40s-01.prom")
    families = list(text_string_to_metric_families(l40s.read_text()))
    # an exporter without profiling metrics: activity only as GPU_UTIL
    assert [f.name for f in families] == ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE",
                                          "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED"]
    day_start = dt.datetime(2026, 11, 1, tzinfo=dt.UTC).timestamp()
    for f in families:
        assert f.type == "gauge" and len(f.samples) >= 4 * 1440
        assert all(day_start <= s.timestamp < day_start + 86400 for s in f.samples)
    # the MIG node, first hour only (the pure-Python parser is slow on a whole day)
    a100 = next(p for p in day if p.name == "a100-01.prom")
    lines = pl.DataFrame({"line": a100.read_text().splitlines()})
    hour = lines.filter(pl.col("line").str.starts_with("#")
                        | (pl.col("line").str.extract(r" (\d+)$").cast(pl.Int64) < (day_start + 3600) * 1000))
    families = {f.name: f for f in text_string_to_metric_families("\n".join(hour["line"].to_list()) + "\n")}
    instances = {s.labels.get("GPU_I_PROFILE") for s in families["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples}
    assert instances == {None, "3g.40gb", "2g.20gb", "1g.10gb"}
    assert all("GPU_I_ID" not in s.labels for s in families["DCGM_FI_DEV_GPU_UTIL"].samples)


def test_exposition_structure(sample, telemetry):
    for path in sample.files["dcgm_text"]:
        comments = [line for line in path.read_text().splitlines() if line.startswith("#")]
        names = [line.split()[2] for line in comments]
        assert names[::2] == names[1::2] and len(set(names)) == len(names) // 2, f"{path}: HELP/TYPE once each"
    # every series (labels without hpc_job) has one sample a minute
    per_series = telemetry.group_by("metric", "series", pl.col("at").dt.date().alias("day")).agg(
        pl.col("at").n_unique().alias("n"), pl.col("at").unique().sort().diff().drop_nulls().unique().alias("steps"))
    assert per_series["n"].unique().to_list() == [1440]
    assert per_series["steps"].explode().unique().to_list() == [dt.timedelta(minutes=1)]
    # a sample repeated for several jobs is the time-sliced GPU's
    dup = telemetry.group_by("metric", "series", "at").len().filter(pl.col("len") > 1)
    assert dup.join(telemetry, on=["metric", "series", "at"]).select("host", "gpu").unique().rows() == [("l40s-01", 3)]


def test_telemetry_carries_hpc_job_only_while_the_job_holds_the_gpu(telemetry, holdings):
    tagged = telemetry.filter(pl.col("hpc_job").is_not_null())
    assert tagged.height > 0
    matched = tagged.join(holdings, left_on=["hpc_job", "host", "gpu", "instance"],
                          right_on=["job_id", "host", "gpu", "instance"], how="left", nulls_equal=True).filter(
        (pl.col("at") >= pl.col("start")) & (pl.col("at") < pl.col("end")))
    assert matched.select("metric", "series", "hpc_job", "at").unique().height == tagged.height
    # and every held GPU carries its job's label
    held = telemetry.filter(pl.col("metric") == "DCGM_FI_DEV_FB_USED").join(
        holdings, on=["host", "gpu", "instance"], how="inner", nulls_equal=True).filter(
        (pl.col("at") >= pl.col("start")) & (pl.col("at") < pl.col("end")))
    assert held.filter(pl.col("hpc_job") == pl.col("job_id")).select("job_id", "at").unique().height == \
        held.select("job_id", "at").unique().height


def test_activity_is_zero_on_unallocated_gpus_except_the_rogue(sample, telemetry):
    f = sample.facts
    act = activity(telemetry).filter(pl.col("hpc_job").is_null())
    rogue = (pl.col("host") == f.rogue_gpu[0]) & (pl.col("gpu") == f.rogue_gpu[1]) & \
        (pl.col("at") >= f.rogue_from) & (pl.col("at") < f.rogue_until)
    assert act.filter(~rogue)["value"].max() == 0.0
    assert act.filter(rogue)["value"].mean() > 0.4
    assert act.filter(rogue).height == 6 * 60
    fb = telemetry.filter((pl.col("metric") == "DCGM_FI_DEV_FB_USED") & pl.col("hpc_job").is_null())
    assert fb.filter(~rogue)["value"].max() == 0.0 and fb.filter(rogue)["value"].min() > 20_000


def test_activity_follows_the_job_profiles(sample, telemetry, events):
    f = sample.facts
    act = activity(telemetry).filter(pl.col("hpc_job").is_not_null())
    templates = {e["job_id"]: e["template"] for e in events if e["type"] == "submit"}
    act = act.with_columns(template=pl.col("hpc_job").replace_strict(templates))
    on = lambda host, gpu: (pl.col("host") == host) & (pl.col("gpu") == gpu)

    training = act.filter((pl.col("template") == "training") & (pl.col("hpc_job") != f.oversized_job_id))
    assert training["value"].mean() == pytest.approx(0.86, abs=0.03)
    assert training["value"].min() >= 0.5

    oversized = act.filter(pl.col("hpc_job") == f.oversized_job_id)
    busy = oversized.filter(on(*f.oversized_busy_gpu))
    assert busy["value"].mean() == pytest.approx(0.86, abs=0.03)
    assert oversized.filter(~on(*f.oversized_busy_gpu))["value"].max() < 0.01
    assert oversized.select("gpu").n_unique() == 8

    idle = act.filter(pl.col("hpc_job") == f.idle_session_job_id)
    before, during = idle.filter(pl.col("at") < f.idle_from), idle.filter(pl.col("at") >= f.idle_from)
    assert before["value"].mean() > 0.1 and during["value"].max() < 0.05
    assert during["at"].min() < dt.datetime.combine(f.idle_until.date(), dt.time()) <= during["at"].max()
    assert during.height >= 13 * 60  # idle for hours, across midnight, until the reclaim

    for job_id in f.inference_job_ids:
        hourly = act.filter(pl.col("hpc_job") == job_id).group_by(pl.col("at").dt.hour()).agg(pl.col("value").mean())
        assert 0.15 <= hourly["value"].min() < 0.3 and 0.6 < hourly["value"].max() <= 0.75, job_id

    experiments = act.filter(pl.col("template") == "experiment")
    assert experiments["value"].std() > 0.2  # bursty

    # memory follows too: held while allocated
    fb = telemetry.filter((pl.col("metric") == "DCGM_FI_DEV_FB_USED") & pl.col("hpc_job").is_not_null())
    assert fb["value"].min() > 0


def test_known_facts_are_in_the_logs(sample, events, telemetry, holdings):
    f = sample.facts
    of = lambda job_id, kind: [e for e in events if e["job_id"] == job_id and e["type"] == kind]

    idle_end = of(f.idle_session_job_id, "finish")[0]
    assert idle_end["state"] == "CANCELLED" and idle_end["reason"] == "reclaimed: idle"
    assert f.idle_from.date() < f.idle_until.date()
    assert dt.timedelta(0) <= ts(idle_end["ts"]) - f.idle_until < dt.timedelta(minutes=1)

    preempt = of(f.preempted_job_id, "preempt")[0]
    assert preempt["reason"] == f"preempted by job {f.preempted_by_job_id}" and ts(preempt["ts"]) == f.preempted_at
    resumed = of(f.preempted_job_id, "start")[1]
    assert resumed["attempt"] == 2 and ts(resumed["ts"]) == f.resumed_at
    assert of(f.preempted_job_id, "finish")[0]["state"] == "COMPLETED"

    requeue = of(f.retried_job_id, "requeue")[0]
    assert requeue["reason"] == "retry after failure" and requeue["attempt"] == 1
    retried = of(f.retried_job_id, "finish")[0]
    assert retried["attempt"] == 2 and retried["state"] == "COMPLETED"

    assert of(f.failed_job_id, "finish")[0]["state"] == "FAILED"
    assert of(f.cancelled_job_id, "finish")[0]["state"] == "CANCELLED"
    assert of(f.timeout_job_id, "finish")[0]["state"] == "TIMEOUT"

    profile = f.mig_slot[3]
    (mig,) = of(f.mig_job_id, "start")[0]["gpus"]
    assert (mig["host"], mig["gpu"], mig["gpu_instance_id"], mig["gpu_instance_profile"]) == f.mig_slot
    assert mig["fraction"] == pytest.approx(1 / 7, abs=1e-5)
    assert of(f.mig_job_id, "submit")[0]["mig_profile"] == profile

    shared = holdings.filter(pl.col("job_id").is_in(list(f.timeslice_job_ids)))
    assert set(shared.select("host", "gpu").rows()) == {f.timeslice_gpu}
    assert all(g["fraction"] == 0.25 for j in f.timeslice_job_ids for g in of(j, "start")[0]["gpus"])
    a, b = shared.sort("start").rows(named=True)
    assert b["start"] < a["end"]  # they share the GPU for a while

    waited = of(f.queue_wait_job_id, "start")[0]
    assert ts(waited["ts"]) - ts(of(f.queue_wait_job_id, "submit")[0]["ts"]) > dt.timedelta(hours=8)

    for job_id in f.inference_job_ids:
        assert of(job_id, "start") and not of(job_id, "finish")

    fallback = telemetry.filter(pl.col("host") == f.fallback_host)["metric"].unique().to_list()
    assert "DCGM_FI_PROF_GR_ENGINE_ACTIVE" not in fallback and "DCGM_FI_DEV_GPU_UTIL" in fallback
