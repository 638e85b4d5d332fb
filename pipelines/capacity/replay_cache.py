"""Replays already run, kept in the home: a what-if or a smallest-change search that asks for a replay
run before (the same demand, change, policies, catalog and code) takes its figures instead of replaying
the month again. `gpupool whatif` twice on one month replays its baseline once; `gpupool recommend`
after it starts from that baseline.

A replay is deterministic (no fault drawn, a fixed seed), so its figures are a function of what the key
digests: the month's demand as read from the warehouse (a new ingest or build that changes it misses),
the change, whether the policies act, the catalog they act with, the source of the code that replays
(allocator/, pipelines/capacity, governance and policies) and the versions of NumPy and Polars (an
upgrade of either misses). A key that cannot match is only a miss; figures are never shared between
keys. Entries are JSON files under <home>/capacity/replays/, written whole (a reader sees the old file
or the new one), the newest KEEP kept."""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import pickle
from importlib.metadata import version
from pathlib import Path

from allocator.filemodes import PRIVATE_DIR_MODE, PRIVATE_MODE, make_dirs, write_atomic
from pipelines.capacity.demand import Demand
from pipelines.paths import REPO_ROOT
from pipelines.policies.catalog import PolicyCatalog

FOLDER = Path("capacity") / "replays"
KEEP = 64  # entries kept per home (a month's search is about ten replays)
# the code a replay's figures depend on: the allocator and simulator, the replay, the policies acting
CODE = ("allocator", "pipelines/capacity", "pipelines/governance", "pipelines/policies")
LIBRARIES = ("numpy", "polars")


@functools.cache
def code_digest(root: Path = REPO_ROOT) -> str:
    """A digest of the Python source of CODE under `root` and of the versions of the libraries that
    compute a replay (LIBRARIES: an upgrade may move a float)."""
    digest = hashlib.sha256("\0".join(f"{name}={version(name)}" for name in LIBRARIES).encode())
    for folder in CODE:
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def demand_digest(demand: Demand) -> str:
    """A digest of the demand as read: equal reads of one warehouse give equal digests. Pickled without
    its memo (`fast`): with it, the bytes depend on which equal values are one object, which differs
    between reads."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.fast = True
    pickler.dump(demand)
    return hashlib.sha256(out.getbuffer()).hexdigest()


def replay_key(demand_key: str, change_text: str, policies: bool, catalog: PolicyCatalog | None) -> str:
    """The entry of one replay: `catalog` is the one the policies act with (None when they are off)."""
    parts = [demand_key, change_text, str(policies), repr(catalog) if policies else "", code_digest()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class ReplayCache:
    """The replays kept in a home (module doc); `get` and `put` take a key from `replay_key`."""

    def __init__(self, home: Path | str):
        self.folder = Path(home) / FOLDER

    def get(self, key: str) -> dict | None:
        """The kept figures' fields, or None (never kept, or a file that is not a whole entry of this key)."""
        try:
            entry = json.loads((self.folder / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or entry.get("key") != key or not isinstance(entry.get("figures"), dict):
            return None
        return entry["figures"]

    def put(self, key: str, figures: object) -> bool:
        """Keep a replay's figures (a dataclass); the oldest entries beyond KEEP go. False when the home
        cannot take it (read-only, full): a replay kept is time saved later, never a reason to fail now."""
        try:
            make_dirs(self.folder, PRIVATE_DIR_MODE)
            write_atomic(self.folder / f"{key}.json",
                         json.dumps({"key": key, "figures": dataclasses.asdict(figures)}, sort_keys=True), PRIVATE_MODE)
        except OSError:
            return False
        try:
            entries = sorted(self.folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
            for old in entries[KEEP:]:
                old.unlink(missing_ok=True)
        except OSError:
            pass  # another run pruned beside this one
        return True


def kept_text(search: dict) -> str:
    """How many of a search's replays (its stored summary) ran then and how many were kept from earlier runs."""
    kept = search.get("kept_replays", 0)
    return f"{search['replays'] - kept} run now, {kept} kept from earlier runs"
