"""The image's files: the Dockerfile's stages, and deploy/entrypoint.sh's roles, each mapped to a command
the CLI has (the image itself is built and run by scripts/image-build.sh and image-check.sh, by hand:
minutes, not a test)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipelines.paths import REPO_ROOT
from tests.deploy.roles import ENTRYPOINT, entrypoint_roles

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()


def stages() -> list[str]:
    return re.split(r"^FROM ", DOCKERFILE, flags=re.MULTILINE)[1:]


def test_dockerfile_builds_on_a_base_argument_defaulting_to_public_python_slim():
    assert re.search(r"^ARG BASE=docker.io/library/python:3\.11-slim-bookworm$", DOCKERFILE, flags=re.MULTILINE)
    assert [s.split()[0] for s in stages()] == ["${BASE}", "${BASE}"]


def test_only_the_builder_stage_has_compilers_and_the_final_stage_runs_as_a_non_root_user():
    builder, final = stages()
    assert "build-essential" in builder and "requirements.lock" in builder and "prepared_project()" in builder
    assert not re.search(r"build-essential|gcc|python3.*-dev", final)
    (user,) = re.findall(r"^USER (\S+)$", final, flags=re.MULTILINE)
    assert user not in ("root", "0")
    assert "fonts-noto-cjk" in final and "libpango-1.0-0" in final


def run_role(tmp_path: Path, *args: str) -> list[str]:
    """The command line the entry point execs for ARGS, with every program on PATH a stub that prints it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for program in ("gpupool", "dagster", "dagster-webserver", "dagster-daemon"):
        stub = bin_dir / program
        stub.write_text('#!/bin/sh\necho "$(basename "$0")" "$@"\n')
        stub.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DAGSTER_HOME": "/opt/dagster/home",
           "GPUPOOL_ALLOCATOR_DB": str(tmp_path / "allocator" / "allocator.sqlite3")}
    done = subprocess.run(["sh", str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout.split()


@pytest.mark.parametrize("role", sorted(entrypoint_roles()))
def test_every_role_listens_on_every_interface_and_a_gpupool_role_is_a_command_of_the_cli(role, tmp_path):
    from pipelines.cli import main

    line = run_role(tmp_path, role)
    assert "0.0.0.0" in line or role == "daemon", line
    if line[0] == "gpupool":
        if line[1] not in main.commands:
            pytest.skip(f"`gpupool {line[1]}` is not in this tree yet")
        result = CliRunner().invoke(main, [*line[1:], "--help"])
        assert result.exit_code == 0, f"{' '.join(line)}\n{result.output}"


def test_a_role_passes_its_extra_arguments_and_anything_else_runs_as_given(tmp_path):
    assert run_role(tmp_path, "allocator", "--pool", "pool.yml")[-2:] == ["--pool", "pool.yml"]
    assert (tmp_path / "allocator").is_dir()
    assert run_role(tmp_path, "dagster", "api", "execute_run", "{}") == ["dagster", "api", "execute_run", "{}"]
    assert run_role(tmp_path, "code-server")[:3] == ["dagster", "api", "grpc"]


def test_the_entry_point_is_executable_and_the_image_context_keeps_it():
    assert os.access(ENTRYPOINT, os.X_OK)
    ignored = (REPO_ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", ".gpupool", "models/target", "!deploy/entrypoint.sh"} <= set(ignored)
