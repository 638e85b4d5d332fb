"""dcgm-exporter text exposition: the three real scrapes, and broken or unusual input."""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
from pathlib import Path

import polars as pl
import pytest
from prometheus_client.parser import text_string_to_metric_families

from pipelines.contracts import contract
from pipelines.paths import REPO_ROOT
from pipelines.sources import dcgm_text
from pipelines.sources.base import ParseResult
from pipelines.sources.dcgm_text import DUPLICATE_REASON, parse_dcgm_file, parse_dcgm_text

SCRAPED = dt.datetime(2026, 3, 10, 12, 0, 0)
T0 = 1773144000000  # 2026-03-10 12:00:00 UTC in ms
LABELS = 'gpu="0",UUID="GPU-1",Hostname="n1"'
MIG_FILE = "metrics_sample_a100_mig_nvidia_docs.prom"
H100_FILE = "metrics_sample_h100_k8s_pod_labels_nvidia_aicr.prom"
PRINCETON_FILE = "metrics_sample_princeton_plazonic_fork_slurm_jobid_labels.prom"


def parse(*lines: str, sep: str = "\n", scraped_at: dt.datetime | None = SCRAPED) -> ParseResult:
    result = parse_dcgm_text(sep.join(lines) + sep, "test.prom", scraped_at=scraped_at)
    check(result)
    return result


def check(result: ParseResult) -> None:
    assert result.records_read == result.records_loaded + result.quarantine.height
    samples = result.tables["dcgm_samples"]
    assert samples.schema == contract("dcgm_samples").schema
    assert samples.height == result.records_loaded
    assert result.quarantine.schema == contract("quarantine").schema
    assert samples.select(contract("dcgm_samples").required).null_count().sum_horizontal().item() == 0
    assert (result.quarantine["stage"] == "parse").all()
    assert (result.quarantine["source"] == "dcgm_text").all()


def reasons(result: ParseResult) -> dict[int, str]:
    return dict(result.quarantine.select("line_number", "reason").rows())


def only(result: ParseResult) -> dict:
    (row,) = result.tables["dcgm_samples"].to_dicts()
    return row


# -- the real scrapes ---------------------------------------------------------------------------
@pytest.fixture
def dcgm_dir(real_data: Path) -> Path:
    return real_data / "dcgm-exporter"


def real(dcgm_dir: Path, name: str) -> ParseResult:
    result = parse_dcgm_file(dcgm_dir / name, scraped_at=SCRAPED)
    check(result)
    return result


