"""The policy catalog: models/policies/policies.yml and exemptions.yml, loaded and validated.

Every threshold lives in those files so that changing one is a reviewed data change with a
version bump, never a code change. Loading checks everything the evaluation relies on (known
kinds, step actions, parameter names and ranges) and fails with the file, the key and what to do,
because a silently ignored typo in a reclaim threshold would reclaim the wrong jobs.
`gpupool.yml` may point at other files: `governance: {policies: <path>, exemptions: <path>}`
(relative paths are read from the config file's folder).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from allocator.model import TEMPLATES
from pipelines.clock import parse_utc, utc_naive
from pipelines.config import config_relative, section
from pipelines.contracts import Mode, PolicyKind, StepAction
from pipelines.paths import MODELS_DIR
from pipelines.policies.model import Exemption, RateLimits, Rule, Step
from pipelines.yamlfile import load_yaml

DEFAULT_POLICIES = MODELS_DIR / "policies" / "policies.yml"
EXEMPTIONS_NAME = "exemptions.yml"


class CatalogError(ValueError):
    """The policy catalog or the exemptions file is unreadable or invalid; the message says where and why."""


class GovernanceConfig(BaseModel):
    """`governance` section of gpupool.yml."""

    policies: Path | None = None
    exemptions: Path | None = None


# -- parameter checks: one per kind of value, each returns an error text or None ----------------
def _fraction(v: Any) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1
    return None if ok else "expected a number between 0 and 1"


def _minutes(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else "expected a whole number >= 1"


def _count(v: Any) -> str | None:
    return None if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else "expected a whole number >= 0"


def _positive(v: Any) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v > 0
    return None if ok else "expected a number > 0"


def _optional_mib(v: Any) -> str | None:
    if v is None:
        return None
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
    return None if ok else "expected null or a number of MiB >= 0"


def _factor(v: Any) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v >= 1
    return None if ok else "expected a number >= 1"


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "expected true or false"


def _strings(v: Any) -> str | None:
    ok = isinstance(v, list) and all(isinstance(s, str) for s in v)
    return None if ok else "expected a list of strings (quote values like 'no' or 'false')"


def _requirements(v: Any) -> str | None:
    ok = isinstance(v, dict) and all(
        isinstance(t, str) and isinstance(fs, list) and all(isinstance(f, str) and f for f in fs)
        for t, fs in v.items()
    )
    return None if ok else "expected a mapping of template -> list of field names ('a|b' for either)"


_IDLE = {"activity_threshold": _fraction, "spike_max_minutes": _count, "min_coverage": _fraction}
PARAMS: dict[PolicyKind, dict[str, Callable[[Any], str | None]]] = {
    PolicyKind.IDLE_ALLOCATION: {**_IDLE, "window_minutes": _minutes, "memory_floor_mib": _optional_mib},
    PolicyKind.ZOMBIE: {**_IDLE, "limit_minutes": _minutes},
    PolicyKind.IDLE_INTERACTIVE: {**_IDLE, "remind_after_minutes": _minutes, "memory_floor_mib": _optional_mib},
    PolicyKind.OVERRUN: {"expected_runtime_factor": _factor, "cap_factor": _factor, "use_queue_max_runtime": _bool},
    PolicyKind.OVERSIZED: {
        "busy_threshold": _fraction, "busy_quantile": _fraction, "min_runtime_minutes": _minutes,
        "memory_headroom": _fraction,
    },
    PolicyKind.RETRY_STORM: {"min_failed_attempts": _minutes, "window_hours": _positive, "failed_states": _strings},
    PolicyKind.TEMPLATE_BREACH: {"required": _requirements, "absent_values": _strings},
    PolicyKind.HOST_BOUND: {"min_saturated_minutes": _minutes, "min_saturated_share": _fraction},
    PolicyKind.GPU_HEALTH: {
        "min_hardware_faults": _minutes, "window_hours": _positive, "node_min_faulty_gpus": _minutes,
        "healthy_hours": _positive,
    },
}
# Kinds whose steps may only recommend (their findings are advice, never grounds to take GPUs).
ADVICE_ONLY = frozenset({PolicyKind.HOST_BOUND})
# Every policy may be switched off per scope (e.g. idle-allocation for the interactive template).
COMMON_PARAMS: dict[str, Callable[[Any], str | None]] = {"enabled": _bool}


@dataclass(frozen=True)
class Override:
    """Parameters (and optionally steps) for one queue or one template."""

    scope: str  # queue:<name> | template:<name>
    params: dict[str, Any]
    steps: tuple[Step, ...] | None = None


@dataclass(frozen=True)
class Policy:
    """One policy as the catalog declares it, before resolution for a queue or template."""

    name: str
    version: str
    kind: PolicyKind
    mode: Mode
    description: dict[str, str]  # language (en, zh) -> text
    params: dict[str, Any]
    steps: tuple[Step, ...]
    overrides: tuple[Override, ...] = ()


@dataclass(frozen=True)
class PolicyCatalog:
    version: str
    rate_limits: RateLimits
    exemptions: tuple[Exemption, ...]
    policies: dict[str, Policy] = field(default_factory=dict)

    def policy(self, name: str) -> Policy:
        try:
            return self.policies[name]
        except KeyError:
            raise KeyError(f"no policy {name!r} in the catalog; known: {sorted(self.policies)}") from None

    def rule(self, policy: str, *, queue: str | None = None, template: str | None = None) -> Rule:
        """The policy resolved for one queue/template: the template's override over the defaults,
        then the queue's over that; steps come from the most specific scope that sets them."""
        p = self.policy(policy)
        params, steps, scope = dict(p.params), p.steps, "default"
        for wanted in (f"template:{template}" if template else None, f"queue:{queue}" if queue else None):
            for o in p.overrides:
                if o.scope == wanted:
                    params.update(o.params)
                    steps = o.steps if o.steps is not None else steps
                    scope = o.scope
        return Rule(policy=p.name, version=p.version, kind=p.kind, mode=p.mode, params=params, steps=steps,
                    scope=scope)

    def scopes(self, policy: str) -> list[str]:
        """'default' and every override scope of the policy, in file order."""
        return ["default", *(o.scope for o in self.policy(policy).overrides)]

    def policies_of(self, kind: PolicyKind) -> list[str]:
        return [name for name, p in self.policies.items() if p.kind == PolicyKind(kind)]

    def exemption_for(
        self, policy: str, tenant: str, queue: str | None, job_id: str | None, now: dt.datetime
    ) -> Exemption | None:
        """The first unexpired entry matching the tenant and, where the entry names them, the
        policy, queue and job; None when nothing matches."""
        now = utc_naive(now)
        for e in self.exemptions:
            if (
                e.tenant == tenant
                and now < e.expires_at
                and e.policy in (None, policy)
                and e.queue in (None, queue)
                and e.job_id in (None, job_id)
            ):
                return e
        return None

    def with_mode(self, mode: Mode) -> PolicyCatalog:
        """Every policy forced to one mode (demos, tests, a site's first weeks in shadow)."""
        forced = {n: dataclasses.replace(p, mode=Mode(mode)) for n, p in self.policies.items()}
        return dataclasses.replace(self, policies=forced)


