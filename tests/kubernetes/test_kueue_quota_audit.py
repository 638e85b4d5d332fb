"""Kueue quota objects in Kubernetes audit logs: ClusterQueue and ResourceFlavor create, update,
patch and delete become audit rows carrying the quota before and after (nominalQuota,
borrowingLimit, lendingLimit per flavor and resource). The objects are the shapes of Kueue's own
example (site/static/examples/admin/single-clusterqueue-setup.yaml) and of
tests/kubernetes/fixtures/clusterqueues.json; the Events are audit.k8s.io/v1 as the API server
writes them at the RequestResponse level (Metadata level: no objects)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from pipelines.sources.k8s_audit import kueue_quota, parse_k8s_audit

GROUP = "kueue.x-k8s.io"
ADMIN = {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins", "system:authenticated"]}


def cluster_queue(gpus: int, borrowing: int | None = None) -> dict:
    gpu = {"name": "nvidia.com/gpu", "nominalQuota": gpus}
    if borrowing is not None:
        gpu["borrowingLimit"] = borrowing
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
        "metadata": {"name": "team-a-cq", "resourceVersion": "41389", "uid": "a6ce838d-0000-4000-8000-000000000000",
                     "generation": 2, "managedFields": [{"manager": "kubectl-client-side-apply"}]},
        "spec": {
            "cohort": "gpu-pool", "namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO",
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "default-flavor", "resources": [
                    {"name": "cpu", "nominalQuota": 9}, {"name": "memory", "nominalQuota": "36Gi"}]}]},
                {"coveredResources": ["nvidia.com/gpu"], "flavors": [{"name": "a100-80gb", "resources": [gpu]}]},
            ],
        },
        "status": {"admittedWorkloads": 3, "pendingWorkloads": 1},
    }


FLAVOR = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
          "metadata": {"name": "a100-80gb", "uid": "f1"},
          "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}}}


def event(audit_id: str, verb: str, resource: str, name: str | None, at: str, *, code: int = 200,
          request: dict | None = None, response: dict | None = None, stage: str = "ResponseComplete",
          subresource: str | None = None) -> str:
    ref = {"resource": resource, "apiGroup": GROUP, "apiVersion": "v1beta1"}
    if name:
        ref["name"] = name
    if subresource:
        ref["subresource"] = subresource
    record = {
        "kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "RequestResponse", "auditID": audit_id,
        "stage": stage, "requestURI": f"/apis/{GROUP}/v1beta1/{resource}/{name or ''}", "verb": verb,
        "user": ADMIN, "sourceIPs": ["10.0.0.5"], "userAgent": "kubectl/v1.30.1", "objectRef": ref,
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": f"2026-12-01T{at}.100000Z", "stageTimestamp": f"2026-12-01T{at}.200000Z",
        "annotations": {"authorization.k8s.io/decision": "allow",
                        "authorization.k8s.io/reason": 'RBAC: allowed by ClusterRoleBinding "kubeadm:cluster-admins"'},
    }
    if request is not None:
        record["requestObject"] = request
    if response is not None:
        record["responseObject"] = response
    return json.dumps(record)


def gpu_limits(quota_json: str | None) -> dict | None:
    if quota_json is None:
        return None
    spec = json.loads(quota_json)["spec"]
    return next(r for g in spec["resourceGroups"] for f in g["flavors"] for r in f["resources"]
                if r["name"] == "nvidia.com/gpu")


def test_cluster_queue_and_flavor_changes_carry_their_quota_before_and_after():
    created = cluster_queue(16)
    raised = cluster_queue(24, borrowing=8)
    deleted = {**copy.deepcopy(raised), "metadata": {**raised["metadata"], "deletionTimestamp": "2026-12-01T12:00:00Z"}}
    status = {"kind": "Status", "apiVersion": "v1", "status": "Success",
              "details": {"name": "a100-80gb", "group": GROUP, "kind": "resourceflavors"}}
    lines = [
        event("rf-1", "create", "resourceflavors", None, "09:00:00", code=201, request=FLAVOR, response=FLAVOR),
        event("cq-1", "create", "clusterqueues", None, "09:01:00", code=201, request=created, response=created),
        event("cq-2", "patch", "clusterqueues", "team-a-cq", "10:00:00",
              request={"spec": {"resourceGroups": raised["spec"]["resourceGroups"]}}, response=raised),
        event("cq-3", "update", "clusterqueues", "team-a-cq", "10:30:00", subresource="status",
              request=raised, response=raised),  # Kueue's status bookkeeping: not a quota change
        event("cq-4", "patch", "clusterqueues", "team-a-cq", "11:00:00", code=422,
              request={"spec": {"cohort": 7}}, response={"kind": "Status", "status": "Failure", "code": 422}),
        event("cq-5", "delete", "clusterqueues", "team-a-cq", "12:00:00", response=deleted),
        event("rf-2", "delete", "resourceflavors", "a100-80gb", "12:05:00", response=status),
    ]
    result = parse_k8s_audit("\n".join(lines) + "\n", "audit.log")
    assert result.records_quarantined == 0
    rows = {r["audit_id"]: r for r in result.tables["audit_events"].iter_rows(named=True)}

    flavor = rows["rf-1"]
    assert (flavor["action"], flavor["object_kind"], flavor["object_name"]) == ("create", "resourceflavors", "a100-80gb")
    assert json.loads(flavor["after_json"]) == {"kind": "ResourceFlavor", "name": "a100-80gb",
                                                "spec": FLAVOR["spec"]}
    create = rows["cq-1"]
    assert create["object_name"] == "team-a-cq"  # from the object: a create's objectRef has no name
    assert create["before_json"] is None and gpu_limits(create["after_json"]) == {
        "name": "nvidia.com/gpu", "nominalQuota": 16}
    after = json.loads(create["after_json"])
    assert after["spec"]["cohort"] == "gpu-pool" and "status" not in after and "preemption" not in after["spec"]

    patch = rows["cq-2"]
    assert (patch["action"], patch["actor"], patch["response_code"]) == ("patch", "kubernetes-admin", 200)
    assert gpu_limits(patch["before_json"]) == {"name": "nvidia.com/gpu", "nominalQuota": 16}
    assert gpu_limits(patch["after_json"]) == {"name": "nvidia.com/gpu", "nominalQuota": 24, "borrowingLimit": 8}

    assert rows["cq-3"]["object_kind"] == "clusterqueues/status"
    assert rows["cq-3"]["before_json"] is None  # untouched: the whole request object, as for any resource
    assert json.loads(rows["cq-3"]["after_json"]) == raised
    refused = rows["cq-4"]  # a refused patch keeps what was sent, and does not move the chain
    assert json.loads(refused["after_json"]) == {"spec": {"cohort": 7}}
    assert gpu_limits(refused["before_json"])["nominalQuota"] == 24

    gone = rows["cq-5"]
    assert gone["after_json"] is None and gpu_limits(gone["before_json"])["borrowingLimit"] == 8
    flavor_gone = rows["rf-2"]
    assert flavor_gone["after_json"] is None
    assert json.loads(flavor_gone["before_json"])["spec"] == FLAVOR["spec"]  # from its create in this file


def test_a_merge_patch_logged_without_the_response_replaces_lists_whole():
    """RFC 7386: a merge patch's list replaces the list (Kueue's objects are custom resources, which
    take no strategic merge), so the cpu/memory group the patch leaves out is gone after it."""
    gpu_only = [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
        {"name": "a100-80gb", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 20}]}]}]
    request_level = [
        event("p-1", "update", "clusterqueues", "team-a-cq", "09:00:00", request=cluster_queue(8)),
        event("p-2", "patch", "clusterqueues", "team-a-cq", "09:10:00",
              request={"metadata": {"labels": {"team": "a"}}, "spec": {"resourceGroups": gpu_only}}),
        event("p-3", "update", "clusterqueues", "team-a-cq", "09:20:00", request=cluster_queue(12)),
    ]
    rows = parse_k8s_audit("\n".join(request_level), "audit.log").tables["audit_events"].rows(named=True)
    assert gpu_limits(rows[0]["after_json"])["nominalQuota"] == 8
    assert gpu_limits(rows[1]["before_json"])["nominalQuota"] == 8
    assert json.loads(rows[1]["after_json"]) == {"kind": "ClusterQueue", "name": "team-a-cq",
                                                 "spec": {"cohort": "gpu-pool", "resourceGroups": gpu_only}}
    assert rows[2]["before_json"] == rows[1]["after_json"]


def test_reads_and_other_resources_are_unchanged():
    queue = cluster_queue(16)
    lines = [event("g-1", "get", "clusterqueues", "team-a-cq", "09:00:00", response=queue),
             event("l-1", "create", "localqueues", "user-queue", "09:00:01", request={"kind": "LocalQueue"})]
    rows = parse_k8s_audit("\n".join(lines), "audit.log").tables["audit_events"].rows(named=True)
    assert json.loads(rows[0]["after_json"]) == queue and rows[0]["before_json"] is None
    assert json.loads(rows[1]["after_json"]) == {"kind": "LocalQueue"}


def test_kueue_quota_leaves_odd_shapes_as_they_are():
    assert kueue_quota({"spec": {"x": 1}}, "ClusterQueue") == {"spec": {"x": 1}}
    odd = {"kind": "ClusterQueue", "metadata": {"name": "q"}, "spec": {"resourceGroups": [{"flavors": "x"}, 3]}}
    assert kueue_quota(odd, "ClusterQueue") == {"kind": "ClusterQueue", "name": "q",
                                                "spec": {"resourceGroups": [{"flavors": "x"}, 3]}}


# -- patches: kubectl patch --type=json (RFC 6902) and --type=merge (RFC 7386) -------------------------
PATCHES = Path(__file__).parent / "fixtures" / "audit-clusterqueue-patches.jsonl"  # see fixtures/PROVENANCE.md


def fixture_events() -> list[dict]:
    return [json.loads(line) for line in PATCHES.read_text().splitlines() if line.strip()]


def at_request_level(events: list[dict]) -> str:
    """The same requests as the API server logs them at the Request level: no responseObject."""
    lines = []
    for e in events:
        e = {k: v for k, v in e.items() if k != "responseObject"}
        lines.append(json.dumps({**e, "level": "Request"}))
    return "\n".join(lines) + "\n"


def quota_of(quota_json: str | None, flavor: str, resource: str = "nvidia.com/gpu") -> dict | None:
    if quota_json is None:
        return None
    spec = json.loads(quota_json)["spec"]
    return next(r for g in spec["resourceGroups"] for f in g["flavors"] if f["name"] == flavor
                for r in f["resources"] if r["name"] == resource)


def final_rows(result) -> list[dict]:
    return [r for r in result.tables["audit_events"].iter_rows(named=True) if r["stage"] == "ResponseComplete"]


def test_json_patch_quota_change_is_audited():
    """The enforcer's `kubectl patch clusterqueue ... --type=json` at the RequestResponse level: the
    JSON-patch array loads, and the quota before and after are the objects' (a100-80gb 16 -> 24)."""
    result = parse_k8s_audit(PATCHES.read_bytes(), "audit.log")
    assert result.records_quarantined == 0 and result.records_loaded == result.records_read == 6
    create, json_patch, _ = final_rows(result)
    assert (json_patch["action"], json_patch["object_kind"], json_patch["object_name"]) == (
        "patch", "clusterqueues", "cluster-queue")
    assert json_patch["before_json"] == create["after_json"]
    assert quota_of(json_patch["before_json"], "a100-80gb") == {"name": "nvidia.com/gpu", "nominalQuota": 16}
    assert quota_of(json_patch["after_json"], "a100-80gb") == {"name": "nvidia.com/gpu", "nominalQuota": 24}
    assert quota_of(json_patch["after_json"], "h100-80gb")["nominalQuota"] == 8


