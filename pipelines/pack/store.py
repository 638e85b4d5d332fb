"""Packs kept under <home>/packs/<YYYY-MM>/<version>/, never overwritten: a new build gets a new
version folder (a UTC timestamp, suffixed when two land in the same second), listed in
<home>/packs/index.json (newest last)."""
from __future__ import annotations

import datetime as dt
import json
from pathlib import Path


def packs_dir(home: Path) -> Path:
    return Path(home) / "packs"


def new_version_dir(home: Path, month: dt.date, lang: str) -> Path:
    """A fresh folder for one pack; an existing folder is never reused."""
    base = packs_dir(home) / month.strftime("%Y-%m")
    base.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ") + f"-{lang}"
    for n in range(1000):
        path = base / (stamp if n == 0 else f"{stamp}.{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"{base}: no free version folder for {stamp}")


def read_index(home: Path) -> list[dict]:
    path = packs_dir(home) / "index.json"
    return json.loads(path.read_text()) if path.exists() else []


def add_to_index(home: Path, entry: dict) -> None:
    entries = read_index(home) + [entry]
    path = packs_dir(home) / "index.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entries, indent=2, default=str))
    tmp.replace(path)
