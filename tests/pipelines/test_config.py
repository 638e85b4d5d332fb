"""The connector configuration file: env substitution, clear errors, sections by model."""
import pytest
from pydantic import BaseModel

from pipelines.config import ConfigError, load_config, section


class Prom(BaseModel):
    url: str
    token: str | None = None
    step_s: int = 60


def test_no_file_means_no_connectors(tmp_path):
    assert load_config(tmp_path / "absent.yml") == {}
    assert section("prometheus", Prom, tmp_path / "absent.yml") is None


def test_secrets_come_from_the_environment(tmp_path, monkeypatch):
    path = tmp_path / "gpupool.yml"
    path.write_text("prometheus:\n  url: http://127.0.0.1:9090\n  token: ${PROM_TOKEN}\n  step_s: ${STEP:-30}\n")
    monkeypatch.setenv("PROM_TOKEN", "s3cret")
    prom = section("prometheus", Prom, path)
    assert prom == Prom(url="http://127.0.0.1:9090", token="s3cret", step_s=30)


def test_a_missing_variable_is_named(tmp_path, monkeypatch):
    path = tmp_path / "gpupool.yml"
    path.write_text("prometheus:\n  url: http://x\n  token: ${PROM_TOKEN}\n")
    monkeypatch.delenv("PROM_TOKEN", raising=False)
    with pytest.raises(ConfigError, match="prometheus.token: environment variable PROM_TOKEN is not set"):
        load_config(path)


def test_an_invalid_section_says_which_field(tmp_path):
    path = tmp_path / "gpupool.yml"
    path.write_text("prometheus:\n  step_s: often\n")
    with pytest.raises(ConfigError, match=r"section prometheus: url: Field required; step_s"):
        section("prometheus", Prom, path)
