"""The MLflow connector end to end against a real `mlflow server` (SQLite backend, proxied artifacts;
tests/mlflow_server.py): runs logged through MLflow's REST API with requests, pulled into the landing
zone, ingested into a temporary warehouse. And against a stub that answers badly: a clear error and
nothing landed."""
from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from pipelines.connectors.mlflow import MlflowConfig, MlflowError, pull
from pipelines.ingest import ingest_partition
from pipelines.warehouse import Warehouse
from tests.mlflow_server import running_mlflow

pytestmark = pytest.mark.slow  # a real mlflow server

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


def ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


class Tracking:
    """The few REST calls a training script's MLflow client makes, through requests."""

    def __init__(self, url: str):
        self.url = url

    def call(self, endpoint: str, body: dict) -> dict:
        response = requests.post(f"{self.url}/api/2.0/mlflow/{endpoint}", json=body, timeout=30)
        assert response.status_code == 200, f"{endpoint}: {response.status_code} {response.text}"
        return response.json()

    def run(self, experiment_id: str, tags: dict[str, str]) -> dict:
        body = {"experiment_id": experiment_id, "start_time": ms(NOW - dt.timedelta(hours=3)), "user_id": "alice",
                "tags": [{"key": k, "value": v} for k, v in tags.items()]}
        return self.call("runs/create", body)["run"]["info"]

    def upload(self, info: dict, path: str, size: int) -> None:
        # the server's artifact proxy (--serve-artifacts): mlflow-artifacts:/<exp>/<run>/artifacts/<path>
        root = info["artifact_uri"].removeprefix("mlflow-artifacts:/")
        response = requests.put(f"{self.url}/api/2.0/mlflow-artifacts/artifacts/{root}/{path}",
                                data=b"\0" * size, timeout=30)
        assert response.status_code == 200, response.text

    def end(self, info: dict, status: str, ended_at: dt.datetime) -> None:
        self.call("runs/update", {"run_id": info["run_id"], "status": status, "end_time": ms(ended_at)})


@pytest.fixture(scope="module")
def mlflow_url(tmp_path_factory) -> Iterator[str]:
    with running_mlflow(tmp_path_factory.mktemp("mlflow")) as url:
        yield url


@pytest.fixture(scope="module")
def logged(mlflow_url) -> dict[str, dict]:
    """Three runs: a finished one linked to job 4242 (two checkpoints, a model, a registered
    version), a failed one linked to job 4243, and one without the tag."""
    t = Tracking(mlflow_url)
    experiment = t.call("experiments/create", {"name": "llm-pretrain"})["experiment_id"]
    done = t.run(experiment, {"gpupool.job_id": "4242", "gpupool.attempt": "2"})
    t.upload(done, "checkpoints/step-1000.pt", 1000)
    t.upload(done, "checkpoints/step-2000.pt", 2000)
    t.upload(done, "model/model.pt", 4096)
    t.upload(done, "model/MLmodel", 100)
    t.call("registered-models/create", {"name": "llm-7b"})
    t.call("model-versions/create", {"name": "llm-7b", "source": f"{done['artifact_uri']}/model",
                                     "run_id": done["run_id"]})
    t.end(done, "FINISHED", NOW - dt.timedelta(hours=1))
    failed = t.run(experiment, {"gpupool.job_id": "4243"})
    t.upload(failed, "checkpoints/step-500.pt", 500)
    t.upload(failed, "eval/results.json", 20)
    t.end(failed, "FAILED", NOW - dt.timedelta(minutes=30))
    untagged = t.run(experiment, {})
    t.upload(untagged, "notes.txt", 5)
    return {"done": done, "failed": failed, "untagged": untagged}


def test_pull_and_ingest_a_real_mlflow_server(tmp_path, mlflow_url, logged):
    wh = Warehouse(tmp_path / "home")
    result = pull(wh.landing, MlflowConfig(tracking_uri=mlflow_url))
    assert (result.runs_linked, result.runs_untagged, result.records) == (2, 1, 7)
    assert result.path is not None and result.path.parent == wh.landing / "mlflow" / result.path.parent.name
    assert [p.name for p in result.path.parent.iterdir()] == [result.path.name]  # no temp file left

    report = ingest_partition(wh, "mlflow", dt.date.fromisoformat(result.path.parent.name))
    assert (report.records_read, report.records_loaded, report.records_quarantined) == (7, 7, 0)
    with wh.connect(read_only=True) as con:
        got = con.execute(
            "select job_id, attempt, kind, status, regexp_replace(event_id, '^[0-9a-f]+:', ''), size_bytes, "
            "training_step, model_name, model_version, run_id, source from raw.artifact_events "
            "order by job_id, event_id").fetchall()
        users = con.execute("select distinct reported_by from raw.artifact_events").fetchall()
        times = dict(con.execute("select run_id, max(occurred_at) from raw.artifact_events "
                                 "where kind <> 'model_version' group by run_id").fetchall())
    done, failed = logged["done"]["run_id"], logged["failed"]["run_id"]
    assert got == [
        ("4242", 2, "artifact", "ok", "artifact:model/MLmodel", 100, None, None, None, done, "mlflow"),
        ("4242", 2, "artifact", "ok", "artifact:model/model.pt", 4096, None, None, None, done, "mlflow"),
        ("4242", 2, "checkpoint", "ok", "checkpoint:checkpoints/step-1000.pt", 1000, 1000, None, None, done, "mlflow"),
        ("4242", 2, "checkpoint", "ok", "checkpoint:checkpoints/step-2000.pt", 2000, 2000, None, None, done, "mlflow"),
        ("4242", 2, "model_version", "ok", "model_version:llm-7b/1", None, None, "llm-7b", "1", done, "mlflow"),
        ("4243", None, "artifact", "failed", "artifact:eval/results.json", 20, None, None, None, failed, "mlflow"),
        ("4243", None, "checkpoint", "ok", "checkpoint:checkpoints/step-500.pt", 500, 500, None, None, failed,
         "mlflow"),
    ]
    assert users == [("alice",)]
    # an ended run's artifacts: its end time (MLflow keeps no time per artifact)
    assert times == {done: (NOW - dt.timedelta(hours=1)).replace(tzinfo=None),
                     failed: (NOW - dt.timedelta(minutes=30)).replace(tzinfo=None)}