def test_a100_mig_scrape(dcgm_dir: Path) -> None:
    result = real(dcgm_dir, MIG_FILE)
    assert (result.records_read, result.records_loaded) == (21, 21)
    samples = result.tables["dcgm_samples"]
    assert samples["host"].unique().to_list() == ["ub20-a100-k8s"]
    assert samples["uuid"].unique().to_list() == ["GPU-34319582-d595-d1c7-d1d2-179bcfa61660"]
    assert samples["device"].unique().to_list() == ["nvidia0"]
    assert samples["gpu"].unique().to_list() == [0]
    assert (samples["sampled_at"] == SCRAPED).all()
    assert samples.select("pci_bus_id", "model_name", "k8s_pod", "hpc_job", "extra_labels").null_count().row(
        0
    ) == (
        21,
        21,
        21,
        21,
        21,
    )
    mig = samples.filter(pl.col("gpu_instance_id").is_not_null())
    assert mig.height == 4
    assert mig["gpu_instance_id"].unique().to_list() == [13]
    assert mig["gpu_instance_profile"].unique().to_list() == ["1g.5gb"]
    assert sorted(mig["metric"]) == [
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ]
    engine = dict(
        samples.filter(pl.col("metric") == "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
        .select("gpu_instance_id", "value")
        .rows()
    )
    assert engine == {None: 0.995630, 13: 0.995687}
    power = samples.filter(pl.col("metric") == "DCGM_FI_DEV_POWER_USAGE")["value"].to_list()
    assert power == [409.692]
    # whole GPU first (null instance sorts first), then the MIG instance; metric order within
    assert samples["gpu_instance_id"].to_list() == [None] * 17 + [13] * 4
    assert samples.head(17)["metric"].is_sorted()


def test_h100_k8s_pod_labels_on_gpu0_only(dcgm_dir: Path) -> None:
    result = real(dcgm_dir, H100_FILE)
    assert (result.records_read, result.records_loaded) == (30, 30)
    samples = result.tables["dcgm_samples"]
    assert samples["host"].unique().to_list() == ["gpu-node-1"]
    assert samples["model_name"].unique().to_list() == ["NVIDIA H100 80GB HBM3"]
    assert dict(samples.group_by("metric").len().rows()) == {
        "DCGM_FI_DEV_GPU_TEMP": 8,
        "DCGM_FI_DEV_POWER_USAGE": 8,
        "DCGM_FI_DEV_GPU_UTIL": 8,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 6,
    }
    pods = samples.filter(pl.col("k8s_pod").is_not_null())
    assert pods["gpu"].unique().to_list() == [0]
    assert pods.height == 4
    assert pods.select("k8s_namespace", "k8s_pod", "k8s_container").unique().rows() == [
        ("dynamo-workload", "vllm-agg-0-vllmdecodeworker-s65j5", "main")
    ]
    assert samples.filter(pl.col("gpu") != 0).select("k8s_namespace", "k8s_container").null_count().row(
        0
    ) == (26, 26)
    # pod_uid="" is an absent label; the driver version is kept verbatim
    assert samples["extra_labels"].unique().to_list() == ['DCGM_FI_DRIVER_VERSION="580.105.08"']
    gpu5 = samples.filter(pl.col("gpu") == 5)
    assert gpu5.select("uuid", "pci_bus_id", "device").unique().rows() == [
        ("GPU-39e28159-8c62-ee71-64db-b748edd61e15", "00000000:A8:00.0", "nvidia5")
    ]
    temp = samples.filter(pl.col("metric") == "DCGM_FI_DEV_GPU_TEMP").sort("gpu")["value"].to_list()
    assert temp == [30, 29, 26, 29, 28, 26, 28, 26]
    assert (
        samples.filter((pl.col("metric") == "DCGM_FI_DEV_POWER_USAGE") & (pl.col("gpu") == 0))["value"].item()
        == 113.611
    )


def test_princeton_fork_jobid_is_hpc_job(dcgm_dir: Path) -> None:
    result = real(dcgm_dir, PRINCETON_FILE)
    assert (result.records_read, result.records_loaded, result.records_quarantined) == (3, 1, 2)
    row = only(result)
    assert row["hpc_job"] == "51234567"
    assert (row["host"], row["gpu"], row["gpu_instance_id"], row["gpu_instance_profile"]) == (
        "della-l01g1",
        0,
        7,
        "1g.10gb",
    )
    assert row["model_name"] == "NVIDIA A100 80GB PCIe"
    assert row["uuid"] == "GPU-d6dd33b9-e50e-997c-f303-c8f7312fa498"
    assert (row["metric"], row["value"]) == ("DCGM_FI_DEV_FB_USED", 8543.0)
    assert row["extra_labels"] == 'DCGM_FI_DRIVER_VERSION="535.104.05",userid="123456"'
    # the fork's per-GPU job metrics carry minor_number/name/uuid but no host label
    assert reasons(result) == {2: "missing host label", 3: "missing host label"}
    assert result.quarantine["raw"][0].startswith('nvidia_gpu_jobId{minor_number="0"')


@pytest.mark.parametrize("name", [MIG_FILE, H100_FILE, PRINCETON_FILE])
def test_agrees_with_prometheus_client(dcgm_dir: Path, name: str) -> None:
    text = (dcgm_dir / name).read_text()
    expected = sorted(
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if v)), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    )
    result = real(dcgm_dir, name)
    assert result.records_read == len(expected)
    loaded = result.tables["dcgm_samples"]
    assert sorted(zip(loaded["metric"], loaded["value"], strict=True)) == sorted(
        (m, v) for m, labels, v in expected if dict(labels).keys() & {"Hostname", "hostname", "instance"}
    )


