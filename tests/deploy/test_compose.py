"""deploy/compose.yaml: Compose itself validates it (docker-compose or podman-compose, Debian's), and
every service runs the image's roles on the one shared home with its secrets from env files."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from pipelines.paths import REPO_ROOT
from tests.components import require_component
from tests.deploy.roles import DEPLOY, entrypoint_roles

COMPOSE = DEPLOY / "compose.yaml"
GPUPOOL_SERVICES = {"code-server", "dagster-webserver", "dagster-daemon", "allocator", "audit-webhook",
                    "dashboards", "metrics"}
SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|USERS|CATALOG_URL")


def raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture
def rendered(tmp_path: Path) -> dict:
    """`config` of a copy of deploy/ with its env files made from the examples, as Compose resolves it."""
    tool = shutil.which("docker-compose") or shutil.which("podman-compose")
    require_component("docker-compose (or podman-compose)", tool is not None, "bash scripts/components.sh")
    copy = tmp_path / "deploy"
    shutil.copytree(DEPLOY, copy, ignore=shutil.ignore_patterns("k8s", "*.env"))
    shutil.copy(copy / "env.example", copy / "gpupool.env")
    shutil.copy(copy / "postgres.env.example", copy / "postgres.env")
    done = subprocess.run([tool, "-f", "compose.yaml", "config"], cwd=copy, capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    # podman-compose prints its own version lines before the YAML
    return yaml.safe_load(done.stdout[done.stdout.index("services:"):])


def test_compose_validates_and_has_every_service(rendered):
    assert set(rendered["services"]) == GPUPOOL_SERVICES | {"postgres"}


def test_every_gpupool_service_runs_a_role_of_the_one_image(rendered):
    roles = entrypoint_roles()
    for name in GPUPOOL_SERVICES:
        service = rendered["services"][name]
        assert service["image"] == "localhost/gpupool:dev", name
        assert service["command"][0] in roles, f"{name}: {service['command']} is no role of deploy/entrypoint.sh"
    assert {s["command"][0] for n, s in rendered["services"].items() if n in GPUPOOL_SERVICES} == roles


def test_every_gpupool_service_mounts_the_one_home_volume_and_only_readers_mount_it_read_only():
    services = raw()["services"]
    for name in GPUPOOL_SERVICES:
        volumes = services[name]["volumes"]
        home = [v for v in volumes if v.split(":")[0] == "home"]
        assert len(home) == 1 and home[0].split(":")[1] == "/data", f"{name}: {volumes}"
        assert home[0].endswith(":ro") == (name == "dashboards"), f"{name}: {home[0]}"
    assert set(raw()["volumes"]) == {"home", "pgdata"}


def test_no_secret_is_written_in_the_compose_file():
    def environments(node):
        if isinstance(node, dict):
            if isinstance(node.get("environment"), dict):
                yield node["environment"]
            for value in node.values():
                yield from environments(value)

    for environment in environments(raw()):
        inline = [key for key in environment if SECRET_NAME.search(key)]
        assert not inline, f"secrets belong in the env files, not compose.yaml: {inline}"
    for service in raw()["services"].values():
        assert service["env_file"], service


def test_env_files_are_examples_in_git_and_the_real_ones_are_ignored():
    for real in ("deploy/gpupool.env", "deploy/postgres.env"):
        done = subprocess.run(["git", "check-ignore", "-q", real], cwd=REPO_ROOT, check=False)
        assert done.returncode == 0, f"{real} is not ignored by git"
    example = (DEPLOY / "env.example").read_text()
    for variable in ("GPUPOOL_DAGSTER_PG_PASSWORD", "GPUPOOL_CATALOG_URL", "GPUPOOL_ALLOCATOR_TOKENS",
                     "GPUPOOL_AUDIT_TOKEN", "GPUPOOL_DASHBOARD_USERS"):
        assert re.search(rf"^{variable}=", example, flags=re.MULTILINE), variable


def test_dagster_instance_config_is_valid_and_points_at_the_stack(monkeypatch):
    from dagster._core.instance.config import dagster_instance_config

    monkeypatch.setenv("GPUPOOL_DAGSTER_PG_PASSWORD", "unused")
    config, _ = dagster_instance_config(str(DEPLOY / "dagster"))
    db = config["storage"]["postgres"]["postgres_db"]
    assert db["hostname"] in raw()["services"] and db["scheme"] == "postgresql+psycopg2"
    assert "create database " + db["db_name"] in (DEPLOY / "postgres" / "init.sql").read_text()


def test_workspace_loads_the_code_server_service_on_its_port():
    (location,) = yaml.safe_load((DEPLOY / "dagster" / "workspace.yaml").read_text())["load_from"]
    grpc = location["grpc_server"]
    assert grpc["host"] in raw()["services"]
    assert f"--port {grpc['port']}" in (DEPLOY / "entrypoint.sh").read_text()
