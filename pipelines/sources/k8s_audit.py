"""Parser for Kubernetes audit logs (JSON Lines of audit.k8s.io Events) → raw.audit_events.

Accepts audit.k8s.io/v1, v1beta1 and lines without apiVersion/kind (older webhook payloads), and
`EventList` lines, whose items are expanded: a record is one Event (one line, or one item of a
list; items keep the list's line number). Every stage of a request is kept as its own row (they
share the auditID); staging dedupes.

Mapping: occurred_at = stageTimestamp, else timestamp (v1beta1), else requestReceivedTimestamp;
actor = user.username; actor_role = user.groups joined by commas; action = verb; object_kind =
objectRef.resource[/subresource]; after_json = requestObject, else responseObject (compact JSON,
sorted keys); decision = the authorization.k8s.io/decision annotation with Kubernetes' "forbid"
written as "deny"; reason = the authorization.k8s.io/reason annotation, plus "impersonating
<user>" when the request was impersonated; response_code = responseStatus.code.

A patch's requestObject is the patch as the client sent it (the API server logs its bytes): an object
for a merge or strategic-merge patch, an array of operations for a JSON patch (`kubectl patch
--type=json`, RFC 6902); an array is accepted for verb patch only.

Kueue quota objects (apiGroup kueue.x-k8s.io, clusterqueues and resourceflavors; the marts count
their mutations as quota changes): after_json is the object's quota after the change, from
responseObject when it is the whole object (RequestResponse level), else requestObject when it is
(create, update): {"kind", "name", "spec"} with a ClusterQueue's spec cut to cohort and
resourceGroups (each flavor's resources with nominalQuota, borrowingLimit, lendingLimit), a
ResourceFlavor's spec whole. A successful patch logged without the whole object (Request level) is
applied to the quota the object's previous change in the file left: a JSON patch's operations on
the quota's fields (a `test` there must hold, else that state is stale; operations elsewhere cannot
change the quota and are passed over), an object as a JSON merge patch (RFC 7386: Kueue's objects
are custom resources, which take no strategic merge). When there is no such state, or the patch does
not apply to it, the quota after is not known: after_json keeps the patch as sent, the object's
chain is forgotten, and a note names the lines and why. before_json is the quota the object's
previous change in the same file left (its earlier successful record), and for a delete the deleted
object Kubernetes returned; null when neither is in the file.

Quarantined: a line that is not JSON (nor Unicode, nor shallow enough to parse) or not an object, a
kind other than Event/EventList, an apiVersion outside audit.k8s.io, a missing auditID, verb or
user.username, no usable timestamp or one outside the plausible window (`plausible_time`); and a
`RefusedEvent` line (apiVersion gpupool.io/v1), which
the audit webhook writes in place of an item it could not keep (not Unicode, too deep, too large,
not JSON), with the webhook's reason and the start of the item as `raw`.
"""
from __future__ import annotations

import copy
import re
from collections import defaultdict

import polars as pl

from pipelines.contracts import contract
from pipelines.sources.base import ParseResult
from pipelines.sources.jsonl import (
    Columns,
    JsonRecord,
    RecordError,
    Rejects,
    compact_json,
    get,
    get_int,
    get_str,
    json_type,
    parse_rfc3339,
    plausible_time,
    read_json_lines,
)

SOURCE = "k8s"
QUARANTINE_SOURCE = "k8s_audit"
DECISION = "authorization.k8s.io/decision"
REASON = "authorization.k8s.io/reason"
TIME_FIELDS = ("stageTimestamp", "timestamp", "requestReceivedTimestamp")
REFUSED_KIND = "RefusedEvent"  # the webhook's stand-in for an item it could not keep
REFUSED_API_VERSION = "gpupool.io/v1"
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_QUOTA_KINDS = {"clusterqueues": "ClusterQueue", "resourceflavors": "ResourceFlavor"}  # resource -> kind
LIMITS = ("nominalQuota", "borrowingLimit", "lendingLimit")
MUTATIONS = ("create", "update", "patch", "delete")
# the parts of each Kueue kind's object its quota holds (JSON pointer tokens): what kueue_quota keeps
QUOTA_FIELDS = {"ClusterQueue": (("spec", "cohort"), ("spec", "resourceGroups")), "ResourceFlavor": (("spec",),)}


