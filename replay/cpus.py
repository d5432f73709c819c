"""A CPU of its own for the emulator's clock: the run's other processes kept off it.

Why: on a kernel without forced preemption (``PREEMPT_NONE``, as on the development VM) a
real-time thread that becomes runnable still waits for whatever kernel work the CPU is
doing to reach a preemption point. A browser's page load does plenty of such work (page
faults and unmaps of a large address space, socket copies), so with the browser on the same
CPU the cell clock was late by 1–3 ms during half of the Chromium loads, and each such load
was run again (README, "Timing integrity per load"). With the cell and writer threads on a CPU
that nothing else of the run uses, the same loads kept within 0.6 ms.

How: the replay confines its own process (every thread) to the other CPUs before it starts
anything, so the namespaces' programs, nginx, the loader, the schemes' agents and the
emulator's helper threads inherit that set; the emulator's ``cb-cell`` and ``cb-tx`` threads
are pinned to the reserved CPU by its config (``affinity``). The process's affinity is put
back when the run ends. With fewer than two CPUs allowed there is nothing to reserve.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from types import TracebackType


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the emulator's clock and writer get, and which everything else."""

    emulator: tuple[int, ...]
    others: tuple[int, ...]

    def emulator_affinity(self) -> dict[str, list[int]]:
        """The emulator config's ``affinity`` keys: the subframe clock and the TUN writer."""
        return {"cell": list(self.emulator), "tx": list(self.emulator)}

    def describe(self) -> dict[str, list[int]]:
        return {"emulator_cpus": list(self.emulator), "other_cpus": list(self.others)}


def plan_cpus(allowed: set[int] | frozenset[int]) -> CpuPlan | None:
    """The highest allowed CPU for the emulator, the rest for the run; None below two CPUs."""
    if len(allowed) < 2:
        return None
    ordered = sorted(allowed)
    return CpuPlan(emulator=(ordered[-1],), others=tuple(ordered[:-1]))


def _tasks() -> list[int]:
    """Thread ids of this process."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


class ProcessConfined(contextlib.AbstractContextManager["ProcessConfined"]):
    """Every thread of this process on ``cpus`` while open; each thread's own set put back
    on exit (threads started meanwhile inherit the confined set and keep it)."""

    def __init__(self, cpus: tuple[int, ...]) -> None:
        self.cpus = set(cpus)
        self._saved: dict[int, set[int]] = {}

    def __enter__(self) -> ProcessConfined:
        for tid in _tasks():
            # A thread that ended between the listing and the call is no longer ours to move.
            with contextlib.suppress(ProcessLookupError):
                self._saved[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, self.cpus)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for tid, cpus in self._saved.items():
            with contextlib.suppress(ProcessLookupError, OSError):
                os.sched_setaffinity(tid, cpus)
        self._saved.clear()


def allowed_cpus() -> set[int]:
    """The CPUs this thread may run on."""
    return os.sched_getaffinity(0)

