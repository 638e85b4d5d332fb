"""Prometheus query_range / instant query JSON: the two real API examples, DCGM series, errors."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from pipelines.contracts import contract
from pipelines.sources import prometheus
from pipelines.sources.base import ParseResult
from pipelines.sources.dcgm_text import DUPLICATE_REASON, parse_dcgm_text
from pipelines.sources.prometheus import SAMPLE_COLUMNS, AnswerRejected, matrix_samples, parse_query_range

T0 = 1773144000.0  # 2026-03-10 12:00:00 UTC
GPU0 = {
    "__name__": "DCGM_FI_DEV_GPU_UTIL",
    "gpu": "0",
    "UUID": "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005",
    "pci_bus_id": "00000000:53:00.0",
    "device": "nvidia0",
    "modelName": "NVIDIA H100 80GB HBM3",
    "Hostname": "gpu-node-1",
    "DCGM_FI_DRIVER_VERSION": "580.105.08",
    "instance": "10.0.3.7:9400",
    "job": "dcgm-exporter",
    "exported_container": "main",
    "exported_namespace": "dynamo-workload",
    "exported_pod": "vllm-agg-0-vllmdecodeworker-s65j5",
    "pod": "nvidia-dcgm-exporter-x7k2p",
    "namespace": "gpu-operator",
    "pod_uid": "",
}


def matrix(*series: tuple[dict, list], **envelope: object) -> str:
    result = [{"metric": metric, "values": values} for metric, values in series]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}, **envelope})


def check(result: ParseResult) -> None:
    assert result.records_read == result.records_loaded + result.quarantine.height
    samples = result.tables["dcgm_samples"]
    assert samples.schema == contract("dcgm_samples").schema
    assert samples.height == result.records_loaded
    assert result.quarantine.schema == contract("quarantine").schema
    assert samples.select(contract("dcgm_samples").required).null_count().sum_horizontal().item() == 0
    assert (result.quarantine["source"] == "prometheus").all()
    assert (samples["source"] == "prometheus").all()


def parse(text: str) -> ParseResult:
    result = parse_query_range(text, "query.json")
    check(result)
    return result


def reasons(result: ParseResult) -> dict[int | None, str]:
    return dict(result.quarantine.select("line_number", "reason").rows())


# -- the real API examples ----------------------------------------------------------------------
@pytest.fixture
def prom_dir(real_data: Path) -> Path:
    return real_data / "prometheus"


def test_real_query_range_example_has_no_gpu_label(prom_dir: Path) -> None:
    path = prom_dir / "query_range_response_example.json"
    result = parse_query_range(path.read_bytes(), str(path))
    check(result)
    assert (result.records_read, result.records_loaded) == (6, 0)
    # up{job, instance}: the host comes from instance, but nothing names a GPU
    assert reasons(result) == {i: "missing gpu label" for i in range(1, 7)}
    assert json.loads(result.quarantine["raw"][0]) == {
        "metric": {"__name__": "up", "job": "prometheus", "instance": "localhost:9090"},
        "value": [1435781430.781, "1"],
    }
    assert json.loads(result.quarantine["raw"][5])["value"] == [1435781460.781, "1"]
    assert (result.quarantine["source_file"] == str(path)).all()


def test_real_instant_query_example(prom_dir: Path) -> None:
    result = parse((prom_dir / "query_instant_response_example.json").read_text())
    assert (result.records_read, result.records_loaded) == (2, 0)
    assert reasons(result) == {1: "missing gpu label", 2: "missing gpu label"}
    assert json.loads(result.quarantine["raw"][1])["metric"]["instance"] == "localhost:9100"


def test_real_examples_load_once_they_carry_dcgm_labels(prom_dir: Path) -> None:
    doc = json.loads((prom_dir / "query_range_response_example.json").read_text())
    for series in doc["data"]["result"]:
        series["metric"]["gpu"] = "3"
    result = parse(json.dumps(doc))
    samples = result.tables["dcgm_samples"]
    assert result.records_loaded == 6
    assert samples.select("host", "gpu").unique(maintain_order=True).rows() == [("localhost", 3)]
    assert samples["extra_labels"].unique(maintain_order=True).to_list() == [
        'job="prometheus",instance="localhost:9090"',
        'job="node",instance="localhost:9091"',
    ]
    assert samples["sampled_at"].head(3).to_list() == [
        dt.datetime(2015, 7, 1, 20, 10, 30, 781000),
        dt.datetime(2015, 7, 1, 20, 10, 45, 781000),
        dt.datetime(2015, 7, 1, 20, 11, 0, 781000),
    ]
    assert samples["value"].to_list() == [1, 1, 1, 0, 0, 1]


# -- DCGM series --------------------------------------------------------------------------------
def test_dcgm_matrix_maps_labels_like_the_exposition_parser() -> None:
    gpu1 = {k: v for k, v in GPU0.items() if not k.startswith("exported_") and k != "pod_uid"} | {
        "gpu": "1",
        "device": "nvidia1",
    }
    result = parse(matrix((GPU0, [[T0, "97"], [T0 + 15, "98"]]), (gpu1, [[T0, "0"]])))
    rows = result.tables["dcgm_samples"].to_dicts()
    assert [(r["gpu"], r["value"]) for r in rows] == [(0, 97.0), (0, 98.0), (1, 0.0)]
    first = rows[0]
    assert (first["host"], first["uuid"], first["model_name"], first["pci_bus_id"]) == (
        "gpu-node-1",
        "GPU-c4529c8d-69c4-b61d-e0bc-7b2460096005",
        "NVIDIA H100 80GB HBM3",
        "00000000:53:00.0",
    )
    # exported_* are the exporter's (workload) labels; pod/namespace name the exporter itself
    assert (first["k8s_pod"], first["k8s_namespace"], first["k8s_container"]) == (
        "vllm-agg-0-vllmdecodeworker-s65j5",
        "dynamo-workload",
        "main",
    )
    assert first["extra_labels"] == (
        'DCGM_FI_DRIVER_VERSION="580.105.08",instance="10.0.3.7:9400",job="dcgm-exporter",'
        'pod="nvidia-dcgm-exporter-x7k2p",namespace="gpu-operator"'
    )
    assert rows[2]["k8s_pod"] == "nvidia-dcgm-exporter-x7k2p"
    assert first["sampled_at"] == dt.datetime(2026, 3, 10, 12, 0, 0)

    # The same samples as exposition text give the same rows.
    def exposition(metric: dict, value: str, at: float) -> str:
        labels = ",".join(f'{k}="{v}"' for k, v in metric.items() if k != "__name__")
        return f"{metric['__name__']}{{{labels}}} {value} {int(at * 1000)}"

    text = "\n".join([exposition(GPU0, "97", T0), exposition(GPU0, "98", T0 + 15), exposition(gpu1, "0", T0)])
    from_text = parse_dcgm_text(text, "query.json").tables["dcgm_samples"]
    assert result.tables["dcgm_samples"].drop("source").equals(from_text.drop("source"))


def test_bad_points_are_quarantined() -> None:
    result = parse(
        matrix(
            (
                GPU0,
                [
                    [T0, "5"],
                    [T0 + 15, "NaN"],
                    [T0 + 30, "+Inf"],
                    [T0 + 45, "-Inf"],
                    [T0 + 60, "9223372036854775808"],
                    [T0 + 75, "140737488355330"],
                    [T0 + 90, "n/a"],
                    [T0, "6"],
                    [T0 + 105],
                    ["soon", "1"],
                    [T0 - 15, "4"],
                ],
            ),
            ({"gpu": "1", "Hostname": "h"}, [[T0, "1"]]),
            ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "h"}, [[T0, "1"]]),
        )
    )
    assert reasons(result) == {
        2: "value is NaN",
        3: "value is +Inf (not a finite number)",
        4: "value is -Inf (not a finite number)",
        5: "DCGM int64 sentinel 2^63 as float (blank, not found, not supported or not permissioned)",
        6: "DCGM fp64 not supported sentinel 140737488355330.0",
        7: "value is not a number: 'n/a'",
        8: DUPLICATE_REASON,
        9: "point is not a [time, value] pair",
        10: "time is not a number: 'soon'",
        12: "series has no __name__ label (metric name)",
        13: "missing gpu label",
    }
    # out of order in the response, in time order in the table
    assert result.tables["dcgm_samples"]["value"].to_list() == [4.0, 5.0]
    assert json.loads(result.quarantine["raw"][0])["value"] == [T0 + 15, "NaN"]


def test_instant_vector_and_native_histograms() -> None:
    doc = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": GPU0, "value": [T0, "42"]},
                {
                    "metric": GPU0 | {"__name__": "some_histogram"},
                    "histogram": [T0, {"count": "3", "sum": "7"}],
                },
            ],
        },
    }
    result = parse(json.dumps(doc))
    assert result.tables["dcgm_samples"].select("metric", "value").rows() == [("DCGM_FI_DEV_GPU_UTIL", 42.0)]
    assert reasons(result) == {2: "native histogram sample (not a float value)"}
    assert json.loads(result.quarantine["raw"][0])["value"] == [T0, {"count": "3", "sum": "7"}]


def test_escaped_label_values() -> None:
    metric = GPU0 | {"note": 'say "hi", then \\ go\nnow', "modelName": 'A "B", C'}
    row = parse(matrix((metric, [[T0, "1"]]))).tables["dcgm_samples"].row(0, named=True)
    assert row["model_name"] == 'A "B", C'
    assert row["extra_labels"].endswith('note="say \\"hi\\", then \\\\ go\\nnow"')


# -- whole-document problems --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            '{"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unexpected character"}',
            "query failed: bad_data: 1:5: parse error: unexpected character",
        ),
        (
            (
                '{"status": "error", "errorType": "timeout", "error": "query timed out in expression evaluation", '
                '"data": {"resultType": "matrix", "result": 7}}'
            ),
            "query failed: timeout: query timed out in expression evaluation",
        ),
        (
            '{"status": "success", "data": {"resultType": "scalar", "result": [1435781451.781, "1"]}}',
            "resultType 'scalar' holds no series (expected matrix or vector)",
        ),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": 3}]}}',
            "unexpected response shape: ",
        ),
        ('{"status": "success", "data": {"resultType": "matrix", "res', "not valid JSON: "),
        ("", "empty document"),
        ('{"status": "success"}', "response has no data.resultType"),
        ('[{"status": "success"}, {"status": "success"}]', "expected one JSON object, found 2 records"),
    ],
)
def test_rejected_documents(text: str, reason: str) -> None:
    result = parse(text)
    assert (result.records_read, result.records_loaded) == (1, 0)
    (row,) = result.quarantine.to_dicts()
    assert row["reason"].startswith(reason)
    assert row["line_number"] is None
    assert row["raw"] == text


def test_empty_result_and_warnings_become_notes() -> None:
    doc = json.dumps(
        {
            "status": "success",
            "data": {"resultType": "matrix", "result": []},
            "warnings": ["PromQL warning: encountered a mix of histograms and floats"],
            "infos": ["PromQL info: metric might not be a counter"],
        }
    )
    result = parse(doc)
    assert (result.records_read, result.records_loaded, result.quarantine.height) == (0, 0, 0)
    assert result.notes == [
        "warning: PromQL warning: encountered a mix of histograms and floats",
        "info: PromQL info: metric might not be a counter",
    ]


def test_large_response_points_keep_document_order() -> None:
    series = [
        (GPU0 | {"gpu": str(g), "device": f"nvidia{g}"}, [[T0 + 15 * i, str(i % 100)] for i in range(500)])
        for g in range(8)
    ]
    bad = series[3][1]
    bad[250][1] = "NaN"
    result = parse(matrix(*series))
    assert (result.records_read, result.records_loaded) == (4000, 3999)
    assert reasons(result) == {3 * 500 + 251: "value is NaN"}
    samples = result.tables["dcgm_samples"]
    assert samples.group_by("gpu").len().sort("gpu")["len"].to_list() == [
        500,
        500,
        500,
        499,
        500,
        500,
        500,
        500,
    ]
    assert samples.filter(pl.col("gpu") == 7)["value"].sum() == sum(i % 100 for i in range(500))


# -- matrix_samples: the governance tick's reading, the same rows and reasons --------------------
MIG = GPU0 | {"gpu": "2", "GPU_I_ID": "3", "GPU_I_PROFILE": "1g.10gb", "__name__": "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
FLOAT_MATRICES = {
    "dcgm series": matrix(
        (GPU0, [[T0, "97"], [T0 + 15.5, "98"]]),
        (GPU0 | {"gpu": "1", "exported_pod": ""}, [[T0, "0"]]),
        (MIG, [[T0 + 0.001, "0.25"], [T0 + 15.001, "1e-3"]]),
    ),
    "unreadable values and series": matrix(
        (GPU0, [[T0 + 15, "NaN"], [T0, "5"], [T0 + 30, "+Inf"], [T0 + 60, "9223372036854775808"],
                [T0 + 75, "140737488355330"], [T0 + 90, "n/a"], [T0 - 15, "4"]]),
        ({"gpu": "1", "Hostname": "h"}, [[T0, "1"]]),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "h"}, [[T0, "1"]]),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "h", "gpu": "x"}, [[T0, "1"]]),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "instance": "10.0.0.9:9400", "gpu": "3"}, [[T0, "2"]]),
    ),
    "escaped labels": matrix((GPU0 | {"note": 'say "hi"\n', "modelName": 'A "B"'}, [[T0, "1"]])),
    "no series": matrix(),
    "a series without points": matrix((GPU0, []), (MIG, [[T0, "1"]])),
    "label values with brackets and escapes": matrix(
        (GPU0 | {"note": 'x},"values":[[1,"2"]]},{"metric":{"a":"b'}, [[T0, "1"]]),
        (GPU0 | {"gpu": "1", "note": "tab\t[0]"}, [[T0, "2"]])),
}
OTHER_ANSWERS = {
    "malformed points": matrix((GPU0, [[T0, "5"], [T0 + 15], ["soon", "1"]])),
    "a repeated point": matrix((GPU0, [[T0, "5"], [T0, "6"]])),
    "a repeated point out of order": matrix((GPU0, [[T0, "5"], [T0 + 15, "6"], [T0, "7"]])),
    "a native histogram": json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": GPU0, "value": [T0, "42"]}, {"metric": GPU0, "histogram": [T0, {"count": "3"}]}]}}),
    "warnings": matrix((GPU0, [[T0, "5"]]), warnings=["PromQL warning"]),
}


def projected(result: ParseResult) -> tuple[pl.DataFrame, dict]:
    samples = result.tables["dcgm_samples"].select(list(SAMPLE_COLUMNS)).cast(SAMPLE_COLUMNS)
    return samples, dict(Counter(result.quarantine["reason"].to_list()))


def by_series(samples: pl.DataFrame) -> pl.DataFrame:
    return samples.sort("host", "gpu", "gpu_instance_id", "metric", "sampled_at", nulls_last=True)


def compact(text: str) -> str:
    """As Prometheus writes it: no spaces."""
    return json.dumps(json.loads(text), separators=(",", ":"))


@pytest.mark.parametrize("encoding", ["compact", "spaced"])
@pytest.mark.parametrize("name", [*FLOAT_MATRICES, *OTHER_ANSWERS])
def test_matrix_samples_are_parse_query_ranges_rows_and_reasons(name: str, encoding: str, monkeypatch) -> None:
    text = {**FLOAT_MATRICES, **OTHER_ANSWERS}[name]
    text = compact(text) if encoding == "compact" else text
    expected, expected_reasons = projected(parse(text))
    if name in FLOAT_MATRICES:  # read without DuckDB's parser; Prometheus' own encoding without decoding it
        monkeypatch.setattr(prometheus, "parse_query_range", lambda *_: pytest.fail("the slow path was taken"))
        if encoding == "compact" and "brackets" not in name:  # braces in a label: decoded as JSON
            monkeypatch.setattr(prometheus, "_json_matrix", lambda *_: pytest.fail("decoded as JSON"))
    known: dict = {}
    samples, reasons_seen = matrix_samples(text.encode(), "query.json", known)
    assert samples.schema == pl.Schema(SAMPLE_COLUMNS)
    assert by_series(samples).equals(by_series(expected)), (samples, expected)
    assert dict(reasons_seen) == expected_reasons
    # label sets mapped once: a second answer reads them from `known`
    if name in FLOAT_MATRICES and known:
        monkeypatch.setattr(prometheus, "_mapped", lambda *_: pytest.fail("mapped again"))
        again, _ = matrix_samples(text.encode(), "query.json", known)
        assert again.equals(samples)


@pytest.mark.parametrize("text", ['{"status": "error", "errorType": "bad_data", "error": "parse error"}',
                                  '{"status": "success", "data": {"resultType": "matrix", "res', "<html>"])
def test_matrix_samples_reject_what_parse_query_range_rejects(text: str) -> None:
    with pytest.raises(AnswerRejected) as rejected:
        matrix_samples(text.encode(), "query.json")
    assert str(rejected.value) == parse(text).quarantine["reason"][0]


# -- vector_series: the Kueue pod lookup's reading of an instant vector, the same rows and reasons ----
def vector(*series: tuple[dict, str]) -> str:
    result = [{"metric": metric, "value": [T0, value]} for metric, value in series]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


FLOAT_VECTORS = {
    "dcgm series": vector((GPU0, "97"), (GPU0 | {"gpu": "1", "exported_pod": ""}, "0"), (MIG, "0.25")),
    "unreadable values and series": vector(
        (GPU0, "NaN"), (GPU0 | {"gpu": "5"}, "+Inf"), (GPU0 | {"gpu": "6"}, "9223372036854775808"),
        (GPU0 | {"gpu": "7"}, "n/a"), ({"gpu": "1", "Hostname": "h"}, "1"),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "h"}, "1"),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "h", "gpu": "x"}, "1"),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "instance": "10.0.0.9:9400", "gpu": "3"}, "2")),
    "escaped labels": vector((GPU0 | {"note": 'say "hi"\n', "modelName": 'A "B"'}, "1")),
    "no series": vector(),
    "label values with brackets and escapes": vector(
        (GPU0 | {"note": 'x},"value":[1,"2"]},{"metric":{"a":"b'}, "1"), (GPU0 | {"gpu": "1", "note": "tab\t[0]"}, "2")),
}


def vector_rows(samples: pl.DataFrame) -> pl.DataFrame:
    return (samples.select(list(prometheus.VECTOR_COLUMNS)).cast(prometheus.VECTOR_COLUMNS)
            .sort("host", "gpu", "gpu_instance_id", "metric", "value", nulls_last=True))


@pytest.mark.parametrize("name", [*FLOAT_VECTORS, "a native histogram"])
def test_vector_series_are_parse_query_ranges_rows_and_reasons(name: str, monkeypatch) -> None:
    text = {**FLOAT_VECTORS, **OTHER_ANSWERS}[name]
    expected = parse(text)
    if name in FLOAT_VECTORS:  # read without DuckDB's parser
        monkeypatch.setattr(prometheus, "parse_query_range", lambda *_: pytest.fail("the slow path was taken"))
    series, reasons_seen = prometheus.vector_series(text.encode(), "query.json")
    assert series.schema == pl.Schema(prometheus.VECTOR_COLUMNS)
    assert vector_rows(series).equals(vector_rows(expected.tables["dcgm_samples"]))
    assert dict(reasons_seen) == dict(Counter(expected.quarantine["reason"].to_list()))


@pytest.mark.parametrize("text", ['{"status": "error", "errorType": "bad_data", "error": "parse error"}',
                                  '{"status": "success", "data": {"resultType": "vector", "res', "<html>"])
def test_vector_series_reject_what_parse_query_range_rejects(text: str) -> None:
    with pytest.raises(AnswerRejected) as rejected:
        prometheus.vector_series(text.encode(), "query.json")
    assert str(rejected.value) == parse(text).quarantine["reason"][0]
