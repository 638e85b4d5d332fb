"""deploy/k8s/: the Kustomize base renders (kubectl kustomize), every object passes the Kubernetes
schema of the official client's models (kubernetes==35, generated from the API's OpenAPI document),
the pods run the image's roles with probes, secrets stay out of the repository, the Dagster chart's
values fit the base, and the RBAC is exactly what the Kueue enforcer's code calls.

`kubectl apply --dry-run=client` is not run: kubectl 1.32 asks an API server for discovery even for a
client-side dry run, and none is reachable offline."""
from __future__ import annotations

import ast
import json
import shutil
import subprocess
import types
from pathlib import Path

import kubernetes.client as k8s
import pytest
import yaml

from pipelines.paths import REPO_ROOT
from pipelines.sources.kueue_objects import GROUP
from tests.deploy.roles import DEPLOY, entrypoint_roles

BASE = DEPLOY / "k8s"
KUSTOMIZATION = yaml.safe_load((BASE / "kustomization.yaml").read_text())
(IMAGE,) = KUSTOMIZATION["images"]
# Secrets the operator creates (docs/deploy.md); the base references them and holds none
SECRETS = {"gpupool-tokens", "gpupool-webhook-tls"}
# the code that calls the Kubernetes API for the Kueue enforcer and the governance tick
ENFORCER_SOURCES = ["pipelines/enforcement/kueue.py", "pipelines/enforcement/kubernetes.py",
                    "pipelines/connectors/kueue.py", "pipelines/governance/running_kueue.py"]
# the official client's methods -> (verb, resource) for core objects, (verb, index of `plural`) for custom
CORE_CALLS = {"read_node": ("get", "nodes"), "patch_node": ("patch", "nodes"),
              "list_namespaced_pod": ("list", "pods"), "list_pod_for_all_namespaces": ("list", "pods"),
              "create_namespaced_event": ("create", "events")}
CUSTOM_CALLS = {"get_namespaced_custom_object": ("get", 3), "patch_namespaced_custom_object": ("patch", 3),
                "list_namespaced_custom_object": ("list", 3), "list_cluster_custom_object": ("list", 2),
                "get_cluster_custom_object": ("get", 2)}


@pytest.fixture(scope="module")
def objects() -> list[dict]:
    """The rendered base; without kubectl, the plain manifests its kustomization lists."""
    if shutil.which("kubectl"):
        done = subprocess.run(["kubectl", "kustomize", str(BASE)], capture_output=True, text=True, check=False,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    return [doc for name in KUSTOMIZATION["resources"] for doc in yaml.safe_load_all((BASE / name).read_text()) if doc]


def model_name(obj: dict) -> str:
    """apps/v1 Deployment -> V1Deployment (the client's class for the kind)."""
    version = obj["apiVersion"].split("/")[-1]
    return version[0].upper() + version[1:] + obj["kind"]


def unknown_fields(value: object, openapi_type: str, where: str) -> list[str]:
    """Every key of `value` that its OpenAPI type (as the client's models spell it) does not have."""
    if openapi_type.startswith("list["):
        return [p for i, item in enumerate(value) for p in unknown_fields(item, openapi_type[5:-1], f"{where}[{i}]")]
    if openapi_type.startswith("dict("):
        inner = openapi_type[5:-1].split(", ", 1)[1]
        return [p for key, item in value.items() for p in unknown_fields(item, inner, f"{where}.{key}")]
    model = getattr(k8s, openapi_type, None)
    if model is None:  # str, int, bool, object (int-or-string), ...
        return []
    if not isinstance(value, dict):
        return [f"{where}: a {openapi_type} is an object, not {value!r}"]
    by_json = {json_name: attr for attr, json_name in model.attribute_map.items()}
    problems = [f"{where}.{key}: no such field of {openapi_type}" for key in value if key not in by_json]
    return problems + [p for key, item in value.items() if key in by_json
                       for p in unknown_fields(item, model.openapi_types[by_json[key]], f"{where}.{key}")]


def test_every_object_passes_the_kubernetes_schema(objects):
    client = k8s.ApiClient()
    assert objects
    for obj in objects:
        name = f"{obj['kind']}/{obj['metadata']['name']}"
        assert not unknown_fields(obj, model_name(obj), name)
        # the models refuse a missing required field (a container's name, a rule's verbs, ...)
        client.deserialize(types.SimpleNamespace(data=json.dumps(obj)), model_name(obj))


def test_the_schema_check_catches_a_misspelt_and_a_missing_field():
    bad = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
           "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "imagePullPolicy": "Always",
                                                                           "livenessProbes": {}}]}}}}
    misspelt = "x.spec.template.spec.containers[0].livenessProbes: no such field of V1Container"
    assert unknown_fields(bad, "V1Deployment", "x") == [misspelt]
    del bad["spec"]["template"]["spec"]["containers"][0]["name"]
    with pytest.raises(ValueError, match="name"):
        k8s.ApiClient().deserialize(types.SimpleNamespace(data=json.dumps(bad)), "V1Deployment")