def refused(value: object) -> bool:
    """Whether a parsed line is the webhook's stand-in for a refused item."""
    return (
        isinstance(value, dict)
        and value.get("kind") == REFUSED_KIND
        and value.get("apiVersion") == REFUSED_API_VERSION
    )


def _check_kind(event: dict[str, object], expected: str) -> None:
    kind = get_str(event, "kind")
    if kind is not None and kind != expected:
        raise RecordError(f"kind is {kind!r}, expected {expected!r}")
    api_version = get_str(event, "apiVersion")
    if api_version is not None and not api_version.startswith("audit.k8s.io/"):
        raise RecordError(f"apiVersion is {api_version!r}, expected audit.k8s.io/v1 or v1beta1")


def _occurred_at(event: dict[str, object]) -> object:
    for name in TIME_FIELDS:
        text = get_str(event, name)
        if text is not None:
            return plausible_time(parse_rfc3339(text, name), name)
    raise RecordError("no timestamp: stageTimestamp, timestamp and requestReceivedTimestamp are all missing")


def _limits(resources: object) -> object:
    if not isinstance(resources, list):
        return resources
    return [{k: r[k] for k in ("name", *LIMITS) if k in r} if isinstance(r, dict) else r for r in resources]


def _quota_groups(groups: object) -> object:
    """A ClusterQueue's resourceGroups cut to flavors, resources and their limits (odd shapes kept)."""
    if not isinstance(groups, list):
        return groups
    out = []
    for group in groups:
        flavors = group.get("flavors") if isinstance(group, dict) else None
        if not isinstance(flavors, list):
            out.append(group)
            continue
        out.append({
            "coveredResources": group.get("coveredResources"),
            "flavors": [{"name": f.get("name"), "resources": _limits(f.get("resources"))} if isinstance(f, dict)
                        else f for f in flavors],
        })
    return out


def kueue_quota(obj: object, kind: str) -> object:
    """A whole ClusterQueue or ResourceFlavor cut to its quota ({"kind", "name", "spec"}); anything
    else (a patch, a Status) as it is."""
    if not isinstance(obj, dict) or obj.get("kind") != kind:
        return obj
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if kind == "ClusterQueue":
        spec = {k: _quota_groups(v) if k == "resourceGroups" else v
                for k, v in spec.items() if k in ("cohort", "resourceGroups")}
    return {"kind": kind, "name": metadata.get("name"), "spec": spec}


class PatchError(ValueError):
    """A patch that cannot be applied to the known quota; str(error) says why."""


def _pointer(path: object, where: str) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise PatchError(f"{where} is not a JSON pointer: {str(path)[:80]!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path.split("/")[1:]] if path else []


def _index(token: str, size: int, *, end: bool) -> int:
    if token == "-" and end:
        return size
    if not re.fullmatch(r"0|[1-9][0-9]{0,8}", token) or int(token) > size - (0 if end else 1):
        raise PatchError(f"no array index {token[:20]!r} in a list of {size}")
    return int(token)


def _container(doc: object, tokens: list[str]) -> object:
    node = doc
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(token, len(node), end=False)]
        else:
            raise PatchError(f"no /{'/'.join(tokens)} in the earlier state")
    return node


