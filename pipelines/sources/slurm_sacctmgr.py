"""Parser for Slurm's admin audit trail, `sacctmgr -P list transactions` → raw.audit_events.

slurmdbd records every change an administrator (or coordinator) makes to accounts, users,
associations, QOS, clusters, TRES, reservations and WCKeys as a transaction. `sacctmgr -P list
transactions` prints them as `Time|Action|Actor|Where|Info` (Slurm 22.05+; `WithAssoc` adds
`User|Account|Cluster`, the associations a transaction touched), with or without the header (`-n`),
or the columns `format=` asks for (TimeStamp is headed `Time`). Without a header the default
columns are assumed: 5 fields, or 8 with WithAssoc. Times are read as UTC: the connector runs
sacctmgr with TZ=UTC.

Mapping (a record is one line):
- action: the audit vocabulary the marts classify (marts.fct_audit_events: `permission.*` is a
  permission change, `quota.*` a quota change):
    Add/Remove/Modify Users, Accounts, Associations, Account Coord(s) → permission.grant / revoke /
      update (who may submit to which account, admin levels, coordinators);
    Modify Associations setting a limit (grp_*, max_*, min_prio_thresh, shares) → quota.update;
    Add/Modify/Remove QOS → quota.create / update / delete.
  Any other action (Add Clusters, Modify Clusters at every slurmctld start, Add TRES, reservations,
  WCKeys, federations, an action of a later Slurm) keeps its raw name, e.g. `Modify Clusters`, and
  the marts classify it as `other`.
- object_kind: user | account | association | account_coordinator | qos, else the raw action's
  noun (clusters, tres, reservation, ...); object_name: from Where (a bare name, name='x', or
  id_assoc=N) or, for associations, the user (account-level: the account) from the WithAssoc
  columns or Info, else from the association's Add Associations earlier in the file (slurmdbd
  names a modified association by id only); object_namespace: an association's account.
- after_json: Info as a JSON object of Slurm's column names (values unquoted, NULL → null: a limit
  cleared), e.g. {"grp_tres": "1001=4"} (TRES by id: `sacctmgr list tres` names them; 1001 and up
  are gres such as gres/gpu). Info that is not a `key=value, ...` list is kept as {"info": text}.
  A TRES limit set as `grp_tres = if (id_assoc=11, '1001=2', grp_tres)` is read as its value.
  Slurm records the new values only, so before_json is null.
- decision `applied` (a transaction is a committed change), source `slurm`, api_version
  `slurm/sacctmgr`; audit_id `sacctmgr:<sha1 of the line's fields>`, with `:<n>` for the n-th
  identical line of a file, so landing overlapping windows again re-delivers the same ids.

Quarantined: a line whose field count does not match the columns, an empty Time, Action or Actor,
a time that is not `YYYY-MM-DDTHH:MM:SS` or lies outside the plausible window (`plausible_time`),
Info or Where over MAX_FREE_TEXT_CHARS or another field over MAX_LABEL_VALUE_CHARS (slurmdbd keeps
Info in a 64 KiB BLOB, the actor in a 255-byte TINYTEXT), and every row when the header lacks Time,
Action or Actor.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections import Counter
from collections.abc import Mapping

import polars as pl

from pipelines.contracts import contract
from pipelines.sources.base import MAX_FREE_TEXT_CHARS, MAX_LABEL_VALUE_CHARS, ParseResult
from pipelines.sources.jsonl import Columns, RecordError, Rejects, compact_json, plausible_time, read_lines

SOURCE = "slurm"
QUARANTINE_SOURCE = "slurm_sacctmgr"
API_VERSION = "slurm/sacctmgr"
DEFAULT_COLUMNS = ("time", "action", "actor", "where", "info")
WITH_ASSOC_COLUMNS = (*DEFAULT_COLUMNS, "user", "account", "cluster")
HEADER_NAMES = {"time": "time", "timestamp": "time", "action": "action", "actor": "actor", "where": "where",
                "info": "info", "user": "user", "account": "account", "cluster": "cluster"}
REQUIRED = ("time", "action", "actor")
FIELD_LIMITS = {"info": MAX_FREE_TEXT_CHARS, "where": MAX_FREE_TEXT_CHARS}  # free text; the others are names

# Slurm action → (audit action, object kind); Modify Associations depends on what it set (below)
ACTIONS: dict[str, tuple[str, str]] = {
    "Add Users": ("permission.grant", "user"),
    "Modify Users": ("permission.update", "user"),
    "Remove Users": ("permission.revoke", "user"),
    "Add Accounts": ("permission.grant", "account"),
    "Modify Accounts": ("permission.update", "account"),
    "Remove Accounts": ("permission.revoke", "account"),
    "Add Associations": ("permission.grant", "association"),
    "Modify Associations": ("permission.update", "association"),
    "Remove Associations": ("permission.revoke", "association"),
    "Add Account Coord": ("permission.grant", "account_coordinator"),
    "Remove Account Coords": ("permission.revoke", "account_coordinator"),
    "Add QOS": ("quota.create", "qos"),
    "Modify QOS": ("quota.update", "qos"),
    "Remove QOS": ("quota.delete", "qos"),
}
_LIMIT_KEY = re.compile(r"^(grp_|max_)|^(min_prio_thresh|shares)$")  # an association's limits and fair share
_RAW_ACTION = re.compile(r"^(Add|Modify|Remove) (.+)$")
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$", re.ASCII)
_WHERE_SPLIT = re.compile(r"\s*(?:\|\||&&)\s*")  # how slurmdbd joins its SQL conditions
_NAME_KEYS = ("name", "user", "acct", "id_assoc", "id")
_OR_MARK = "\x00OR\x00"  # stands for " || " while a line is split at its '|'s


def split_sql_list(text: str) -> list[str]:
    """`a=1, b='x, y', c=if (id=1, '2', c)` → ["a=1", "b='x, y'", "c=if (id=1, '2', c)"]: commas
    inside quotes or parentheses do not split."""
    parts, current, quote, depth = [], [], "", 0
    for char in text:
        if quote:
            current.append(char)
            if char == quote:
                quote = ""
        elif char in "'\"`":
            quote = char
            current.append(char)
        elif char in "()":
            depth = max(depth + (1 if char == "(" else -1), 0)
            current.append(char)
        elif char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return [p for p in parts if p]


_IF_VALUE = re.compile(r"^if\s*\(.*?,\s*('(?:[^']*)'|[^,]*?)\s*,[^,]*\)$", re.IGNORECASE | re.DOTALL)


def _unquote(value: str) -> str | int | None:
    # a TRES limit is set per row: `grp_tres = if (id_assoc=11, '1001=2', grp_tres)` sets '1001=2'
    conditional = _IF_VALUE.match(value)
    if conditional:
        value = conditional.group(1).strip()
    if value.upper() == "NULL":
        return None
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"`":
        return value[1:-1]
    # ids, counts and limits as numbers; longer digit strings stay text (no 64-bit column overflows)
    return int(value) if re.fullmatch(r"-?\d{1,18}", value) else value


def key_values(text: str) -> dict[str, str | int | None] | None:
    """Slurm's `key=value, ...` text as a dict (keys without SQL quotes), None when it is not one."""
    pairs: dict[str, str | int | None] = {}
    for part in split_sql_list(text):
        key, equals, value = part.partition("=")
        if not equals or not key.strip():
            return None
        pairs[key.strip().strip("`")] = _unquote(value.strip())
    return pairs


