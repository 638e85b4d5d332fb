"""placement.place and plan_preemption: best fit, exact MIG profiles, time-slice packing, whole nodes."""
from __future__ import annotations

import random

from allocator.model import GpuSpec, ShareMode, Slot
from allocator.placement import Request, place, plan_preemption


def whole(host: str, *gpus: int, model: str = "H100") -> list[Slot]:
    return [GpuSpec(host, g, model).slots()[0] for g in gpus]


def mig(host: str, gpu: int, layout: tuple[str, ...], free: tuple[int, ...] | None = None) -> list[Slot]:
    slots = GpuSpec(host, gpu, "A100", ShareMode.MIG, layout).slots()
    return [s for s in slots if free is None or s.gpu_instance_id in free]


def shares(host: str, gpu: int, free: tuple[int, ...], replicas: int = 4) -> list[Slot]:
    slots = GpuSpec(host, gpu, "L40S", ShareMode.TIMESLICE, replicas=replicas).slots()
    return [s for s in slots if s.gpu_instance_id in free]


def ids(slots) -> list[str]:
    return sorted(s.slot_id for s in slots)


def test_whole_gpu_best_fit_takes_the_node_with_the_fewest_free_gpus_that_fits() -> None:
    free = whole("n1", 0, 1, 2, 3) + whole("n2", 5) + whole("n3", 2, 6)
    assert ids(place(Request("H100", ShareMode.WHOLE, 1), free, 4)) == ["n2/5"]
    assert ids(place(Request("H100", ShareMode.WHOLE, 2), free, 4)) == ["n3/2", "n3/6"]
    assert ids(place(Request("H100", ShareMode.WHOLE, 3), free, 4)) == ["n1/0", "n1/1", "n1/2"]
    # 3 + 1 + 2 GPUs are free but no node has 4 besides n1; 5 cannot be placed on one node or as whole nodes
    assert place(Request("H100", ShareMode.WHOLE, 5), free, 4) is None
    assert place(Request("A100", ShareMode.WHOLE, 1), free, 4) is None  # never another model


def test_filling_one_gpu_at_a_time_keeps_free_nodes_free() -> None:
    free = whole("n1", 0, 1, 2, 3) + whole("n2", 0, 1, 2, 3)
    used: list[str] = []
    for _ in range(4):
        slots = place(Request("H100", ShareMode.WHOLE, 1), free, 4)
        used += ids(slots)
        free = [s for s in free if s.slot_id not in used]
    assert used == ["n1/0", "n1/1", "n1/2", "n1/3"]
    assert ids(place(Request("H100", ShareMode.WHOLE, 4), free, 4)) == ["n2/0", "n2/1", "n2/2", "n2/3"]


def test_requests_above_a_node_take_whole_free_nodes() -> None:
    free = whole("n1", 0, 1, 2, 3) + whole("n2", 0, 1, 2) + whole("n3", 0, 1, 2, 3) + whole("n4", 0, 1, 2, 3)
    slots = place(Request("H100", ShareMode.WHOLE, 8), free, 4)
    assert sorted({s.host for s in slots}) == ["n1", "n3"] and len(slots) == 8
    assert place(Request("H100", ShareMode.WHOLE, 6), free, 4) is None  # not whole nodes
    assert place(Request("H100", ShareMode.WHOLE, 16), free, 4) is None  # only three free nodes


def test_mig_takes_exactly_the_profile_on_the_gpu_with_the_fewest_free_instances() -> None:
    layout = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    free = mig("m1", 0, layout) + mig("m1", 1, layout, free=(2, 4)) + mig("m2", 0, layout, free=(1, 4))
    one_g = place(Request("A100", ShareMode.MIG, 1, "1g.10gb"), free, 8)
    # m1/1 and m2/0 have two free instances each; m1/1 wins on name
    assert ids(one_g) == ["m1/1/4"]
    two_g = place(Request("A100", ShareMode.MIG, 1, "2g.20gb"), free, 8)
    assert ids(two_g) == ["m1/1/2"]
    # a 4g.40gb instance exists nowhere: the larger free 3g is not a substitute
    assert place(Request("A100", ShareMode.MIG, 1, "4g.40gb"), free, 8) is None
    assert place(Request("A100", ShareMode.MIG, 3, "3g.40gb"), free, 8) is None