def test_file_mtime_is_the_scrape_time(dcgm_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "scrape.prom"
    path.write_bytes((dcgm_dir / MIG_FILE).read_bytes())
    os.utime(path, (1773144000, 1773144000))
    result = parse_dcgm_file(path)
    assert result.tables["dcgm_samples"]["sampled_at"].unique().to_list() == [SCRAPED]
    assert result.tables["dcgm_samples"]["source_file"].unique().to_list() == [str(path)]


def test_loads_into_the_warehouse(dcgm_dir: Path, warehouse) -> None:
    result = real(dcgm_dir, PRINCETON_FILE)
    report = warehouse.replace_partition(
        "dcgm_text",
        SCRAPED.date(),
        result.tables,
        result.quarantine,
        1,
        result.records_read,
        result.records_loaded,
    )
    assert (report.records_read, report.records_loaded, report.records_quarantined) == (3, 1, 2)
    with warehouse.connect(read_only=True) as con:
        assert con.sql("select hpc_job, gpu_instance_id, value from raw.dcgm_samples").fetchall() == [
            ("51234567", 7, 8543.0)
        ]
        assert con.sql("select line_number, reason from ops.quarantine order by 1").fetchall() == [
            (2, "missing host label"),
            (3, "missing host label"),
        ]


# -- broken and unusual input -------------------------------------------------------------------
def test_truncated_lines() -> None:
    result = parse(
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30 {T0}",
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="n',
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="n1"',
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}}",
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} ",
        "DCGM_FI_DEV_GPU_TE",
    )
    assert result.records_loaded == 1
    assert reasons(result) == {
        2: "label value not closed",
        3: "label block not closed",
        4: "no value",
        5: "no value",
        6: "no value",
    }
    assert result.quarantine["raw"][0] == 'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1",Hostname="n'


def test_bad_values_and_sentinels() -> None:
    result = parse(
        f"DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} NaN {T0}",
        f"DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} 9223372036854775794 {T0 + 1}",
        f"DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} 9223372036854775792 {T0 + 2}",
        f"DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} 9223372036854775795 {T0 + 3}",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 140737488355329.000000 {T0}",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} +Inf {T0 + 1}",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} -Inf {T0 + 2}",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 12,5 {T0 + 3}",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 1 1773144000.5",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 1 {T0} trailing",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 9223372036854775791 {T0 + 4}",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 1.5e3 {T0 + 5}",
        f"DCGM_FI_DEV_POWER_USAGE{{{LABELS}}} 9223372036854775800 {T0 + 6}",
    )
    assert reasons(result) == {
        1: "value is NaN",
        2: "DCGM int64 not supported sentinel 9223372036854775794",
        3: "DCGM int64 blank sentinel 9223372036854775792",
        4: "DCGM int64 not permissioned sentinel 9223372036854775795",
        5: "DCGM fp64 not found sentinel 140737488355329.0",
        6: "value is +Inf (not a finite number)",
        7: "value is -Inf (not a finite number)",
        8: "value is not a number: '12,5'",
        9: "timestamp is not an integer (milliseconds): '1773144000.5'",
        10: "unexpected text after the timestamp: 'trailing'",
        13: "DCGM int64 blank sentinel range (>= 9223372036854775792): 9223372036854775800",
    }
    assert result.tables["dcgm_samples"]["value"].to_list() == [9223372036854775791.0, 1500.0]


