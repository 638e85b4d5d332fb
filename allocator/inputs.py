"""What the allocator's API accepts, and how it keeps what it stores and answers valid JSON.

Everything a request carries is checked before anything is committed (see docs/allocator.md,
"Input limits"):

- the body is at most `MAX_BODY_BYTES` (413 beyond), strict JSON: UTF-8, no NaN/Infinity, no lone
  UTF-16 surrogate (JSON "\\ud800"), nested at most `MAX_JSON_DEPTH` deep (422 otherwise);
- every field is typed strictly (no "3" or true for a number, no 1 for true) and bounded: the
  `Name` / `Text` string types, finite numbers within ranges, dicts and lists of bounded size;
- the store refuses to log a command whose payload is not clean JSON (`json_problem`), whatever
  the API let through.

Records written by earlier versions may hold such values. They are replayed as they were logged
(the engine reaches the same state) and escaped where they leave: every JSON answer is rendered by
`dumps_safe`, which falls back to `scrub` (a lone surrogate becomes the six characters "\\ud800",
a non-finite number null) instead of failing.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StrictBool, StrictFloat, StrictInt, StrictStr

MAX_BODY_BYTES = 1024 * 1024  # a request body (413 beyond)
MAX_JSON_DEPTH = 16  # objects/arrays nested in a body
MAX_NAME = 200  # identifiers: queues, tenants, GPU models, idempotency keys, policies, job ids
MAX_TEXT = 4096  # free text: job names, reasons
MAX_EVIDENCE_BYTES = 256 * 1024  # an action's evidence, as compact JSON (per-GPU windows of a large job fit)
MAX_EVIDENCE_DEPTH = 8
MAX_LIST = 256  # entries of a list or dict field (GPU models, shared_with, quota)
MAX_GPUS = 4096  # GPUs of one request or of one quota entry
MAX_RUNTIME_S = 366 * 86400  # run times, caps and reminders: a year at most
MAX_PRIORITY = 1000
MAX_RETRY_BUDGET = 1000
MAX_REPLICAS = 4096
MAX_CURSOR = 2**63 - 1  # SQLite's largest integer


def has_surrogate(text: str) -> bool:
    """A lone UTF-16 surrogate: a str Python holds but UTF-8 cannot encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _valid_text(text: str) -> str:
    if has_surrogate(text):
        raise ValueError("contains a lone UTF-16 surrogate (not valid Unicode)")
    return text


# Field types of the request bodies. Strict: a JSON string is not a number, true is not 1.
Name = Annotated[StrictStr, Field(min_length=1, max_length=MAX_NAME), AfterValidator(_valid_text)]
Text = Annotated[StrictStr, Field(max_length=MAX_TEXT), AfterValidator(_valid_text)]
Seconds = Annotated[StrictInt, Field(ge=1, le=MAX_RUNTIME_S)]
Gpus = Annotated[StrictInt, Field(ge=1, le=MAX_GPUS)]
QuotaGpus = Annotated[StrictFloat, Field(ge=0, le=MAX_GPUS, allow_inf_nan=False)]
Quota = Annotated[dict[Name, QuotaGpus], Field(max_length=MAX_LIST)]
Flag = StrictBool


def _bounded_evidence(value: dict[str, Any]) -> dict[str, Any]:
    problem = json_problem(value, max_depth=MAX_EVIDENCE_DEPTH, max_int=2**63 - 1)
    if problem:
        raise ValueError(problem)
    size = len(json.dumps(value, separators=(",", ":")))
    if size > MAX_EVIDENCE_BYTES:
        raise ValueError(f"is {size} bytes as JSON, at most {MAX_EVIDENCE_BYTES}")
    return value


Evidence = Annotated[dict[str, Any], AfterValidator(_bounded_evidence)]


# -- JSON hygiene ----------------------------------------------------------------------------------


def json_problem(
    value: Any, *, max_depth: int = MAX_JSON_DEPTH, max_string: int | None = None, max_int: int | None = None
) -> str | None:
    """What makes `value` not clean JSON (None if nothing): a lone surrogate in a string or key, a
    NaN or infinity, a non-string key, a type JSON has not, nesting deeper than `max_depth`, and where
    given a string longer than `max_string` or an integer beyond ±`max_int`."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "$")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            if has_surrogate(item):
                return f"{where}: a lone UTF-16 surrogate (not valid Unicode)"
            if max_string is not None and len(item) > max_string:
                return f"{where}: a string longer than {max_string} characters"
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if max_int is not None and abs(item) > max_int:
                return f"{where}: {item} is beyond ±{max_int}"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{where}: {item} is not a finite number"
        elif isinstance(item, dict | list | tuple):
            if depth >= max_depth:
                return f"{where}: nested deeper than {max_depth} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        return f"{where}: a key that is not a string ({key!r})"
                    if has_surrogate(key):
                        return f"{where}: a key with a lone UTF-16 surrogate (not valid Unicode)"
                    stack.append((child, depth + 1, f"{where}.{key[:40]}"))
            else:
                stack.extend((child, depth + 1, f"{where}[{i}]") for i, child in enumerate(item))
        else:
            return f"{where}: {type(item).__name__} is not a JSON value"
    return None


class StrictJSONError(json.JSONDecodeError):
    """A request body that is JSON to Python's parser but not clean JSON (answered 422 like bad JSON)."""


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_strict_json(body: bytes) -> Any:
    """A request body: UTF-8 JSON without NaN/Infinity, lone surrogates or deep nesting.
    Every refusal raises a `json.JSONDecodeError` (FastAPI answers it 422 json_invalid)."""
    try:
        text = body.decode("utf-8")  # strict: encoded surrogates (ED A0 80) and stray bytes refused
    except UnicodeDecodeError as exc:
        raise StrictJSONError(f"not UTF-8 ({exc.reason})", "", exc.start) from None
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        raise StrictJSONError(str(exc), "", 0) from None
    except RecursionError:
        raise StrictJSONError(f"nested deeper than {MAX_JSON_DEPTH} levels", "", 0) from None
    problem = json_problem(value)
    if problem:
        raise StrictJSONError(problem, "", 0)
    return value


def escape_text(text: str) -> str:
    """A string with every lone surrogate written as its six-character escape, e.g. \\ud800 (valid Unicode)."""
    if not has_surrogate(text):
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def scrub(value: Any) -> Any:
    """`value` made clean JSON: lone surrogates escaped (`escape_text`), NaN and infinities null.
    For records written before the API refused them; returns `value` itself when it is clean."""
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def dumps_safe(value: Any) -> bytes:
    """UTF-8 JSON that cannot fail on what `scrub` repairs: the answer after a command is committed."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        clean = scrub(value)
        return json.dumps(clean, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=str).encode(
            "utf-8", "backslashreplace"
        )