def test_time_slices_pack_a_gpu_before_opening_another() -> None:
    free = shares("t1", 0, (0, 1, 2, 3)) + shares("t1", 1, (3,)) + shares("t2", 0, (1, 2))
    assert ids(place(Request("L40S", ShareMode.TIMESLICE, 1), free, 8)) == ["t1/1/3"]
    two = place(Request("L40S", ShareMode.TIMESLICE, 2), free, 8)
    assert ids(two) == ["t2/0/1", "t2/0/2"]  # the node with the fewest free replicas that fits
    free = shares("t1", 0, (0, 1, 2, 3)) + shares("t1", 1, (0, 1, 2, 3))
    taken: list[str] = []
    for _ in range(5):
        slot = place(Request("L40S", ShareMode.TIMESLICE, 1), free, 8)
        taken += ids(slot)
        free = [s for s in free if s.slot_id not in taken]
    assert taken == ["t1/0/0", "t1/0/1", "t1/0/2", "t1/0/3", "t1/1/0"]


def test_placement_does_not_depend_on_the_order_of_free_slots() -> None:
    free = whole("n1", 0, 1, 2) + whole("n2", 0, 1, 2) + whole("n3", 3)
    expected = ids(place(Request("H100", ShareMode.WHOLE, 3), free, 4))
    rng = random.Random(3)
    for _ in range(10):
        rng.shuffle(free)
        assert ids(place(Request("H100", ShareMode.WHOLE, 3), free, 4)) == expected == ["n1/0", "n1/1", "n1/2"]


def test_preemption_plan_prefers_the_most_preemptible_victims_then_the_fewest() -> None:
    free = whole("n1", 0, 1) + whole("n2", 0)
    victims = [
        ("backfill-1", whole("n2", 1)),       # rank 0
        ("borrowed-1", whole("n1", 2, 3)),    # rank 1
        ("backfill-2", whole("n2", 2)),       # rank 2
        ("in-quota-1", whole("n2", 3)),       # rank 3
    ]
    slots, names = plan_preemption(Request("H100", ShareMode.WHOLE, 4), free, victims, 4)
    # n1 needs only rank 1; n2 would need ranks 0, 2 and 3
    assert names == ("borrowed-1",) and {s.host for s in slots} == {"n1"}
    slots, names = plan_preemption(Request("H100", ShareMode.WHOLE, 2), free, victims, 4)
    assert names == ("backfill-1",) and ids(slots) == ["n2/0", "n2/1"]
    assert plan_preemption(Request("H100", ShareMode.WHOLE, 4), [], victims[2:], 4) is None


def test_preemption_plan_for_whole_nodes_and_mig_profiles() -> None:
    free = whole("n1", 0, 1, 2, 3)
    victims = [("v-a", whole("n2", 0, 1, 2, 3)), ("v-b", whole("n3", 0, 1)), ("v-c", whole("n3", 2, 3))]
    slots, names = plan_preemption(Request("H100", ShareMode.WHOLE, 8), free, victims, 4)
    assert names == ("v-a",) and {s.host for s in slots} == {"n1", "n2"}
    layout = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    all_mig = mig("m1", 0, layout)
    victims = [("v-3g", [all_mig[0]]), ("v-1g", [all_mig[2]])]
    slots, names = plan_preemption(Request("A100", ShareMode.MIG, 1, "1g.10gb"), [], victims, 8)
    assert names == ("v-1g",) and ids(slots) == ["m1/0/3"]
