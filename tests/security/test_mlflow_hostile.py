"""The MLflow pull against a tracking server that answers badly on purpose (a real HTTP server on
127.0.0.1, per test): every bound of the pull holds (page cap, repeated token, deadline, JSON depth),
a malformed answer fails the pull cleanly (MlflowError naming the endpoint; `gpupool land mlflow`
exits 1 with one line, no traceback) and lands nothing; a tenant's odd values are that run's
quarantined records, and one tenant's bad records do not stop the rebuild for everyone."""
from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from pipelines.connectors.mlflow import MAX_ARTIFACT_DEPTH, MlflowConfig, MlflowError, pull

Answer = Callable[[http.server.BaseHTTPRequestHandler, dict], object]


def run(run_id: str, job: str = "1", user: str = "alice", **info: object) -> dict:
    return {"info": {"run_id": run_id, "status": "RUNNING", "artifact_uri": "file:///a", "user_id": user, **info},
            "data": {"tags": [{"key": "gpupool.job_id", "value": job}]}}


RUN = "a" * 32
GOOD: dict[str, object] = {
    "experiments/search": {"experiments": [{"experiment_id": "1"}]},
    "runs/search": lambda _h, body: {"runs": [run(RUN)]} if "IS NOT NULL" in body.get("filter", "") else {},
    "artifacts/list": {"files": [{"path": "checkpoints/step-1.pt", "is_dir": False, "file_size": 3}]},
    "model-versions/search": {"model_versions": []},
}