def test_merge_patch_quota_change_is_audited():
    result = parse_k8s_audit(PATCHES.read_bytes(), "audit.log")
    _, json_patch, merge = final_rows(result)
    assert merge["before_json"] == json_patch["after_json"]
    after = json.loads(merge["after_json"])
    assert after["spec"]["cohort"] == "gpu-pool"
    assert quota_of(merge["after_json"], "h100-80gb") == {"name": "nvidia.com/gpu", "nominalQuota": 12,
                                                          "borrowingLimit": 4}


def test_json_and_merge_patches_logged_without_the_response_are_applied_to_the_previous_state():
    """At the Request level there is no responseObject: each patch is applied to the quota the
    earlier change in the file left, and gives the same before and after as the objects would."""
    full = final_rows(parse_k8s_audit(PATCHES.read_bytes(), "audit.log"))
    result = parse_k8s_audit(at_request_level(fixture_events()), "audit.log")
    assert result.records_quarantined == 0
    rows = final_rows(result)
    for logged, answered in zip(rows, full, strict=True):
        assert json.loads(logged["after_json"]) == json.loads(answered["after_json"]), logged["audit_id"]
    assert rows[1]["before_json"] == rows[0]["after_json"] and rows[2]["before_json"] == rows[1]["after_json"]
    assert not [n for n in result.notes if "not known" in n]