def test_duplicates_and_out_of_order_timestamps() -> None:
    result = parse(
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30 {T0 + 15000}",
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 29 {T0}",
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 31 {T0 + 15000}",
        # same series: label order and an empty label do not make another series
        f'DCGM_FI_DEV_GPU_TEMP{{Hostname="n1",gpu="0",UUID="GPU-1",pod=""}} 32 {T0}',
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 28 {T0 - 15000}",
        f"DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} 5 {T0}",
    )
    assert reasons(result) == {3: DUPLICATE_REASON, 4: DUPLICATE_REASON}
    samples = result.tables["dcgm_samples"]
    assert samples.select("metric", "value").rows() == [
        ("DCGM_FI_DEV_GPU_TEMP", 28.0),
        ("DCGM_FI_DEV_GPU_TEMP", 29.0),
        ("DCGM_FI_DEV_GPU_TEMP", 30.0),
        ("DCGM_FI_DEV_GPU_UTIL", 5.0),
    ]
    assert samples["sampled_at"].head(3).is_sorted()


def test_duplicate_after_a_rejected_first_line_loads() -> None:
    result = parse(f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} NaN {T0}", f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30 {T0}")
    assert reasons(result) == {1: "value is NaN"}
    assert only(result)["value"] == 30.0


def test_lines_without_timestamp_are_duplicates_within_one_scrape() -> None:
    result = parse(f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30", f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 31")
    assert reasons(result) == {2: DUPLICATE_REASON}
    assert only(result)["sampled_at"] == SCRAPED


def test_unknown_labels_and_escapes_kept_verbatim() -> None:
    line = (
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n1",err_code="7",'
        'note="say \\"hi\\", then {go}",path="C:\\\\gpu\\nx",modelName="A \\"B\\", C"} 5'
    )
    row = only(parse(line))
    assert row["extra_labels"] == 'err_code="7",note="say \\"hi\\", then {go}",path="C:\\\\gpu\\nx"'
    assert row["model_name"] == 'A "B", C'
    assert (row["host"], row["gpu"], row["value"]) == ("n1", 0, 5.0)


def test_lowercase_and_renamed_label_variants() -> None:
    result = parse(
        'DCGM_FI_DEV_FB_USED{gpu="1",hostname="n2",uuid="GPU-x",pod_name="p",pod_namespace="ns",'
        'container_name="c",hpc_job="4242"} 6',
        'DCGM_FI_DEV_FB_USED{minor_number="2",instance="10.0.0.5:9400",job="dcgm",exported_pod="ep",'
        'exported_namespace="ens",exported_container="ec",pod="dcgm-exporter-abc",namespace="gpu-operator"} 7',
    )
    rows = {r["gpu"]: r for r in result.tables["dcgm_samples"].to_dicts()}
    assert (rows[1]["host"], rows[1]["uuid"], rows[1]["k8s_pod"], rows[1]["k8s_namespace"]) == (
        "n2",
        "GPU-x",
        "p",
        "ns",
    )
    assert (rows[1]["k8s_container"], rows[1]["hpc_job"], rows[1]["extra_labels"]) == ("c", "4242", None)
    # Prometheus renamed the exporter's pod labels; the scrape target's own stay in extra_labels
    assert (rows[2]["host"], rows[2]["k8s_pod"], rows[2]["k8s_namespace"], rows[2]["k8s_container"]) == (
        "10.0.0.5",
        "ep",
        "ens",
        "ec",
    )
    assert (
        rows[2]["extra_labels"]
        == 'instance="10.0.0.5:9400",job="dcgm",pod="dcgm-exporter-abc",namespace="gpu-operator"'
    )


def test_missing_and_invalid_labels() -> None:
    result = parse(
        "up 1",
        'DCGM_FI_DEV_FB_USED{Hostname="n1"} 8',
        'DCGM_FI_DEV_FB_USED{gpu="0"} 8',
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname=""} 8',
        'DCGM_FI_DEV_FB_USED{gpu="zero",Hostname="n1"} 8',
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n1",GPU_I_ID="x"} 8',
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n1",gpu="1"} 8',
        'DCGM_FI_DEV_FB_USED{gpu=0,Hostname="n1"} 8',
        'bad-name{gpu="0",Hostname="n1"} 8',
    )
    assert result.records_loaded == 0
    assert reasons(result) == {
        1: "missing host label",
        2: "missing gpu label",
        3: "missing host label",
        4: "missing host label",
        5: "gpu label is not an integer: 'zero'",
        6: "GPU_I_ID label is not an integer: 'x'",
        7: "duplicate label gpu",
        8: "malformed label block",
        9: "invalid metric name 'bad-name'",
    }