def test_gpupool_land_mlflow_pulls_and_ingests(tmp_path, monkeypatch, mlflow_url, logged):
    from click.testing import CliRunner

    from pipelines.cli import main

    config = tmp_path / "gpupool.yml"
    config.write_text(f"mlflow:\n  tracking_uri: {mlflow_url}\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(config))
    home = tmp_path / "home"
    result = CliRunner().invoke(main, ["land", "mlflow", "--home", str(home), "--no-build"])
    assert result.exit_code == 0, result.output
    assert "1 run(s) without the gpupool.job_id tag ignored" in result.output
    with Warehouse(home).connect(read_only=True) as con:
        assert con.execute("select count(*) from raw.artifact_events where source = 'mlflow'").fetchone() == (7,)


# -- bad answers: a stub tracking server ----------------------------------------------------------
RUN_ID = "0" * 32
GOOD = {
    "experiments/search": {"experiments": [{"experiment_id": "1"}]},
    "runs/search": {"runs": [{"info": {"run_id": RUN_ID, "status": "RUNNING", "artifact_uri": "file:///a"},
                              "data": {"tags": [{"key": "gpupool.job_id", "value": "1"}]}}]},
    "artifacts/list": {"files": [{"path": "checkpoints/step-1.pt", "is_dir": False, "file_size": 3}]},
    "model-versions/search": {"model_versions": []},
}


@pytest.fixture
def stub() -> Iterator[Callable[[str, int, bytes], str]]:
    """`stub(endpoint, status, body)`: a server answering GOOD everywhere but `endpoint`; its URL."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(bad_endpoint: str, status: int, body: bytes) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                endpoint = self.path.split("/api/2.0/mlflow/", 1)[-1].split("?", 1)[0]
                code, data = (status, body) if endpoint == bad_endpoint else (200, json.dumps(GOOD[endpoint]).encode())
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = answer

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_stub_answers_well_and_a_file_lands(tmp_path, stub):
    result = pull(tmp_path, MlflowConfig(tracking_uri=stub("none", 200, b"")))
    assert result.records == 1 and result.path is not None and result.path.is_file()


@pytest.mark.parametrize(("endpoint", "status", "body", "message"), [
    ("experiments/search", 404, b'{"error_code": "ENDPOINT_NOT_FOUND"}', "experiments/search: .* HTTP 404"),
    ("runs/search", 500, b"boom", "runs/search: .* HTTP 500 .*boom"),
    ("artifacts/list", 200, b"<html>proxy login</html>", "artifacts/list: .* not JSON .*tracking_uri"),
    ("model-versions/search", 200, b"[1, 2]", "model-versions/search: .* JSON list, expected an object"),
    ("artifacts/list", 200, b'{"files": 3}', "artifacts/list: 'files' is not a list"),
])
def test_a_bad_answer_is_a_clear_error_and_nothing_lands(tmp_path, stub, endpoint, status, body, message):
    url = stub(endpoint, status, body)
    with pytest.raises(MlflowError, match=message):
        pull(tmp_path, MlflowConfig(tracking_uri=url, retries=1))
    assert not any(Path(tmp_path).rglob("*")), "a failed pull left files behind"


def test_an_unreachable_server_says_so(tmp_path):
    with pytest.raises(MlflowError, match="is the tracking server up"):
        pull(tmp_path, MlflowConfig(tracking_uri="http://127.0.0.1:9", retries=0, request_timeout_s=2))


def test_the_sensor_pulls_and_requests_the_days_ingest(tmp_path, stub, monkeypatch):
    import dagster as dg

    from pipelines.assets.connectors import RAW_MLFLOW, build_mlflow_sensor
    from pipelines.resources.warehouse import WarehouseResource

    sensor = build_mlflow_sensor()
    resources = {"warehouse": WarehouseResource(home=str(tmp_path / "home"))}
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "gpupool.yml"))
    with dg.build_sensor_context(resources=resources) as context:
        assert "no `mlflow` section" in sensor(context).skip_reason.skip_message
    (tmp_path / "gpupool.yml").write_text(f"mlflow:\n  tracking_uri: {stub('none', 200, b'')}\n")
    with dg.build_sensor_context(resources=resources) as context:
        [request] = sensor(context).run_requests
    [landed] = (tmp_path / "home").rglob("pull-*.jsonl")
    assert request.partition_key == landed.parent.name and request.run_key == f"mlflow:{landed.name}"
    assert request.asset_selection in (None, [RAW_MLFLOW])
