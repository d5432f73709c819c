"""The CPU reservation of a replay (replay/cpus.py): the plan, and confining this process."""

from __future__ import annotations

import os
import threading

import pytest

from clawbed.replay import cpus


def test_the_highest_cpu_goes_to_the_emulator_and_the_rest_to_the_run() -> None:
    plan = cpus.plan_cpus({0, 1, 2, 3})
    assert plan is not None
    assert plan.emulator == (3,) and plan.others == (0, 1, 2)
    assert plan.emulator_affinity() == {"cell": [3], "tx": [3]}
    # Within an already-restricted set, e.g. `taskset -c 2,5`.
    plan = cpus.plan_cpus({5, 2})
    assert plan is not None and plan.emulator == (5,) and plan.others == (2,)


def test_nothing_is_reserved_with_one_cpu() -> None:
    assert cpus.plan_cpus({0}) is None
    assert cpus.plan_cpus(set()) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to confine to one of them")
def test_every_thread_is_confined_and_put_back() -> None:
    before = os.sched_getaffinity(0)
    target = {min(before)}
    seen: dict[str, set[int]] = {}
    stop = threading.Event()
    ready = threading.Event()

    def worker() -> None:
        ready.set()
        stop.wait(10)
        seen["worker"] = os.sched_getaffinity(0)

    t = threading.Thread(target=worker)
    t.start()
    ready.wait(5)
    tid = t.native_id
    assert tid is not None
    try:
        with cpus.ProcessConfined(tuple(target)):
            assert os.sched_getaffinity(0) == target
            # A thread that was running before is moved too, not just the caller.
            assert os.sched_getaffinity(tid) == target
            started_inside: dict[str, set[int]] = {}
            inner = threading.Thread(target=lambda: started_inside.update(cpus=os.sched_getaffinity(0)))
            inner.start()
            inner.join()
            assert started_inside["cpus"] == target
        assert os.sched_getaffinity(0) == before
        assert os.sched_getaffinity(tid) == before
    finally:
        stop.set()
        t.join()
    assert seen["worker"] == before
