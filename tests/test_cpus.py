"""The CPU reservation of a replay (replay/cpus.py): the plan, and confining this process."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from clawbed.replay import cpus


def test_the_highest_cpu_goes_to_the_emulator_and_the_rest_to_the_run() -> None:
    plan = cpus.plan_cpus({0, 1, 2, 3})
    assert plan is not None
    assert plan.emulator == (3,) and plan.others == (0, 1, 2)
    assert plan.emulator_affinity() == {"cell": [3], "tx": [3]}
    # Within an already-restricted set, e.g. `taskset -c 2,5`, when asked for.
    plan = cpus.plan_cpus({5, 2}, reserve=True)
    assert plan is not None and plan.emulator == (5,) and plan.others == (2,)


def test_automatic_only_with_enough_cpus_left_for_the_rest() -> None:
    assert cpus.plan_cpus({0, 1}) is None  # 2 vCPUs: the rest would be starved (module doc)
    assert cpus.plan_cpus({0, 1, 2}) is None
    assert cpus.plan_cpus(set(range(cpus.AUTO_MIN_CPUS))) is not None
    assert cpus.plan_cpus(set(range(8)), reserve=False) is None
    assert cpus.plan_cpus({0}, reserve=True) is None  # nothing to reserve
    assert cpus.plan_cpus(set(), reserve=True) is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to confine to one of them")
def test_every_thread_and_every_process_started_is_confined_then_put_back() -> None:
    before = os.sched_getaffinity(0)
    target = (min(before),)
    stop, ready = threading.Event(), threading.Event()
    seen: dict[str, set[int]] = {}

    def worker() -> None:
        ready.set()
        stop.wait(10)
        seen["worker"] = os.sched_getaffinity(0)

    t = threading.Thread(target=worker)
    t.start()
    ready.wait(5)
    tid = t.native_id
    assert tid is not None
    probe = [sys.executable, "-c", "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0))); "
             "print(subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'], "
             "capture_output=True, text=True).stdout.strip())"]
    try:
        with cpus.ProcessConfined(target):
            assert os.sched_getaffinity(0) == set(target)
            # A thread that was running before is moved too, not just the caller.
            assert os.sched_getaffinity(tid) == set(target)
            out = subprocess.run(probe, capture_output=True, text=True, check=True).stdout.split("\n")
            # A process started inside, and what it starts in turn (a browser's own), stay there.
            assert out[0] == out[1] == str(list(target))
        assert os.sched_getaffinity(0) == before
        assert os.sched_getaffinity(tid) == before
    finally:
        stop.set()
        t.join()
    assert seen["worker"] == before


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to confine to one of them")
def test_asking_for_a_reservation_on_one_cpu_is_refused_naming_the_flag() -> None:
    from clawbed.errors import InputError
    from clawbed.paths import REPO_ROOT
    from clawbed.replay.run import ReplayConfig

    config = ReplayConfig(trace=REPO_ROOT / "traces" / "samples" / "busy-cell.cbt", page="set-01", schemes=["cubic"],
                          runs=1, reserve_emulator_cpu=True)
    with cpus.ProcessConfined((min(os.sched_getaffinity(0)),)), \
            pytest.raises(InputError, match="--reserve-cpu: needs two CPUs"):
        config.check()
    config.check()  # back on every CPU: fine wherever two are allowed