def send(handler: http.server.BaseHTTPRequestHandler, data: bytes, status: int = 200) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@pytest.fixture
def tracking() -> Iterator[Callable[..., str]]:
    """`tracking(endpoint=answer, ...)`: a server answering GOOD but where told; an answer is a JSON
    value, raw bytes, or a function (handler, request body or query) -> either, or None when it
    answered itself. Returns the URL."""
    servers: list[http.server.ThreadingHTTPServer] = []
    stop = threading.Event()

    def start(**answers: object) -> str:
        routes = {**GOOD, **{k.replace("__", "/").replace("_", "-"): v for k, v in answers.items()}}

        class Handler(http.server.BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                body = json.loads(self.rfile.read(length) or b"{}") if length else {
                    k: v[0] for k, v in parse_qs(parts.query).items()}
                answer = routes[parts.path.split("/api/2.0/mlflow/", 1)[-1]]
                if callable(answer):
                    answer = answer(self, body)
                if answer is None:
                    return
                send(self, answer if isinstance(answer, bytes) else json.dumps(answer).encode())

            do_GET = do_POST = answer

            def log_message(self, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.stop = stop  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    stop.set()
    for server in servers:
        server.shutdown()
        server.server_close()


def config(url: str, **options: object) -> MlflowConfig:
    return MlflowConfig(tracking_uri=url, retries=0, **options)


def fails_cleanly(tmp_path: Path, url: str, message: str, **options: object) -> MlflowError:
    with pytest.raises(MlflowError, match=message) as caught:
        pull(tmp_path / "landing", config(url, **options))
    assert not any((tmp_path / "landing").rglob("*")), "a failed pull landed something"
    return caught.value


def landed(result) -> list[dict]:
    return [json.loads(line) for line in result.path.read_text().splitlines()]


# -- finding 5: a pull that never ends -----------------------------------------------------------
def test_mlflow_pull_stops_on_a_repeated_page_token(tmp_path, tracking):
    pages = []

    def same_token(_handler, body):
        pages.append(body.get("page_token"))
        return {"runs": [run(RUN)], "next_page_token": "again"}

    err = fails_cleanly(tmp_path, tracking(runs__search=same_token), "runs/search: .*page token it gave before")
    assert err.endpoint == "MLflow runs/search"
    assert pages == [None, "again"]


def test_mlflow_pull_stops_at_the_page_cap(tmp_path, tracking):
    def endless(_handler, body):
        return {"runs": [], "next_page_token": str(int(body.get("page_token") or 0) + 1)}

    fails_cleanly(tmp_path, tracking(runs__search=endless), "runs/search: more than 5 pages", max_pages=5)


def test_mlflow_pull_has_a_deadline_against_a_dripping_server(tmp_path, tracking):
    """Each byte comes within the 5 s read timeout, so only the pull's own deadline (2 s) ends it."""
    def drip(handler, _body):
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        while not handler.server.stop.is_set():
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.2)

    started = time.monotonic()
    fails_cleanly(tmp_path, tracking(runs__search=drip), "runs/search: .*deadline of 2 s",
                  deadline_s=2, request_timeout_s=5)
    assert time.monotonic() - started < 30  # a hang is the failure; the bound itself is the deadline


def test_an_answer_larger_than_the_cap_fails_cleanly(tmp_path, tracking):
    body = json.dumps({"runs": [run(RUN)], "pad": "x" * 3 * 2**20}).encode()
    fails_cleanly(tmp_path, tracking(runs__search=body), "runs/search: .*larger than 1 MiB", max_body_mib=1)


# -- finding 6: malformed answers crash ----------------------------------------------------------
def test_deeply_nested_answer_fails_cleanly(tmp_path, tracking):
    nested = b'{"runs": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    fails_cleanly(tmp_path, tracking(runs__search=nested), "runs/search: .*nested more than 64 levels deep")


def test_an_experiment_without_an_id_fails_cleanly(tmp_path, tracking):
    url = tracking(experiments__search={"experiments": [{"name": "no id"}]})
    fails_cleanly(tmp_path, url, "experiments/search: experiment 0 has no experiment_id")


def test_runs_that_are_not_objects_fail_cleanly(tmp_path, tracking):
    fails_cleanly(tmp_path, tracking(runs__search={"runs": ["string"]}), "runs/search: 'runs' item 0 is a JSON str")


def test_self_listing_artifact_folder_fails_cleanly(tmp_path, tracking):
    def itself(_handler, body):
        folder = body.get("path", "")
        return {"files": [{"path": folder or "loop", "is_dir": True}]}

    fails_cleanly(tmp_path, tracking(artifacts__list=itself), "artifacts/list: .*not inside it|listed twice")


def test_an_artifact_tree_too_deep_refuses_that_run_only(tmp_path, tracking):
    other = "b" * 32

    def runs(_handler, body):
        return {"runs": [run(RUN, job="7"), run(other, job="8")]} if "IS NOT NULL" in body["filter"] else {}

    def deeper(_handler, body):
        folder = body.get("path", "")
        if body["run_id"] == other:
            return GOOD["artifacts/list"]
        return {"files": [{"path": f"{folder}/d".lstrip("/"), "is_dir": True}]}

    result = pull(tmp_path, config(tracking(runs__search=runs, artifacts__list=deeper)))
    by_run = {r["run_id"]: r for r in landed(result)}
    assert by_run[RUN]["kind"] == "refused" and f"nested more than {MAX_ARTIFACT_DEPTH} deep" in by_run[RUN]["refused"]
    assert by_run[other]["kind"] == "checkpoint"


def test_an_absurd_timestamp_is_no_time_and_the_pull_goes_on(tmp_path, tracking):
    version = {"name": "m", "version": "1", "creation_timestamp": "99999999999999999999", "status": "READY"}
    url = tracking(runs__search=lambda _h, b: {"runs": [run(RUN, end_time="99999999999999999999")]}
                   if "IS NOT NULL" in b["filter"] else {},
                   model_versions__search={"model_versions": [version]})
    result = pull(tmp_path, config(url))
    assert [r["ts"] is not None for r in landed(result)] == [True, True]  # the pull's time instead


def test_an_oversized_job_id_is_refused_not_landed_as_it_is(tmp_path, tracking):
    huge = "9" * 3 * 2**20
    url = tracking(runs__search=lambda _h, b: {"runs": [run(RUN, job=huge)]} if "IS NOT NULL" in b["filter"] else {})
    result = pull(tmp_path, config(url))
    [record] = landed(result)
    assert record["kind"] == "refused" and "3,145,728 characters" in record["refused"]
    assert result.path.stat().st_size < 2000


def test_gpupool_land_mlflow_fails_cleanly_on_a_hostile_answer(tmp_path, monkeypatch, tracking):
    from click.testing import CliRunner

    from pipelines.cli import main

    url = tracking(runs__search=b'{"runs": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
    (tmp_path / "gpupool.yml").write_text(f"mlflow:\n  tracking_uri: {url}\n  retries: 0\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "gpupool.yml"))
    result = CliRunner().invoke(main, ["land", "mlflow", "--home", str(tmp_path / "home"), "--no-build"])
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    assert "MLflow runs/search:" in result.output and "nested" in result.output
    assert not list((tmp_path / "home").rglob("pull-*.jsonl"))


# -- one tenant's tags do not stop everyone ------------------------------------------------------
def test_one_tenants_bad_tags_do_not_stop_the_rebuild(tmp_path, monkeypatch, tracking):
    """alice's two runs are sound; mallory's three carry values no column holds (a step past 64 bits,
    a 3 MB job id): hers are quarantined and reported, alice's load, and the rebuild is not blocked."""
    from click.testing import CliRunner

    from pipelines.cli import main
    from pipelines.warehouse import Warehouse

    good = [run(c * 32, job=str(n), user="alice") for n, c in enumerate("ab", 1)]
    bad = [run(c * 32, job=job, user="mallory") for c, job in zip("cde", ["3", "4", "9" * 3 * 2**20], strict=True)]

    def runs(_handler, body):
        return {"runs": good + bad} if "IS NOT NULL" in body["filter"] else {}

    def files(_handler, body):
        step = "99999999999999999999999" if body["run_id"][0] in "cde" else "1"
        return {"files": [{"path": f"checkpoints/step-{step}.pt", "is_dir": False, "file_size": 3}]}

    url = tracking(runs__search=runs, artifacts__list=files)
    (tmp_path / "gpupool.yml").write_text(f"mlflow:\n  tracking_uri: {url}\n  retries: 0\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "gpupool.yml"))
    home = tmp_path / "home"
    result = CliRunner().invoke(main, ["land", "mlflow", "--home", str(home), "--no-build"])
    assert result.exit_code == 0, result.output
    assert "tenant mallory: 3 of 3 record(s) quarantined" in result.output
    with Warehouse(home).connect(read_only=True) as con:
        assert con.execute("select reported_by, count(*) from raw.artifact_events group by 1").fetchall() == [
            ("alice", 2)]
        warned = con.execute("select passed, severity, metadata_json from ops.check_results "
                             "where check_name = 'tenant_quarantine_share'").fetchall()
    [(passed, severity, metadata)] = warned
    assert (passed, severity) == (False, "WARN") and "tenant mallory: 3 of 3" in metadata


def test_every_tenant_bad_is_the_format_and_still_blocks(tmp_path, monkeypatch, tracking):
    from click.testing import CliRunner

    from pipelines.cli import main

    bad = [run(c * 32, job=str(n), user=user) for n, (c, user) in enumerate(zip("ab", ["alice", "bob"]), 1)]
    url = tracking(runs__search=lambda _h, b: {"runs": bad} if "IS NOT NULL" in b["filter"] else {},
                   artifacts__list={"files": [{"path": "checkpoints/step-99999999999999999999999.pt",
                                               "is_dir": False, "file_size": 3}]})
    (tmp_path / "gpupool.yml").write_text(f"mlflow:\n  tracking_uri: {url}\n  retries: 0\n")
    monkeypatch.setenv("GPUPOOL_CONFIG", str(tmp_path / "gpupool.yml"))
    result = CliRunner().invoke(main, ["land", "mlflow", "--home", str(tmp_path / "home"), "--no-build"])
    assert result.exit_code == 3, result.output