def test_json_patch_without_response_or_earlier_state_keeps_the_patch_and_says_so():
    events = fixture_events()[2:4]  # the JSON patch alone: the file has no earlier state of the queue
    result = parse_k8s_audit(at_request_level(events), "audit.log")
    assert result.records_quarantined == 0
    (row,) = final_rows(result)
    assert row["before_json"] is None
    assert json.loads(row["after_json"]) == events[1]["requestObject"]  # the patch as sent, no number made up
    (note,) = [n for n in result.notes if "not known" in n]
    assert "line 2" in note and "no earlier state of the object in this file" in note


def test_json_patch_whose_test_disagrees_with_the_earlier_state_is_not_guessed():
    """A `test` op that fails against the file's earlier state means that state is stale (a change
    the file does not hold): the after is not computed from it, and the chain forgets the queue."""
    events = fixture_events()
    events[3]["requestObject"][0]["value"] = 20  # the API server tested 20: the file's 16 is stale
    result = parse_k8s_audit(at_request_level(events), "audit.log")
    _, patch, merge = final_rows(result)
    assert json.loads(patch["after_json"]) == events[3]["requestObject"]
    notes = [n for n in result.notes if "not known" in n]
    assert any("line 4" in n and "test" in n for n in notes), notes
    assert merge["before_json"] is None  # the merge patch's before is unknown too, and so its after
    assert json.loads(merge["after_json"]) == events[5]["requestObject"]