# -- how much telemetry a live evaluation reads -------------------------------------------------
# The live kinds whose rules look back over a window, and the parameter that sets its length.
WINDOW_PARAMS: dict[PolicyKind, str] = {
    PolicyKind.IDLE_ALLOCATION: "window_minutes",
    PolicyKind.IDLE_INTERACTIVE: "remind_after_minutes",
    PolicyKind.ZOMBIE: "limit_minutes",
}
# The least a live evaluation reads, whatever the catalog's windows (the kinds without a window, such
# as overrun, read this much); the default catalog's longest window is zombie's 120 minutes.
MIN_WINDOW = dt.timedelta(minutes=60)
LOOKBACK_MARGIN = dt.timedelta(minutes=10)  # the minutes still being scraped at the window's start


def default_lookback(catalog: PolicyCatalog, kinds: Iterable[PolicyKind] = tuple(WINDOW_PARAMS)) -> dt.timedelta:
    """The telemetry an evaluation of `kinds` reads: their longest window in the catalog (the default
    and every template's), at least MIN_WINDOW, plus LOOKBACK_MARGIN."""
    longest = MIN_WINDOW
    for kind in kinds:
        param = WINDOW_PARAMS.get(PolicyKind(kind))
        for name in catalog.policies_of(kind) if param else ():
            for template in (None, *TEMPLATES):
                value = catalog.rule(name, template=template).params.get(param)
                if isinstance(value, int | float):
                    longest = max(longest, dt.timedelta(minutes=float(value)))
    return longest + LOOKBACK_MARGIN


