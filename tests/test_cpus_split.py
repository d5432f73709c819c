"""The lighter placement of replay/cpus.py: the cell thread on the last CPU, the loader (and
what it starts) kept off it; the calling thread's set lent to its children and put back."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from clawbed.replay import cpus


def test_the_cell_gets_the_last_cpu_and_the_loader_the_rest() -> None:
    split = cpus.plan_loader_split({0, 1}, wanted=True)
    assert split is not None and split.cell == (1,) and split.loader == (0,)
    assert split.emulator_affinity() == {"cell": [1]}  # the writer and the rest run anywhere
    assert split.describe() == {"cell_cpus": [1], "loader_cpus": [0]}
    assert cpus.plan_loader_split({0, 1}, wanted=False) is None
    assert cpus.plan_loader_split({3}, wanted=True) is None


def _allowed(pid: int) -> str:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to place a child on one")
def test_a_child_started_inside_inherits_the_set_and_the_thread_gets_its_own_back() -> None:
    before = os.sched_getaffinity(0)
    first = min(before)
    with cpus.ChildrenPlaced((first,)):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        assert _allowed(child.pid) == str(first)
        assert os.sched_getaffinity(0) == before
    finally:
        child.kill()
        child.wait()
    with cpus.ChildrenPlaced(None):  # nothing asked: nothing changed
        assert os.sched_getaffinity(0) == before