def test_json_patch_ops_outside_the_quota_do_not_need_the_whole_object():
    """Ops on fields the quota does not hold (labels, preemption) are not needed to know the quota."""
    events = fixture_events()
    path = "/spec/resourceGroups/1/flavors/1/resources/0/nominalQuota"
    events[3]["requestObject"] = [
        {"op": "add", "path": "/metadata/labels/team", "value": "vision"},
        {"op": "replace", "path": "/spec/preemption/withinClusterQueue", "value": "LowerPriority"},
        {"op": "test", "path": "/metadata/resourceVersion", "value": "41389"},
        {"op": "replace", "path": path, "value": 10},
        {"op": "add", "path": "/spec/resourceGroups/1/flavors/1/resources/0/lendingLimit", "value": 2},
    ]
    rows = final_rows(parse_k8s_audit(at_request_level(events[:4]), "audit.log"))
    assert quota_of(rows[1]["after_json"], "h100-80gb") == {"name": "nvidia.com/gpu", "nominalQuota": 10,
                                                            "lendingLimit": 2}
    assert quota_of(rows[1]["after_json"], "a100-80gb")["nominalQuota"] == 16


def test_a_json_patch_array_is_only_a_patch_body():
    event_line = fixture_events()[3]
    event_line["verb"] = "update"
    result = parse_k8s_audit(json.dumps(event_line), "audit.log")
    assert result.records_loaded == 0
    assert result.quarantine["reason"].to_list() == ["field 'requestObject' is array, expected object"]