# -- loading ----------------------------------------------------------------------------------
def _configured() -> tuple[Path | None, Path | None]:
    cfg = section("governance", GovernanceConfig)
    if cfg is None:
        return None, None
    return config_relative(cfg.policies), config_relative(cfg.exemptions)


def load_catalog(path: Path | None = None, exemptions: Path | None = None) -> PolicyCatalog:
    """The catalog at `path` (default: gpupool.yml's governance.policies, else
    models/policies/policies.yml) with the exemptions at `exemptions` (default: governance.exemptions,
    else exemptions.yml beside the catalog when it exists)."""
    configured_policies, configured_exemptions = _configured() if path is None or exemptions is None else (None, None)
    path = Path(path or configured_policies or DEFAULT_POLICIES)
    doc = _read_yaml(path)
    if exemptions is None:
        exemptions = configured_exemptions
        if exemptions is None and (path.parent / EXEMPTIONS_NAME).exists():
            exemptions = path.parent / EXEMPTIONS_NAME
    return PolicyCatalog(
        version=_text(doc, "version", path, "version"),
        rate_limits=_rate_limits(doc.get("rate_limits"), path),
        exemptions=load_exemptions(Path(exemptions)) if exemptions is not None else (),
        policies=_policies(doc.get("policies"), path),
    )


def _read_yaml(path: Path) -> dict:
    if not path.exists():
        raise CatalogError(f"{path}: file not found; create it (see models/policies/README.md) or fix the path "
                           "in gpupool.yml governance")
    try:
        doc = load_yaml(path.read_text())
    except yaml.YAMLError as err:
        raise CatalogError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(doc, dict):
        raise CatalogError(f"{path}: expected a mapping at the top level")
    return doc


def _fail(path: Path, key: str, problem: str) -> CatalogError:
    return CatalogError(f"{path}: {key}: {problem}")


def _text(doc: Mapping, name: str, path: Path, key: str) -> str:
    value = doc.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, key, f"missing or empty; write a non-empty text, e.g. {name}: \"1\"")
    return value


