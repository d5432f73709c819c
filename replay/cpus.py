"""A CPU of its own for the emulator's clock, the run's other processes kept off it.

Why: on a kernel without forced preemption (``PREEMPT_NONE``, as on the development VM) a
real-time thread that becomes runnable still waits for whatever kernel work its CPU is doing
to reach a preemption point. A page load does plenty of such work (a browser's page faults
and unmaps, nginx's and the loader's socket copies), so with those free to run on the
clock's CPU the cell clock is late by 1–3 ms during about half of the busy-cell Chromium
loads on 2 vCPUs, and each such load is run again (docs/guide/replay.md, "Timing integrity per load").

What: the replay confines its own process (every thread) to the other CPUs before it starts
anything, so the namespaces' programs, nginx, the loader, the schemes' agents and the
emulator's helper threads inherit that set; the emulator's ``cb-cell`` and ``cb-tx`` threads
are pinned to the reserved CPU by its config (``affinity``). The process's affinity is put
back when the run ends.

What it costs, hence the default: everything but the clock then shares the remaining CPUs.
On 2 vCPUs (measured, docs/guide/replay.md) the late Chromium loads fell from 5 of 10 to 0 of 10, but the
CI suite's idle-cell CLAW PLT rose 7–8 % against its baseline in two sweeps (Cubic 1–2 %,
and 3 % with no reservation): the scheme that sends in bursts waits for a busier CPU. A bias
between schemes is worse than a late clock, which is at least flagged and re-run, so the
reservation is automatic only with :data:`AUTO_MIN_CPUS` or more (three left to the rest)
and otherwise asked for (``--reserve-cpu``).

A lighter placement for fewer CPUs (``--loader-off-cell-cpu``, :class:`LoaderSplit`): only the
cell thread is pinned, to the last CPU (the writer follows it there, the emulator's
``affinity.writer_with_cell``), and only the loader — the browser and everything it
starts — is kept off that CPU; nginx, the schemes' agents and clients and the emulator's other
threads run anywhere. A scheduler trace of a Chromium replay on 2 vCPUs (docs/timing.md) found
the browser's threads holding the cell thread's CPU in kernel mode in the slips it traced; the
browser is the one process of a run with that much kernel work (page faults, unmaps). What it
costs: the browser gets one CPU of two, so its PLT may rise; nice levels were not used, as a
lower weight does not make kernel work reach a preemption point sooner.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from types import TracebackType

#: Reserve a CPU without being asked from this many allowed CPUs on.
AUTO_MIN_CPUS = 4


@dataclass(frozen=True)
class CpuPlan:
    """Which CPUs the emulator's clock and writer get, and which the run's other processes."""

    emulator: tuple[int, ...]
    others: tuple[int, ...]

    def emulator_affinity(self) -> dict[str, list[int]]:
        """The emulator config's ``affinity`` keys: the subframe clock and the TUN writer."""
        return {"cell": list(self.emulator), "tx": list(self.emulator)}

    def describe(self) -> dict[str, list[int]]:
        return {"emulator_cpus": list(self.emulator), "other_cpus": list(self.others)}


def plan_cpus(allowed: set[int] | frozenset[int], reserve: bool | None = None) -> CpuPlan | None:
    """The highest allowed CPU for the emulator and the rest for the run, or None (no
    reservation): ``reserve`` True needs two CPUs, None (auto) :data:`AUTO_MIN_CPUS`, False never."""
    needed = {True: 2, None: AUTO_MIN_CPUS, False: None}[reserve]
    if needed is None or len(allowed) < needed:
        return None
    ordered = sorted(allowed)
    return CpuPlan(emulator=(ordered[-1],), others=tuple(ordered[:-1]))


@dataclass(frozen=True)
class LoaderSplit:
    """The cell thread on ``cell``, the loader (and the browsers it starts) on ``loader``."""

    cell: tuple[int, ...]
    loader: tuple[int, ...]

    def emulator_affinity(self) -> dict[str, list[int]]:
        """The emulator config's ``affinity`` keys: the subframe clock only."""
        return {"cell": list(self.cell)}

    def describe(self) -> dict[str, list[int]]:
        return {"cell_cpus": list(self.cell), "loader_cpus": list(self.loader)}


def plan_loader_split(allowed: set[int] | frozenset[int], wanted: bool) -> LoaderSplit | None:
    """The highest allowed CPU for the cell thread, the rest for the loader; None when not
    wanted or with fewer than two CPUs."""
    if not wanted or len(allowed) < 2:
        return None
    ordered = sorted(allowed)
    return LoaderSplit(cell=(ordered[-1],), loader=tuple(ordered[:-1]))


class ChildrenPlaced(contextlib.AbstractContextManager["ChildrenPlaced"]):
    """The calling thread on ``cpus`` while open, so the processes it starts meanwhile inherit
    that set (and their children theirs); the thread's own set put back on exit."""

    def __init__(self, cpus: tuple[int, ...] | None) -> None:
        self.cpus = set(cpus) if cpus else None
        self._saved: set[int] | None = None

    def __enter__(self) -> ChildrenPlaced:
        if self.cpus is not None:
            self._saved = os.sched_getaffinity(0)
            os.sched_setaffinity(0, self.cpus)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._saved is not None:
            os.sched_setaffinity(0, self._saved)
            self._saved = None


def allowed_cpus() -> set[int]:
    """The CPUs this thread may run on."""
    return os.sched_getaffinity(0)


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
