"""The default pool and loading pools from YAML."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml

from allocator.model import ShareMode, Template
from allocator.pool import PoolError, default_pool, expand_hosts, load_pool, pool_capacity
from tests.allocator.conftest import small_pool_doc


def test_default_pool_has_256_gpus_six_tenants_and_quotas_within_capacity() -> None:
    pool = default_pool()
    gpus = [g for n in pool.nodes for g in n.gpus]
    assert len(gpus) == 256
    assert Counter(g.gpu_model for g in gpus) == {"H100": 96, "A100": 96, "L40S": 64}
    assert set(pool.tenants) == {"vision", "nlp", "speech", "recsys", "research", "platform"}
    assert pool.nodes[0].host == "h100-01" and pool.nodes[-1].host == "l40s-08"
    capacity = pool_capacity(pool)
    for model in ("H100", "A100", "L40S"):
        assert sum(q.quota.get(model, 0) for q in pool.queues) <= capacity[model]
    assert sum(q.quota.get("H100", 0) for q in pool.queues) > 0.9 * capacity["H100"]  # H100 is scarce
    modes = Counter((g.gpu_model, g.share_mode) for g in gpus)
    assert modes[("A100", ShareMode.MIG)] == 16 and modes[("L40S", ShareMode.TIMESLICE)] == 16
    assert pool.prices_per_gpu_hour == {"H100": 4.0, "A100": 2.5, "L40S": 1.2}


def test_default_pool_queues_cover_every_template() -> None:
    pool = default_pool()
    serve = pool.queue("platform-serve")
    assert serve.templates == (Template.INFERENCE,) and not serve.preemptible and serve.priority == 90
    backfill = pool.queue("backfill")
    assert backfill.low_priority and not any(backfill.quota.values()) and "*" in backfill.shared_with
    assert Template.INTERACTIVE in pool.queue("interactive").templates
    tenants_with_training = {q.tenant for q in pool.queues if Template.TRAINING in q.templates and not q.low_priority}
    assert tenants_with_training == {"vision", "nlp", "speech", "recsys", "research"}


def test_load_pool_reads_the_same_format(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(small_pool_doc(grace=30)))
    pool = load_pool(path)
    assert [n.host for n in pool.nodes] == ["h-01", "h-02", "h-03", "a-01", "a-02", "l-01"]
    assert pool.preemption_grace_s == 30
    assert len(pool.slots()) == 12 + 4 + 8 + 8


def test_expand_hosts() -> None:
    assert expand_hosts("h100-08..h100-10") == ["h100-08", "h100-09", "h100-10"]
    assert expand_hosts("node7") == ["node7"]
    with pytest.raises(ValueError, match="ends before"):
        expand_hosts("n-05..n-01")


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: d["nodes"][2].update(mig_layout=["5g.50gb"]), r"nodes\[2\]: MIG profile\(s\) \['5g.50gb'\] unknown"),
    (lambda d: d["nodes"][2].update(mig_layout=["4g.40gb", "4g.40gb"]), "uses 8 compute slices"),
    (lambda d: d["queues"][0]["quota"].update(H100=9), "quotas for H100 add up to 15 GPUs, the pool has 12"),
    (lambda d: d["queues"][0].update(tenant="marketing"), r"queues\[0\] \(vision-train\): tenant 'marketing'"),
    (lambda d: d["queues"][1]["quota"].update(L40S=1), "quota for L40S but gpu_models"),
    (lambda d: d["queues"][0]["quota"].update(H100=-1), "quota H100 is -1"),
    (lambda d: d["queues"].append(dict(d["queues"][0])), r"queue\(s\) \['vision-train'\] listed twice"),
    (lambda d: d["nodes"][0].update(gpu_model="B200"), "gpu_model 'B200'"),
    (lambda d: d["queues"][4].update(quota={"H100": 1}), "low-priority queue holds no quota"),
    (lambda d: d["nodes"][0].update(color="red"), r"unknown field\(s\) \['color'\]"),
])
def test_load_pool_names_the_entry_at_fault(tmp_path: Path, change, message: str) -> None:
    doc = small_pool_doc()
    change(doc)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PoolError, match=message) as error:
        load_pool(path)
    assert str(error.value).startswith("bad.yaml: ")