def _rate_limits(raw: Any, path: Path) -> RateLimits:
    if raw is None:
        return RateLimits()
    if not isinstance(raw, dict):
        raise _fail(path, "rate_limits", "expected a mapping")
    known = {f.name for f in dataclasses.fields(RateLimits)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise _fail(path, f"rate_limits.{unknown[0]}", f"unknown key; known: {sorted(known)}")
    for key, value in raw.items():
        if problem := _count(value):
            raise _fail(path, f"rate_limits.{key}", f"{value!r}: {problem}")
    return RateLimits(**raw)


def _policies(raw: Any, path: Path) -> dict[str, Policy]:
    if not isinstance(raw, dict) or not raw:
        raise _fail(path, "policies", "expected a mapping of policy name -> policy")
    return {str(name): _policy(str(name), body, path) for name, body in raw.items()}


def _policy(name: str, body: Any, path: Path) -> Policy:
    at = f"policies.{name}"
    if not isinstance(body, dict):
        raise _fail(path, at, "expected a mapping")
    known = {"version", "kind", "mode", "description", "params", "steps", "overrides"}
    if unknown := sorted(set(body) - known):
        raise _fail(path, f"{at}.{unknown[0]}", f"unknown key; known: {sorted(known)}")
    try:
        kind = PolicyKind(body.get("kind"))
    except ValueError:
        raise _fail(path, f"{at}.kind", f"{body.get('kind')!r} is not a policy kind; use one of "
                                        f"{[k.value for k in PolicyKind]}") from None
    try:
        mode = Mode(body.get("mode", Mode.SHADOW))
    except ValueError:
        raise _fail(path, f"{at}.mode", f"{body.get('mode')!r}; use shadow or enforce") from None
    description = body.get("description") or {}
    if not isinstance(description, dict) or not all(isinstance(description.get(k), str) for k in ("en", "zh")):
        raise _fail(path, f"{at}.description", "expected {en: ..., zh: ...} texts")
    params = _params(body.get("params"), kind, f"{at}.params", path, complete=True)
    steps = _health_steps(kind, _steps(body.get("steps"), f"{at}.steps", path), f"{at}.steps", path)
    overrides = tuple(_override(o, kind, f"{at}.overrides[{i}]", path)
                      for i, o in enumerate(body.get("overrides") or []))
    seen = [o.scope for o in overrides]
    if dupes := sorted({s for s in seen if seen.count(s) > 1}):
        raise _fail(path, f"{at}.overrides", f"{dupes[0]} appears twice; merge the entries")
    if kind in ADVICE_ONLY:
        scoped = [("steps", steps), *((f"overrides[{i}].steps", o.steps) for i, o in enumerate(overrides))]
        for where, scope_steps in scoped:
            if scope_steps is not None and any(st.action != StepAction.RECOMMEND for st in scope_steps):
                raise _fail(path, f"{at}.{where}", f"a {kind.value} policy only recommends (its GPUs wait on the "
                                                   "host: taking them recovers nothing); use [{action: recommend}]")
    return Policy(name=name, version=_text(body, "version", path, f"{at}.version"), kind=kind, mode=mode,
                  description={"en": description["en"].strip(), "zh": description["zh"].strip()},
                  params={"enabled": True, **params}, steps=steps, overrides=overrides)


def _params(raw: Any, kind: PolicyKind, at: str, path: Path, *, complete: bool) -> dict[str, Any]:
    """Checked parameters. complete=True (a policy's defaults): every parameter of the kind must be
    there; overrides may set any subset."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _fail(path, at, "expected a mapping of parameter -> value")
    checks = {**COMMON_PARAMS, **PARAMS[kind]}
    if unknown := sorted(set(raw) - set(checks)):
        raise _fail(path, f"{at}.{unknown[0]}", f"not a parameter of {kind.value}; known: {sorted(checks)}")
    if complete and (missing := sorted(set(PARAMS[kind]) - set(raw))):
        raise _fail(path, f"{at}.{missing[0]}", f"missing; every {kind.value} policy sets {sorted(PARAMS[kind])}")
    for key, value in raw.items():
        if problem := checks[key](value):
            raise _fail(path, f"{at}.{key}", f"{value!r}: {problem}")
    return dict(raw)


def _steps(raw: Any, at: str, path: Path) -> tuple[Step, ...]:
    if not isinstance(raw, list) or not raw:
        raise _fail(path, at, "expected a non-empty list of {action, after_s}")
    steps = []
    for i, s in enumerate(raw):
        where = f"{at}[{i}]"
        if not isinstance(s, dict) or set(s) - {"action", "after_s"}:
            raise _fail(path, where, "expected {action: <remind|reclaim|preempt|cap_runtime|recommend>, after_s: <seconds>}")
        try:
            action = StepAction(s.get("action"))
        except ValueError:
            raise _fail(path, f"{where}.action", f"{s.get('action')!r} is not a step; use one of "
                                                 f"{[a.value for a in StepAction]}") from None
        after_s = s.get("after_s", 0)
        if problem := _count(after_s):
            raise _fail(path, f"{where}.after_s", f"{after_s!r}: {problem} (seconds)")
        steps.append(Step(action=action, after_s=after_s))
    return tuple(steps)


_NODE_STEPS = frozenset({StepAction.DRAIN, StepAction.UNDRAIN})


def _health_steps(kind: PolicyKind, steps: tuple[Step, ...], at: str, path: Path) -> tuple[Step, ...]:
    """Drain and undrain act on hardware, the other steps on work: a gpu_health policy drains, then
    may undrain (its wait is healthy_hours, so the undrain's after_s is 0); no other kind drains."""
    actions = [s.action for s in steps]
    if kind != PolicyKind.GPU_HEALTH:
        if _NODE_STEPS & set(actions):
            raise _fail(path, at, f"drain and undrain act on nodes; only a {PolicyKind.GPU_HEALTH.value} policy has them")
        return steps
    if actions not in ([StepAction.DRAIN], [StepAction.DRAIN, StepAction.UNDRAIN]):
        raise _fail(path, at, "a gpu_health policy's steps are [drain] or [drain, undrain]")
    if len(steps) == 2 and steps[1].after_s != 0:
        raise _fail(path, f"{at}[1].after_s", "the undrain waits params.healthy_hours without a fault; set after_s: 0")
    return steps


def _override(raw: Any, kind: PolicyKind, at: str, path: Path) -> Override:
    if not isinstance(raw, dict):
        raise _fail(path, at, "expected a mapping with queue or template, and params and/or steps")
    if unknown := sorted(set(raw) - {"queue", "template", "params", "steps"}):
        raise _fail(path, f"{at}.{unknown[0]}", "unknown key; an override has queue or template, params, steps")
    targets = [k for k in ("queue", "template") if raw.get(k)]
    if len(targets) != 1:
        raise _fail(path, at, "name exactly one of queue or template")
    steps = _health_steps(kind, _steps(raw["steps"], f"{at}.steps", path), f"{at}.steps", path) if "steps" in raw else None
    return Override(scope=f"{targets[0]}:{raw[targets[0]]}",
                    params=_params(raw.get("params"), kind, f"{at}.params", path, complete=False), steps=steps)


def load_exemptions(path: Path) -> tuple[Exemption, ...]:
    """The allow-list; an expired entry is kept (it matches nothing) so the file stays the record."""
    doc = _read_yaml(path)
    raw = doc.get("exemptions") or []
    if not isinstance(raw, list):
        raise _fail(path, "exemptions", "expected a list of entries")
    out = []
    for i, e in enumerate(raw):
        at = f"exemptions[{i}]"
        if not isinstance(e, dict):
            raise _fail(path, at, "expected a mapping")
        known = {"tenant", "policy", "queue", "job_id", "reason", "expires_at", "granted_by"}
        if unknown := sorted(set(e) - known):
            raise _fail(path, f"{at}.{unknown[0]}", f"unknown key; known: {sorted(known)}")
        for key in ("tenant", "reason", "granted_by"):
            if not isinstance(e.get(key), str) or not e[key].strip():
                raise _fail(path, f"{at}.{key}", "required: every exemption says whose it is, why, and who granted it")
        out.append(Exemption(
            tenant=e["tenant"], reason=e["reason"], expires_at=_expiry(e.get("expires_at"), path, f"{at}.expires_at"),
            policy=e.get("policy"), queue=e.get("queue"), job_id=e.get("job_id"), granted_by=e["granted_by"],
        ))
    return tuple(out)


def _expiry(value: Any, path: Path, at: str) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return utc_naive(value)
    if isinstance(value, dt.date):
        return dt.datetime.combine(value, dt.time())
    if isinstance(value, str):
        try:
            return parse_utc(value)
        except ValueError:
            pass
    raise _fail(path, at, f"{value!r}: required, an RFC 3339 time such as \"2026-12-31T00:00:00Z\"; "
                          "exemptions never last forever")