def deployments(objects) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Deployment"}


def test_every_deployment_runs_a_role_of_the_image_as_non_root_with_a_readiness_probe(objects):
    roles = entrypoint_roles()
    for name, deployment in deployments(objects).items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        for container in pod["containers"]:
            # kustomize's images transformer names the registry's (unrendered: the placeholder)
            assert container["image"] in (IMAGE["name"], f"{IMAGE['newName']}:{IMAGE['newTag']}"), name
            assert container["args"][0] in roles, f"{name}: {container['args']}"
            assert "readinessProbe" in container, name
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, name


def test_allocator_and_webhook_are_probed_on_healthz(objects):
    for name in ("gpupool-allocator", "gpupool-audit-webhook"):
        (container,) = deployments(objects)[name]["spec"]["template"]["spec"]["containers"]
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/healthz", f"{name} {probe}"


def test_webhook_serves_tls_from_its_secret_and_the_configmap_names_the_files(objects):
    pod = deployments(objects)["gpupool-audit-webhook"]["spec"]["template"]["spec"]
    (tls,) = [v for v in pod["volumes"] if "secret" in v]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == tls["name"]]
    hook = yaml.safe_load((BASE / "gpupool.yml").read_text())["kubernetes"]["audit_webhook"]
    assert tls["secret"]["secretName"] == "gpupool-webhook-tls"
    assert hook["certfile"] == f"{mount['mountPath']}/tls.crt" and hook["keyfile"] == f"{mount['mountPath']}/tls.key"


def test_configmap_is_a_valid_kubernetes_section_of_gpupool_yml(objects):
    from pipelines.connectors.kubernetes import KubernetesConfig, load_kubernetes_config

    assert isinstance(load_kubernetes_config(BASE / "gpupool.yml"), KubernetesConfig)
    (generator,) = KUSTOMIZATION["configMapGenerator"]
    assert generator == {"name": "gpupool-config", "files": ["gpupool.yml"]}
    for config in (o for o in objects if o["kind"] == "ConfigMap"):  # rendered by kubectl
        assert config["data"]["gpupool.yml"] == (BASE / "gpupool.yml").read_text()


def test_secrets_are_referenced_never_included(objects):
    assert not [o for o in objects if o["kind"] == "Secret"]
    referenced = {ref["name"] for o in objects for ref in _find(o, "secretKeyRef")}
    referenced |= {ref["secretName"] for o in objects for ref in _find(o, "secret")}
    assert referenced == SECRETS


def _find(node: object, key: str) -> list:
    if isinstance(node, dict):
        return ([node[key]] if key in node else []) + [x for v in node.values() for x in _find(v, key)]
    if isinstance(node, list):
        return [x for v in node for x in _find(v, key)]
    return []