def where_terms(text: str) -> list[tuple[str | None, str | int | None]]:
    """Where's conditions: `gpupool`, `name='x'`, `(id_assoc=5 || id_assoc=6)` → (key or None, value)."""
    inner = text.strip()
    while inner.startswith("(") and inner.endswith(")"):
        inner = inner[1:-1].strip()
    terms: list[tuple[str | None, str | int | None]] = []
    for term in _WHERE_SPLIT.split(inner):
        term = term.strip().strip("()").strip()
        if not term:
            continue
        key, equals, value = term.partition("=")
        terms.append((key.strip().strip("`"), _unquote(value.strip())) if equals else (None, term))
    return terms


def _object_name(terms: list[tuple[str | None, str | int | None]]) -> str | None:
    for wanted in (None, *_NAME_KEYS):
        values = [str(v) for k, v in terms if k == wanted and v not in (None, "")]
        if values:
            return ",".join(values) if wanted in (None, "name", "user", "acct") else ",".join(
                f"{wanted}={v}" for v in values)
    return None


def map_action(raw_action: str, info: Mapping[str, object]) -> tuple[str, str | None]:
    """(audit action, object kind) of a Slurm transaction; unknown actions keep their raw name."""
    if raw_action == "Modify Associations" and any(_LIMIT_KEY.search(key) for key in info):
        return "quota.update", "association"
    if raw_action in ACTIONS:
        return ACTIONS[raw_action]
    match = _RAW_ACTION.match(raw_action)
    return raw_action, match.group(2).lower().replace(" ", "_") if match else None


def _occurred_at(text: str) -> dt.datetime:
    try:
        value = dt.datetime.fromisoformat(text) if _TIME.match(text) else None
    except ValueError:
        value = None
    if value is None:
        raise RecordError(f"Time is {text[:40]!r}, expected YYYY-MM-DDTHH:MM:SS (run sacctmgr with TZ=UTC and the "
                          f"default SLURM_TIME_FORMAT)")
    return plausible_time(value, "Time")


