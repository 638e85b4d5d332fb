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

Kueue quota objects (apiGroup kueue.x-k8s.io, clusterqueues and resourceflavors; the marts count
their mutations as quota changes): after_json is the object's quota after the change, from
responseObject when it is the whole object (RequestResponse level; a patch's requestObject is only
the patch), else requestObject: {"kind", "name", "spec"} with a ClusterQueue's spec cut to cohort
and resourceGroups (each flavor's resources with nominalQuota, borrowingLimit, lendingLimit), a
ResourceFlavor's spec whole; a patch without the whole object is kept as sent. before_json is the
quota the object's previous change in the same file left (its earlier successful record), and for
a delete the deleted object Kubernetes returned; null when neither is in the file.

Quarantined: a line that is not JSON (nor Unicode, nor shallow enough to parse) or not an object, a
kind other than Event/EventList, an apiVersion outside audit.k8s.io, a missing auditID, verb or
user.username, no usable timestamp; and a `RefusedEvent` line (apiVersion gpupool.io/v1), which
the audit webhook writes in place of an item it could not keep (not Unicode, too deep, too large,
not JSON), with the webhook's reason and the start of the item as `raw`.
"""
from __future__ import annotations

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
            return parse_rfc3339(text, name)
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
    request_object = get(event, "requestObject", "object")
    response_object = get(event, "responseObject", "object")
    after = request_object if request_object is not None else response_object
    before = None
    quota_kind = _kueue_quota_object(event)
    if quota_kind is not None:
        whole = [o for o in (response_object, request_object) if isinstance(o, dict) and o.get("kind") == quota_kind]
        if event.get("verb") == "delete":
            before, after = (kueue_quota(whole[0], quota_kind) if whole else None), None
        else:
            after = kueue_quota(whole[0], quota_kind) if whole else request_object
        row_quota = {"_quota_whole": bool(whole)}
        name = kueue_quota(whole[0], quota_kind).get("name") if whole else None  # type: ignore[union-attr]
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


def _chain_quota(row: dict[str, object], quotas: dict[tuple[object, object], str | None], *, whole: bool) -> None:
    """Give a Kueue quota change the quota the object's previous successful change left as
    before_json, and remember this one's (a delete forgets the object)."""
    key = (row["object_kind"], row["object_name"])
    if row["before_json"] is None:
        row["before_json"] = quotas.get(key)
    code = row["response_code"]
    if row["stage"] not in (None, "ResponseComplete") or (isinstance(code, int) and code >= 400):
        return
    if row["action"] != "delete" and whole:
        quotas[key] = row["after_json"]  # type: ignore[assignment]
    else:
        quotas.pop(key, None)  # deleted, or a patch without the whole object: its quota is unknown


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
    quotas: dict[tuple[object, object], str | None] = {}  # Kueue quota object -> its quota after its last change
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
            if "_quota_whole" in row:
                _chain_quota(row, quotas, whole=bool(row.pop("_quota_whole")))
            audits.append(**row, source_file=source_file)
    frame: pl.DataFrame = audits.frame()
    return ParseResult(
        tables={"audit_events": frame},
        quarantine=rejects.frame(QUARANTINE_SOURCE, source_file),
        records_read=read,
        records_loaded=frame.height,
    )