def test_brace_inside_label_value() -> None:
    result = parse(
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n1",note="a}b"} 8 ' + str(T0),
        'DCGM_FI_DEV_FB_USED{gpu="0",Hostname="n1",note="a}b',
    )
    assert reasons(result) == {2: "label value not closed"}
    assert only(result)["extra_labels"] == 'note="a}b"'


def test_crlf_comments_blanks_and_odd_spacing() -> None:
    result = parse(
        "# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).",
        "# TYPE DCGM_FI_DEV_GPU_TEMP gauge",
        "",
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30 {T0}",
        "   ",
        "  # indented comment {with braces}",
        f"  DCGM_FI_DEV_GPU_UTIL{{{LABELS}}}\t7 \t {T0}  ",
        'DCGM_FI_DEV_FB_USED { gpu = "0" , Hostname = "n1" , } 9',
        sep="\r\n",
    )
    assert (result.records_read, result.records_loaded) == (3, 3)
    assert result.tables["dcgm_samples"].select("metric", "value").rows() == [
        ("DCGM_FI_DEV_FB_USED", 9.0),
        ("DCGM_FI_DEV_GPU_TEMP", 30.0),
        ("DCGM_FI_DEV_GPU_UTIL", 7.0),
    ]


def test_line_numbers_count_every_line() -> None:
    result = parse(
        "# c",
        "",
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} x",
        "",
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} y",
        sep="\r\n",
    )
    assert list(reasons(result)) == [3, 5]


def test_empty_input() -> None:
    for text in ("", "\n\n", "# HELP x y\n# TYPE x gauge\n"):
        result = parse_dcgm_text(text, "empty.prom")
        check(result)
        assert (result.records_read, result.records_loaded, result.quarantine.height) == (0, 0, 0)


def test_no_timestamp_and_no_scrape_time_is_an_error() -> None:
    with pytest.raises(
        ValueError, match=r"memory\.prom: 1 sample lines carry no timestamp \(first: line 2\)"
    ):
        parse_dcgm_text(f"# c\nDCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30\n", "memory.prom")
    # every line has its own timestamp: no scrape time needed
    result = parse_dcgm_text(f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30 {T0}\n", "memory.prom")
    assert only(result)["sampled_at"] == SCRAPED


def test_aware_scrape_time_is_converted_to_utc() -> None:
    cest = dt.timezone(dt.timedelta(hours=2))
    result = parse(
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30", scraped_at=dt.datetime(2026, 3, 10, 14, 0, tzinfo=cest)
    )
    assert only(result)["sampled_at"] == SCRAPED


def test_invalid_utf8_and_unit_separator_lines() -> None:
    data = (
        f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30 {T0}\n".encode()
        + b'DCGM_FI_DEV_GPU_TEMP{gpu="1",Hostname="n\xff"} 31 1773144000000\n'
        + b'DCGM_FI_DEV_GPU_TEMP{gpu="2",Hostname="n1",x="\x1f"} 32 1773144000000\n'
    )
    result = parse_dcgm_text(data, "bytes.prom", scraped_at=SCRAPED)
    check(result)
    assert reasons(result) == {2: "line is not valid UTF-8"}
    assert "\ufffd" in result.quarantine["raw"][0]
    assert result.tables["dcgm_samples"]["gpu"].to_list() == [0, 2]


def test_str_and_bytes_input_agree() -> None:
    text = f"DCGM_FI_DEV_GPU_TEMP{{{LABELS}}} 30 {T0}\nDCGM_FI_DEV_GPU_TEMP{{{LABELS}}} NaN {T0 + 1}\n"
    a = parse_dcgm_text(text, "x", scraped_at=SCRAPED)
    b = parse_dcgm_text(text.encode(), "x", scraped_at=SCRAPED)
    assert a.tables["dcgm_samples"].equals(b.tables["dcgm_samples"])
    assert a.quarantine.equals(b.quarantine)


def test_fast_and_slow_paths_agree() -> None:
    # The same samples written as dcgm-exporter does (fast path) and with spacing that the
    # regex path reads: the loaded rows must be equal.
    plain = [f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",Hostname="n1"}} {30 + g} {T0}' for g in range(4)]
    odd = [
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",Hostname="n1"}}  30 {T0}',
        f'\tDCGM_FI_DEV_GPU_TEMP{{gpu="1",Hostname="n1"}} 31\t{T0}',
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="2",Hostname="n1"}}32 {T0} ',
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="3",Hostname="n1",}} 33 {T0}',
    ]
    assert parse(*plain).tables["dcgm_samples"].equals(parse(*odd).tables["dcgm_samples"])


