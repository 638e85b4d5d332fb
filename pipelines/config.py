"""The site's configuration (connectors, engines, and the site's own prices, rules and policies; see
docs/configuration.md): one YAML file, secrets only from the environment.

The file is `gpupool --config FILE`'s, else `$GPUPOOL_CONFIG`, else `./gpupool.yml`; with none, every
connector is off, the packaged data applies and the pipeline reads only the landing zone. A value may
be written `${NAME}` (or `${NAME:-default}`) to take it from the environment: that is the only way
secrets get in, and a literal that looks like a secret is not refused but should never be committed (see
`gpupool.example.yml`). Each connector module defines the pydantic model of its own section and
reads it with `section(name, Model)`.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, Field, ValidationError

from pipelines.yamlfile import load_yaml

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
ModelT = TypeVar("ModelT", bound=BaseModel)


class ConfigError(ValueError):
    """The configuration file is missing a variable, malformed, or a section is invalid."""


def config_path(config_file: str | Path | None = None) -> Path:
    """The configuration file: `config_file` when given (a resource's setting), else $GPUPOOL_CONFIG,
    else ./gpupool.yml."""
    return Path(config_file) if config_file else Path(os.environ.get("GPUPOOL_CONFIG", "gpupool.yml"))


def use_config(config_file: Path | None) -> Path | None:
    """Make `config_file` (else the file `config_path` finds, when it exists) the configuration of this
    process and of every process it starts (dbt, Dagster, Streamlit): $GPUPOOL_CONFIG set to its absolute
    path, since a child may run in another folder. Returns that path, or None when there is no file."""
    path = Path(config_file) if config_file else config_path()
    if not path.is_file():
        return None
    os.environ["GPUPOOL_CONFIG"] = str(path.resolve())
    return path.resolve()


def config_relative(path: Path | None, config_file: str | Path | None = None) -> Path | None:
    """A path named in the configuration file: as it is when absolute, else from the file's folder."""
    if path is None or path.is_absolute():
        return path
    return config_path(config_file).resolve().parent / path


def config_file_field() -> Any:
    """The `config_file` setting of every resource that reads gpupool.yml (read with `config_path`)."""
    return Field("", description=(
        "The connector configuration (gpupool.yml). Empty: $GPUPOOL_CONFIG, else ./gpupool.yml; the code "
        "location binds it to EnvVar GPUPOOL_CONFIG when that is set. Secrets stay in the environment, "
        "named in the file as ${VAR}."))


def _interpolate(value: object, where: str) -> object:
    if isinstance(value, str):
        def replace(match: re.Match) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set")

        return _ENV.sub(replace, value)
    if isinstance(value, dict):
        return {k: _interpolate(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


def load_config(path: Path | None = None) -> dict:
    """The whole file, environment variables substituted; {} when there is no file."""
    path = path or config_path()
    if not path.exists():
        return {}
    try:
        raw = load_yaml(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level")
    return _interpolate(raw, str(path))


def section(name: str, model: type[ModelT], path: Path | None = None) -> ModelT | None:
    """One section validated by its model, or None when the file has no such section."""
    config = load_config(path)
    if name not in config or config[name] is None:
        return None
    try:
        return model.model_validate(config[name])
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors())
        raise ConfigError(f"{path or config_path()}: section {name}: {problems}") from None