def _json_equal(a: object, b: object) -> bool:
    """JSON equality: numbers by value, true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _apply_op(doc: object, op: dict, tokens: list[str]) -> object:
    """One RFC 6902 operation on doc (changed in place where it can be); the new document."""
    kind = op.get("op")
    if kind in ("add", "replace", "copy", "move"):
        if kind in ("copy", "move"):
            source = _pointer(op.get("from"), "from")
            if kind == "move" and tokens[: len(source)] == source and len(tokens) > len(source):
                raise PatchError("move into its own child")
            value = copy.deepcopy(_container(doc, source))
            if kind == "move":
                doc = _apply_op(doc, {"op": "remove"}, source)
        elif "value" not in op:
            raise PatchError(f"{kind} without a value")
        else:
            value = copy.deepcopy(op["value"])
        if not tokens:
            return value
        parent, last = _container(doc, tokens[:-1]), tokens[-1]
        if isinstance(parent, dict):
            if kind == "replace" and last not in parent:
                raise PatchError(f"replace of /{'/'.join(tokens)}, which the earlier state does not have")
            parent[last] = value
        elif isinstance(parent, list):
            if kind == "replace":
                parent[_index(last, len(parent), end=False)] = value
            else:
                parent.insert(_index(last, len(parent), end=True), value)
        else:
            raise PatchError(f"/{'/'.join(tokens[:-1])} holds no object or array")
        return doc
    if kind == "remove":
        if not tokens:
            raise PatchError("remove of the whole object")
        parent, last = _container(doc, tokens[:-1]), tokens[-1]
        if isinstance(parent, dict) and last in parent:
            del parent[last]
        elif isinstance(parent, list):
            del parent[_index(last, len(parent), end=False)]
        else:
            raise PatchError(f"remove of /{'/'.join(tokens)}, which the earlier state does not have")
        return doc
    if kind == "test":
        if not _json_equal(_container(doc, tokens), op.get("value")):
            raise PatchError(f"its test of /{'/'.join(tokens)} does not hold against the quota the file's earlier "
                             "change left (a change the file does not hold came between)")
        return doc
    raise PatchError(f"unknown op {str(kind)[:20]!r}")


def _json_patch(doc: object, ops: list, fields: tuple[tuple[str, ...], ...]) -> object:
    """RFC 6902 operations that bear on the quota's fields, applied to doc (a copy)."""
    def touches(tokens: list[str]) -> bool:  # the quota's fields, or an object holding them
        return any(tokens[: len(f)] == list(f[: len(tokens)]) for f in fields)

    def inside(tokens: list[str]) -> bool:
        return any(tokens[: len(f)] == list(f) for f in fields)

    doc = copy.deepcopy(doc)
    for number, op in enumerate(ops):
        if not isinstance(op, dict):
            raise PatchError(f"operation {number} is {json_type(op)}, not an object")
        tokens = _pointer(op.get("path"), f"operation {number}'s path")
        source = _pointer(op.get("from"), f"operation {number}'s from") if op.get("op") in ("copy", "move") else None
        bears = inside(tokens) if op.get("op") == "test" else touches(tokens) or (source is not None and touches(source))
        if bears:
            doc = _apply_op(doc, op, tokens)
    return doc


