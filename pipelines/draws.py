"""A key's own number in [0, 1): the same for the same key in every process and on every run (Python's
`hash` of a string changes with PYTHONHASHSEED). The simulated governance draws which answers are lost by
it, the what-if's demand where a started job's patience falls."""
from __future__ import annotations

import hashlib


def unit_of(key: str) -> float:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64