def test_services_select_a_deployment_and_target_its_named_ports(objects):
    pods = {name: d["spec"]["template"] for name, d in deployments(objects).items()}
    for service in (o for o in objects if o["kind"] == "Service"):
        selector = service["spec"]["selector"]
        matching = [t for t in pods.values() if selector.items() <= t["metadata"]["labels"].items()]
        assert len(matching) == 1, service["metadata"]["name"]
        ports = {p["name"] for c in matching[0]["spec"]["containers"] for p in c["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_claims_and_configmaps_the_pods_mount_exist(objects):
    claims = {o["metadata"]["name"] for o in objects if o["kind"] == "PersistentVolumeClaim"}
    maps = {g["name"] for g in KUSTOMIZATION["configMapGenerator"]}
    for name, deployment in deployments(objects).items():
        for volume in deployment["spec"]["template"]["spec"]["volumes"]:
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, name
            if "configMap" in volume:
                assert volume["configMap"]["name"] in maps, name
    home = [o for o in objects if o["metadata"]["name"] == "gpupool-home"]
    assert home[0]["spec"]["accessModes"] == ["ReadWriteMany"]


def test_dagster_chart_values_use_the_base_image_account_claim_and_configmap(objects):
    values = yaml.safe_load((BASE / "dagster-values.yaml").read_text())
    (code,) = values["dagster-user-deployments"]["deployments"]
    assert code["image"]["repository"] == IMAGE["newName"]
    assert code["dagsterApiGrpcArgs"] == ["--module-name", "pipelines.definitions"]
    accounts = {o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"}
    assert values["dagster-user-deployments"]["serviceAccount"]["name"] in accounts
    launcher = values["runLauncher"]
    assert launcher["type"] == "K8sRunLauncher"
    assert launcher["config"]["k8sRunLauncher"]["runK8sConfig"]["podSpecConfig"]["serviceAccountName"] in accounts
    names = {o["metadata"]["name"] for o in objects} | {g["name"] for g in KUSTOMIZATION["configMapGenerator"]}
    for volume in code["volumes"]:
        assert (volume.get("persistentVolumeClaim", {}).get("claimName")
                or volume["configMap"]["name"]) in names
    assert values["postgresql"]["enabled"] is False


def enforcer_api_calls() -> set[tuple[str, str, str]]:
    """(API group, resource, verb) of every Kubernetes API call in the enforcer's and tick's code, read
    from the source: a custom-object call's `plural` is a literal, or a parameter of the enclosing
    method whose callers in the same file pass literals. A call the tables above do not know fails."""
    found = set()
    for relative in ENFORCER_SOURCES:
        tree = ast.parse((REPO_ROOT / relative).read_text())
        for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
                method = call.func.attr if isinstance(call.func, ast.Attribute) else None
                owner = call.func.value if method else None
                if not (isinstance(owner, ast.Attribute) and owner.attr in ("core", "custom")):
                    continue
                if method in CORE_CALLS:
                    verb, resource = CORE_CALLS[method]
                    found.add(("", resource, verb))
                    continue
                assert method in CUSTOM_CALLS, f"{relative}: unknown Kubernetes call {method}: map it here"
                verb, index = CUSTOM_CALLS[method]
                assert isinstance(call.args[0], ast.Name) and call.args[0].id == "GROUP", relative
                for plural in _literals(tree, function, call.args[index]):
                    found.add((GROUP, plural, verb))
    return found


def _literals(tree: ast.Module, function: ast.FunctionDef, arg: ast.expr) -> list[str]:
    if isinstance(arg, ast.Constant):
        return [arg.value]
    position = [a.arg for a in function.args.args].index(arg.id) - 1  # after self
    callers = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr == function.name]
    assert callers, f"{function.name}: no caller names its {arg.id}"
    return [c.args[position].value for c in callers]


def test_enforcer_role_grants_exactly_the_api_calls_the_code_makes(objects):
    (role,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "gpupool-kueue-enforcer"]
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    used = enforcer_api_calls()
    assert used == granted, f"granted but unused: {granted - used}; used but not granted: {used - granted}"


def test_enforcer_role_is_bound_to_the_account_dagster_runs_as_and_nothing_else_is(objects):
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert [(b["roleRef"]["name"], [s["name"] for s in b["subjects"]]) for b in bindings] == \
        [("gpupool-kueue-enforcer", ["gpupool-governance"])]
    for name, deployment in deployments(objects).items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "gpupool", name
    (plain,) = [o for o in objects if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "gpupool"]
    assert plain["automountServiceAccountToken"] is False


@pytest.mark.parametrize("path", sorted(Path(BASE).glob("*.yaml")), ids=lambda p: p.name)
def test_every_file_of_the_base_is_listed_or_documented(path):
    used = set(KUSTOMIZATION["resources"]) | {"kustomization.yaml", "dagster-values.yaml"}
    assert path.name in used, f"{path.name} is in deploy/k8s/ but not in kustomization.yaml"