def merge_patch(target: object, patch: object) -> object:
    """RFC 7386 JSON merge patch: objects merged key by key, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def patched_quota(quota: dict, patch: object, kind: str) -> dict:
    """The quota (kueue_quota's form) after a JSON patch (a list) or a merge patch (an object);
    PatchError when it cannot be known from them."""
    doc = {"kind": kind, "metadata": {"name": quota.get("name")}, "spec": quota.get("spec")}
    try:
        if isinstance(patch, list):
            doc = _json_patch(doc, patch, QUOTA_FIELDS[kind])  # type: ignore[assignment]
        elif isinstance(patch, dict):
            doc = merge_patch(doc, patch)  # type: ignore[assignment]
        else:
            raise PatchError(f"the patch is {json_type(patch)}")
    except RecursionError:
        raise PatchError("the patch or the quota is nested too deeply to apply") from None
    after = kueue_quota(doc, kind)
    if not isinstance(after, dict) or after.get("kind") != kind:
        raise PatchError(f"the patch leaves no {kind}")
    return after


def _kueue_quota_object(event: dict[str, object]) -> str | None:
    """The Kueue kind of a change to a ClusterQueue or ResourceFlavor, else None."""
    object_ref = event.get("objectRef")
    if not isinstance(object_ref, dict) or object_ref.get("apiGroup") != KUEUE_GROUP:
        return None
    if object_ref.get("subresource") or event.get("verb") not in MUTATIONS:  # status: Kueue's bookkeeping
        return None
    return KUEUE_QUOTA_KINDS.get(str(object_ref.get("resource")))


def _row(event_obj: object, line_number: int) -> dict[str, object]:
    if not isinstance(event_obj, dict):
        raise RecordError(f"event is {json_type(event_obj)}, expected a JSON object")
    event = event_obj
    _check_kind(event, "Event")
    user: dict[str, object] = get(event, "user", "object", required=True)
    groups = get(user, "groups", "array", where="user.")
    object_ref: dict[str, object] = get(event, "objectRef", "object") or {}
    resource = get_str(object_ref, "resource", where="objectRef.")
    subresource = get_str(object_ref, "subresource", where="objectRef.")
    annotations: dict[str, object] = get(event, "annotations", "object") or {}
    decision = get_str(annotations, DECISION, where="annotations.")
    impersonated: dict[str, object] = get(event, "impersonatedUser", "object") or {}
    impersonated_name = get_str(impersonated, "username", where="impersonatedUser.")
    reasons = [
        get_str(annotations, REASON, where="annotations.") or None,
        f"impersonating {impersonated_name}" if impersonated_name else None,
    ]
    # a JSON patch (RFC 6902) is an array of operations; every other request body is an object
    patch_ops = isinstance(event.get("requestObject"), list) and event.get("verb") == "patch"
    request_object = get(event, "requestObject", "array" if patch_ops else "object")
    response_object = get(event, "responseObject", "object")
    after = request_object if request_object is not None else response_object
    before = None
    quota_kind = _kueue_quota_object(event)
    if quota_kind is not None:
        whole = [o for o in (response_object, request_object) if isinstance(o, dict) and o.get("kind") == quota_kind]
        quota = kueue_quota(whole[0], quota_kind) if whole else None
        if event.get("verb") == "delete":
            before, after = quota, None
        else:
            after = quota if quota is not None else request_object
        row_quota = {"_quota": (quota_kind, quota, request_object if event.get("verb") == "patch" else None)}
        name = quota.get("name") if isinstance(quota, dict) else None
        if isinstance(name, str) and name and not object_ref.get("name"):  # a create's objectRef may lack it
            row_quota["object_name"] = name
    else:
        row_quota = {}
    response_status: dict[str, object] = get(event, "responseStatus", "object") or {}
    audit_id = get_str(event, "auditID", required=True)
    return {
        "audit_id": audit_id,
        "occurred_at": _occurred_at(event),
        "actor": get_str(user, "username", required=True, where="user."),
        "actor_role": ",".join(str(g) for g in groups) if groups else None,
        "action": get_str(event, "verb", required=True),
        "object_kind": f"{resource}/{subresource}" if resource and subresource else resource,
        "object_namespace": get_str(object_ref, "namespace", where="objectRef.") or None,
        "object_name": get_str(object_ref, "name", where="objectRef.") or None,
        "before_json": None if before is None else compact_json(before),
        "after_json": None if after is None else compact_json(after),
        "decision": "deny" if decision == "forbid" else decision,
        "reason": "; ".join(r for r in reasons if r) or None,
        "stage": get_str(event, "stage"),
        "response_code": get_int(response_status, "code", where="responseStatus."),
        "request_id": audit_id,
        "api_version": get_str(event, "apiVersion"),
        "source": SOURCE,
        "line_number": line_number,
        **row_quota,
    }


def _chain_quota(row: dict[str, object], quotas: dict[tuple[object, object], dict], kind: str,
                 quota: dict | None, patch: object) -> str | None:
    """Give a Kueue quota change the quota the object's previous successful change left as
    before_json, and remember this one's (a delete forgets the object). A successful patch without
    the whole object is applied to that quota; the reason when its quota after is not known."""
    key = (row["object_kind"], row["object_name"])
    previous = quotas.get(key)
    if row["before_json"] is None and previous is not None:
        row["before_json"] = compact_json(previous)
    code = row["response_code"]
    if row["stage"] not in (None, "ResponseComplete") or (isinstance(code, int) and code >= 400):
        return None
    quotas.pop(key, None)
    if row["action"] == "delete":
        return None
    if quota is None and patch is not None:
        if previous is None:
            return "no earlier state of the object in this file to apply the patch to"
        try:
            quota = patched_quota(previous, patch, kind)
            row["after_json"] = compact_json(quota)
        except (PatchError, RecordError) as error:
            return f"the patch does not apply to the earlier state: {error}"
    if quota is not None:
        quotas[key] = quota
    return None


def _unknown_notes(unknown: dict[str, list[int]]) -> list[str]:
    notes = []
    for reason, lines in unknown.items():
        shown = ", ".join(str(n) for n in lines[:20]) + (f" and {len(lines) - 20} more" if len(lines) > 20 else "")
        notes.append(f"Kueue quota after a patch not known at line{'s' if len(lines) > 1 else ''} {shown}: the "
                     f"audit level logged no responseObject, and {reason}; after_json holds the patch as sent")
    return notes


def _events(record: JsonRecord) -> list[tuple[object, str]]:
    """The Events a line holds (itself, or an EventList's items), each with its raw text."""
    value = record.value
    if isinstance(value, dict) and value.get("kind") == "EventList":
        _check_kind(value, "EventList")
        items = get(value, "items", "array", required=True)
        return [(item, compact_json(item)) for item in items]
    return [(value, record.raw)]


def parse_k8s_audit(data: bytes | str, source_file: str) -> ParseResult:
    """Kubernetes audit JSON Lines → audit_events; records read counts Events (list items expanded)."""
    rejects = Rejects()
    records = read_json_lines(data, rejects)
    read = len(rejects)
    audits = Columns(contract("audit_events").schema)
    quotas: dict[tuple[object, object], dict] = {}  # Kueue quota object -> its quota after its last change
    unknown: dict[str, list[int]] = defaultdict(list)  # why a patch's quota after is not known -> lines
    for record in records:
        if refused(record.value):
            read += 1
            value: dict = record.value  # type: ignore[assignment]
            reason, raw = value.get("reason"), value.get("raw")
            rejects.add(
                record.line_number,
                f"refused by the audit webhook: {reason if isinstance(reason, str) else 'no reason given'}",
                raw if isinstance(raw, str) else record.raw,
                "parse",
            )
            continue
        try:
            events = _events(record)
        except RecordError as error:
            read += 1
            rejects.add(record.line_number, f"EventList: {error}", record.raw)
            continue
        read += len(events)
        for index, (event, raw) in enumerate(events):
            try:
                row = _row(event, record.line_number)
            except RecordError as error:
                where = f"items[{index}]: " if raw is not record.raw else ""
                rejects.add(record.line_number, f"{where}{error}", raw)
                continue
            if "_quota" in row:
                why = _chain_quota(row, quotas, *row.pop("_quota"))
                if why:
                    unknown[why].append(record.line_number)
            audits.append(**row, source_file=source_file)
    frame: pl.DataFrame = audits.frame()
    return ParseResult(
        tables={"audit_events": frame},
        quarantine=rejects.frame(QUARANTINE_SOURCE, source_file),
        records_read=read,
        records_loaded=frame.height,
        notes=_unknown_notes(unknown),
    )