def test_series_keys_survive_hash_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [
        f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",Hostname="n{h}"}} {g} {T0}' for h in range(3) for g in range(4)
    ]
    lines += [f'DCGM_FI_DEV_GPU_TEMP{{gpu="0",Hostname="n0"}} 9 {T0}', 'DCGM_FI_DEV_GPU_TEMP{gpu="0"} 1']
    expected = parse(*lines)
    monkeypatch.setattr(dcgm_text, "_key_hash", lambda: pl.lit(7, dtype=pl.UInt64))  # every key collides
    colliding = parse(*lines)
    assert colliding.tables["dcgm_samples"].equals(expected.tables["dcgm_samples"])
    assert colliding.quarantine.equals(expected.quarantine)
    assert reasons(colliding) == {13: DUPLICATE_REASON, 14: "missing host label"}


def test_bench_generator_agrees_with_prometheus_client() -> None:
    spec = importlib.util.spec_from_file_location(
        "bench_dcgm_ingest", REPO_ROOT / "bench" / "bench_dcgm_ingest.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data, samples = bench.generate(1)
    result = parse_dcgm_text(data, "bench.prom")
    check(result)
    assert (result.records_read, result.records_loaded) == (samples, samples)
    client = [s for family in text_string_to_metric_families(data.decode()) for s in family.samples]
    assert len(client) == samples
    ours = result.tables["dcgm_samples"]
    assert ours["value"].sum() == pytest.approx(sum(s.value for s in client))
    assert ours["k8s_pod"].drop_nulls().n_unique() == bench.HOSTS * bench.GPUS_PER_HOST // 2
    assert ours["host"].n_unique() == bench.HOSTS
    assert ours["extra_labels"].unique().to_list() == ['DCGM_FI_DRIVER_VERSION="580.105.08"']


def test_the_exporters_own_pod_labels_are_not_read_as_a_workload():
    # Behind Prometheus' pod discovery an idle GPU carries only the exporter's own pod labels;
    # a busy one has the workload's as exported_* and the exporter's as plain labels.
    text = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="n1",container="nvidia-dcgm-exporter",'
        'namespace="gpu-operator",pod="nvidia-dcgm-exporter-x7k2p",instance="10.0.0.5:9400"} 0 1793404800000\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="n1",container="nvidia-dcgm-exporter",'
        'namespace="gpu-operator",pod="nvidia-dcgm-exporter-x7k2p",exported_pod="train-0",'
        'exported_namespace="vision",exported_container="main",instance="10.0.0.5:9400"} 90 1793404800000\n'
    )
    rows = parse_dcgm_text(text, "relabelled.prom").tables["dcgm_samples"].sort("gpu")
    idle, busy = rows.row(0, named=True), rows.row(1, named=True)
    assert (idle["k8s_pod"], idle["k8s_namespace"], idle["k8s_container"]) == (None, None, None)
    assert 'pod="nvidia-dcgm-exporter-x7k2p"' in idle["extra_labels"]
    assert (busy["k8s_pod"], busy["k8s_namespace"], busy["k8s_container"]) == ("train-0", "vision", "main")