def _row(get: Mapping[str, str], audit_id: str, associations: dict[str, tuple[str, str]]) -> dict[str, object]:
    for name, value in get.items():
        limit = FIELD_LIMITS.get(name, MAX_LABEL_VALUE_CHARS)
        if len(value) > limit:
            raise RecordError(f"{name.capitalize()} is {len(value)} characters, over {limit}")
    for name in REQUIRED:
        if not get.get(name, "").strip():
            raise RecordError(f"{name.capitalize()} is empty")
    raw_action = get["action"].strip()
    info_text = get.get("info", "").strip()
    info = key_values(info_text) if info_text else {}
    after = {"info": info_text} if info is None else info
    action, object_kind = map_action(raw_action, after)
    terms = where_terms(get.get("where", ""))
    object_name = _object_name(terms)
    namespace = None
    if object_kind == "association":
        # slurmdbd fills WithAssoc's User/Account for adds only: a later change names the
        # association by id, resolved through its Add Associations earlier in the file
        ids = [str(v) for k, v in terms if k == "id_assoc"]
        known = associations.get(ids[0], ("", "")) if len(ids) == 1 else ("", "")
        account = get.get("account") or after.get("acct") or known[0]
        user = get.get("user") or after.get("user") or known[1]
        if raw_action == "Add Associations" and len(ids) == 1 and account:
            associations[ids[0]] = (str(account), str(user or ""))
        namespace = str(account) if account else None
        object_name = str(user) if user else (namespace or object_name)
    return {
        "audit_id": audit_id,
        "occurred_at": _occurred_at(get["time"].strip()),
        "actor": get["actor"].strip(),
        "action": action,
        "object_kind": object_kind,
        "object_namespace": namespace,
        "object_name": object_name,
        "after_json": compact_json(after) if after else None,
        "decision": "applied",
        "api_version": API_VERSION,
        "source": SOURCE,
    }


def _columns(first_line: str) -> tuple[list[str], bool]:
    """The line's column names and whether it is a header; without one, the default columns."""
    names = [n.strip().lower() for n in first_line.split("|")]
    if names and names[-1] == "":  # --parsable (not -P) ends each line with a '|'
        names = names[:-1]
    if names and all(n in HEADER_NAMES for n in names):
        return [HEADER_NAMES[n] for n in names], True
    count = len(names)
    return list(WITH_ASSOC_COLUMNS if count >= len(WITH_ASSOC_COLUMNS) else DEFAULT_COLUMNS), False


def _fields(line: str, names: list[str]) -> list[str]:
    """The line's fields. Slurm's SQL conditions join terms with " || " (Where of a change to
    several objects): that is not a separator. Another '|' too many (free text such as a
    description) joins back into Info."""
    fields = [f.replace(_OR_MARK, " || ") for f in line.replace(" || ", _OR_MARK).split("|")]
    if len(fields) == len(names) + 1 and fields[-1] == "":
        fields = fields[:-1]
    extra = len(fields) - len(names)
    if extra > 0 and "info" in names:
        at = names.index("info")
        fields = [*fields[:at], "|".join(fields[at:at + extra + 1]), *fields[at + extra + 1:]]
    if len(fields) != len(names):
        raise RecordError(f"expected {len(names)} fields ({'|'.join(names)}), found {len(fields)}")
    return fields


def parse_sacctmgr_transactions(data: bytes | str, source_file: str) -> ParseResult:
    """`sacctmgr -P list transactions` output → audit_events (one row per transaction line)."""
    rejects = Rejects()
    lines = read_lines(data, rejects)
    read = len(rejects)
    audits = Columns(contract("audit_events").schema)
    notes: list[str] = []
    quiet = False
    if lines:
        names, has_header = _columns(lines[0][1])
        rows = lines[1:] if has_header else lines
        missing = [n for n in REQUIRED if n not in names]
        seen: Counter[str] = Counter()
        associations: dict[str, tuple[str, str]] = {}  # id_assoc -> (account, user) from the file's adds
        for number, line in rows:
            read += 1
            if missing:
                rejects.add(number, f"header lacks {', '.join(missing)}: expected sacctmgr -P list transactions "
                                    f"output (Time|Action|Actor|Where|Info)", line, "parse")
                continue
            try:
                fields = _fields(line, names)
            except RecordError as error:
                rejects.add(number, str(error), line, "parse")
                continue
            get = dict(zip(names, fields, strict=True))
            key = "|".join(get.get(n, "") for n in WITH_ASSOC_COLUMNS)
            seen[key] += 1
            digest = hashlib.sha1(key.encode()).hexdigest()[:20]
            audit_id = f"sacctmgr:{digest}" + (f":{seen[key]}" if seen[key] > 1 else "")
            try:
                audits.append(**_row(get, audit_id, associations), source_file=source_file, line_number=number)
            except RecordError as error:
                rejects.add(number, str(error), line)
        # the header line alone: sacctmgr's answer for a day without a transaction
        quiet = has_header and not rows and not missing and not read
        if quiet:
            notes.append("no transaction in the answer: a quiet day")
    elif not read:
        notes.append("empty file")
    frame: pl.DataFrame = audits.frame()
    return ParseResult(
        tables={"audit_events": frame},
        quarantine=rejects.frame(QUARANTINE_SOURCE, source_file),
        records_read=read,
        records_loaded=frame.height,
        notes=notes,
        empty_answer=quiet,
    )
