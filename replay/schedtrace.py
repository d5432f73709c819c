"""Who ran instead of the cell thread: a scheduler trace of each load, and each late
subframe's lateness attributed to its causes (``clawbed replay --trace-sched``; docs/timing.md).

The mechanism it measures: the emulator's cell thread (``cb-cell``, SCHED_FIFO) sleeps to each
subframe boundary. On a kernel without forced preemption (``PREEMPT_NONE``) the thread, once
woken, still waits for whatever its CPU runs in kernel mode to reach a preemption point; a
timer that fires late (interrupts off, the virtual CPU not running) wakes it late; and its own
work for a subframe may outlast the millisecond. Which of these happened, and whose kernel
work it was, is in the scheduler's own tracepoints.

How: the run gets a tracefs instance of its own, ``/sys/kernel/tracing/instances/cb<run id>``
(tracefs is mounted there first if it is not; both are in the run's ledger and undone on exit,
error and Ctrl-C, and by ``clawbed cleanup``), with ``trace_clock`` ``mono`` (the emulator's
clock) and these events: ``sched_switch`` and the ``irq``/``softirq`` entries and exits on every
CPU, x86's interrupt vectors where the kernel has them (``local_timer`` …), and of the cell
thread only ``sched_wakeup``/``sched_wakeup_new``, its system calls and page faults. It records during each
load's loader span only and is read after the load (nothing parses while the page loads).

Attribution (:func:`attribute`): a slip of the cell clock (``replay.lateness.Slip``: the
subframe at boundary B ran L late) is the interval [B, B + L]. It is cut where the cell
thread's state changed, and each piece goes to a cause:

* the thread **running**: its own work (the previous subframe's tick outlasted the
  millisecond), less the interrupt and softirq time on its CPU meanwhile, split by the system
  calls it was in (its own ``raw_syscalls`` events; page faults counted);
* **runnable** (woken, not yet on a CPU): whatever ran on the CPU it then ran on — a task by
  comm and PID, grouped (:data:`GROUPS`: chromium, nginx, the CLAW client, ksoftirqd, kworker,
  the emulator's other threads, python…) — or the interrupt and softirq time on that CPU;
* **asleep** past its boundary (the wake-up itself was late: interrupts off, or the virtual
  CPU not running): ``wake-up late``, less interrupt and softirq time traced meanwhile.

Output: ``sched.json`` per load (each slip with its pieces), ``sched-causes.json`` per run
(causes by share of late time, per load and in all), and an 80-column table.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import time
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from clawbed.errors import ClawbedError
from clawbed.netns import TRACEFS_MAGIC, Resources
from clawbed.replay.lateness import Slip

#: Where tracefs is (or is mounted by a run).
TRACEFS = Path("/sys/kernel/tracing")
#: Events recorded on every CPU; the cell thread's wake-ups are filtered to it.
EVENTS_ALL = ("sched/sched_switch", "irq/irq_handler_entry", "irq/irq_handler_exit", "irq/softirq_entry",
              "irq/softirq_exit")
EVENTS_CELL = ("sched/sched_wakeup", "sched/sched_wakeup_new")
#: x86's own interrupt vectors (the local timer that wakes the cell thread, the scheduler's and
#: other CPUs' calls), recorded where the kernel has them.
VECTORS = ("local_timer", "reschedule", "call_function", "call_function_single", "irq_work")
EVENTS_OPTIONAL = tuple(f"irq_vectors/{v}_{end}" for v in VECTORS for end in ("entry", "exit"))
#: The cell thread's own system calls and page faults (filtered to it): what its own work was
#: doing in the kernel.
EVENTS_CELL_KERNEL = ("raw_syscalls/sys_enter", "raw_syscalls/sys_exit", "exceptions/page_fault_user",
                      "exceptions/page_fault_kernel")
#: x86-64 system call numbers the cell thread may make, by name (others show as ``NR n``).
SYSCALL_NAMES = {0: "read", 1: "write", 7: "poll", 9: "mmap", 10: "mprotect", 11: "munmap", 12: "brk",
                 13: "rt_sigaction", 14: "rt_sigprocmask", 15: "rt_sigreturn", 24: "sched_yield", 25: "mremap",
                 28: "madvise", 39: "getpid", 82: "rename", 87: "unlink", 186: "gettid", 202: "futex",
                 228: "clock_gettime", 230: "clock_nanosleep", 232: "epoll_wait", 257: "openat", 3: "close",
                 219: "restart_syscall", 262: "newfstatat", 281: "epoll_pwait", 290: "eventfd2"}
#: Ring buffer per CPU, KiB: about 20 s of a Chromium load's switches and interrupts on 2 CPUs;
#: a load that fills it says so (``events_lost``) and is attributed as far as it was traced.
BUFFER_KB = 32768
#: The cell thread's name (``emulator/dataplane/src/main.rs``).
CELL_COMM = "cb-cell"
#: Causes whose time is not a task's.
OWN_WORK = "cb-cell own work"
WAKEUP_LATE = "wake-up late"
STOPPED = "stopped (SIGSTOP)"
NOT_TRACED = "not traced"

#: Task groups by comm (first match wins); a task in none is ``other:<comm>``.
GROUPS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("cb-cell", r"^cb-cell$"),
    ("cb-tx", r"^cb-tx$"),
    ("cb-diag", r"^cb-diag$"),
    ("cb-record", r"^cb-record$"),
    ("cb-io", r"^cb-io$"),
    ("emulator (main)", r"^clawbed-emu"),
    ("CLAW client", r"^clawbed-claw"),
    ("chromium", r"^(chromium|chrome|Chrome_|Cr[A-Z]|ThreadPool|Compositor|VizCompositor|headless|"
                 r"HangWatcher|MemoryInfra|DedicatedWorker|Media|AudioThread|PerfettoTrace|sandbox_ipc|"
                 r"inotify_reader|CacheThread|NetworkService|gpu-process|renderer)"),
    ("playwright (node)", r"^node$"),
    ("nginx", r"^nginx$"),
    ("ksoftirqd", r"^ksoftirqd/"),
    ("kworker", r"^kworker/"),
    ("rcu", r"^rcu"),
    ("idle", r"^swapper/"),
    ("python (replay, loader, agents)", r"^(python|clawbed|pytest)"),
    ("iperf3", r"^iperf3$"),
    ("kernel threads", r"^(migration|cpuhp|watchdog|kcompactd|khugepaged|kswapd|jbd2|oom_reaper|kthreadd)"),
))


class SchedTraceError(ClawbedError):
    """tracefs could not be mounted, made or read; the message says which file and why."""


def group_of(comm: str) -> str:
    """The cause a task of this comm counts under."""
    for name, pattern in GROUPS:
        if pattern.match(comm):
            return name
    return f"other:{comm}"


# -- events ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Event:
    """One traced event: when (monotonic s), on which CPU, what, and its fields."""

    ts: float
    cpu: int
    #: ``switch``, ``wakeup``, ``irq_entry``, ``irq_exit``, ``softirq_entry``, ``softirq_exit``.
    kind: str
    #: switch: the task leaving and its state, the task coming; wakeup: the task woken; the
    #: cell thread's ``sys_enter``/``sys_exit`` (label: the call's name) and ``fault``.
    prev_comm: str = ""
    prev_pid: int = 0
    prev_state: str = ""
    next_comm: str = ""
    next_pid: int = 0
    #: irq: its number's name (``irq 11 virtio0``); softirq: its vector's (``NET_RX``).
    label: str = ""


_LINE = re.compile(r"^\s*(?P<task>.*)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S+\s+)?"
                   r"(?P<ts>\d+\.\d+):\s+(?P<event>\w+):\s?(?P<payload>.*)$")
_SWITCH = re.compile(r"prev_comm=(?P<pc>.*) prev_pid=(?P<pp>-?\d+) prev_prio=-?\d+ prev_state=(?P<ps>\S+) ==> "
                     r"next_comm=(?P<nc>.*) next_pid=(?P<np>-?\d+) next_prio=-?\d+")
_WAKEUP = re.compile(r"comm=(?P<c>.*) pid=(?P<p>-?\d+) prio=-?\d+ (?:success=\d+ )?target_cpu=(?P<t>\d+)")
_IRQ = re.compile(r"irq=(?P<n>\d+)(?: name=(?P<name>\S+))?")
_SOFTIRQ = re.compile(r"vec=(?P<v>\d+)(?: \[action=(?P<a>\w+)\])?")


def parse_trace(lines: Iterable[str], where: str = "trace") -> Iterator[Event]:
    """Events of a tracefs ``trace`` file's text (``trace_clock`` mono: seconds); comment lines
    and events of other kinds are skipped. A line of a known event whose fields do not parse
    is an error naming ``where`` and the line number (the kernel's format changed)."""
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if m is None:
            # "CPU:1 [LOST 123 EVENTS]" and the like: the buffer's own notes.
            continue
        event, payload, ts, cpu = m["event"], m["payload"], float(m["ts"]), int(m["cpu"])
        if event == "sched_switch":
            s = _SWITCH.match(payload)
            if s is None:
                raise SchedTraceError(f"{where}:{number}: a sched_switch whose fields do not read: {payload!r}")
            yield Event(ts, cpu, "switch", prev_comm=s["pc"], prev_pid=int(s["pp"]), prev_state=s["ps"],
                        next_comm=s["nc"], next_pid=int(s["np"]))
        elif event in ("sched_wakeup", "sched_wakeup_new"):
            w = _WAKEUP.match(payload)
            if w is None:
                raise SchedTraceError(f"{where}:{number}: a {event} whose fields do not read: {payload!r}")
            yield Event(ts, int(w["t"]), "wakeup", next_comm=w["c"], next_pid=int(w["p"]))
        elif event in ("irq_handler_entry", "irq_handler_exit"):
            i = _IRQ.match(payload)
            if i is None:
                raise SchedTraceError(f"{where}:{number}: an {event} whose fields do not read: {payload!r}")
            label = f"irq {i['n']}" + (f" {i['name']}" if i["name"] else "")
            yield Event(ts, cpu, "irq_entry" if event.endswith("entry") else "irq_exit", label=label)
        elif event in ("sys_enter", "sys_exit"):
            nr = payload.split()[1] if payload.startswith("NR ") and len(payload.split()) > 1 else ""
            if not nr.lstrip("-").isdigit():
                raise SchedTraceError(f"{where}:{number}: a {event} whose fields do not read: {payload!r}")
            yield Event(ts, cpu, event, label=SYSCALL_NAMES.get(int(nr), f"NR {nr}"))
        elif event in ("page_fault_user", "page_fault_kernel"):
            yield Event(ts, cpu, "fault", label=event)
        elif event.rsplit("_", 1)[0] in VECTORS and event.endswith(("_entry", "_exit")):
            vector, _, end = event.rpartition("_")
            yield Event(ts, cpu, f"irq_{end}", label=vector)
        elif event in ("softirq_entry", "softirq_exit"):
            v = _SOFTIRQ.match(payload)
            if v is None:
                raise SchedTraceError(f"{where}:{number}: a {event} whose fields do not read: {payload!r}")
            yield Event(ts, cpu, "softirq_entry" if event.endswith("entry") else "softirq_exit",
                        label=v["a"] or f"vec {v['v']}")


# -- attribution -----------------------------------------------------------------------------


@dataclass
class Piece:
    """Part of a slip: ``ms`` of it went to ``cause`` (a group, an ``irq``/``softirq`` or one of
    :data:`OWN_WORK`, :data:`WAKEUP_LATE`, :data:`NOT_TRACED`); the task by comm and PID."""

    cause: str
    ms: float
    comm: str = ""
    pid: int | None = None


@dataclass
class SlipCauses:
    """One slip and where its time went."""

    t_ms: float
    late_ms: float
    subframes: int
    busy: bool
    #: The cell thread at the slip's boundary: running, runnable, asleep, stopped or unknown.
    state: str
    cpu: int | None
    pieces: list[Piece] = field(default_factory=list)
    #: When the trace saw the thread start to run after its boundary, less when the truth says
    #: it ran, ms: how well the trace lines up with the emulator's clock (None: it was running).
    switch_in_error_ms: float | None = None
    #: Page faults the cell thread took during the slip.
    page_faults: int = 0

    def main_cause(self) -> str:
        by = by_cause(self.pieces)
        return max(by, key=lambda k: by[k]) if by else NOT_TRACED


def by_cause(pieces: Iterable[Piece]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in pieces:
        out[p.cause] = out.get(p.cause, 0.0) + p.ms
    return out


class Timeline:
    """The trace as the attribution reads it: per CPU, who ran from when, and when interrupts
    and softirqs ran (innermost first); the cell thread's own switches and wake-ups."""

    def __init__(self, events: Iterable[Event], cell_tid: int, peers: dict[int, str] | None = None) -> None:
        self.cell_tid = cell_tid
        #: The emulator's other threads (tid → comm): the cell thread takes packets and spare
        #: buffers from them through lock-free queues, and a pop waits (spinning) for a push
        #: that one of them has begun and not finished, e.g. because it was preempted.
        self.peers = dict(peers or {})
        #: Each peer's preemptions: (switched out while runnable, switched in again, tid).
        self.preempted: list[tuple[float, float, int]] = []
        out_at: dict[int, float] = {}
        #: cpu → (times, (comm, pid)) of each switch's incoming task; before the first, its outgoing one.
        self._running: dict[int, tuple[list[float], list[tuple[str, int]]]] = {}
        self._first_prev: dict[int, tuple[str, int]] = {}
        #: cpu → sorted non-overlapping (start, end, label) of interrupt and softirq time.
        self.kernel_pieces: dict[int, list[tuple[float, float, str]]] = {}
        #: The cell thread's (ts, what, cpu, prev_state): what in {"in", "out", "wake"}.
        self.cell: list[tuple[float, str, int, str]] = []
        #: The cell thread's system calls (start, end, name) and page faults (times).
        self.syscalls: list[tuple[float, float, str]] = []
        self.faults: list[float] = []
        entered: tuple[float, str] | None = None
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        stacks: dict[int, list[tuple[str, float]]] = {}
        for e in events:
            self.first_ts = e.ts if self.first_ts is None else self.first_ts
            self.last_ts = e.ts
            if e.kind == "switch":
                times, tasks = self._running.setdefault(e.cpu, ([], []))
                if not times:
                    self._first_prev[e.cpu] = (e.prev_comm, e.prev_pid)
                times.append(e.ts)
                tasks.append((e.next_comm, e.next_pid))
                if e.prev_pid in self.peers and e.prev_state.startswith("R"):
                    out_at[e.prev_pid] = e.ts
                if e.next_pid in out_at:
                    self.preempted.append((out_at.pop(e.next_pid), e.ts, e.next_pid))
                if e.prev_pid == cell_tid:
                    self.cell.append((e.ts, "out", e.cpu, e.prev_state))
                if e.next_pid == cell_tid:
                    self.cell.append((e.ts, "in", e.cpu, ""))
            elif e.kind == "wakeup":
                if e.next_pid == cell_tid:
                    self.cell.append((e.ts, "wake", e.cpu, ""))
            elif e.kind == "sys_enter":
                entered = (e.ts, e.label)
            elif e.kind == "sys_exit":
                if entered is not None:
                    self.syscalls.append((entered[0], e.ts, entered[1]))
                entered = None
            elif e.kind == "fault":
                self.faults.append(e.ts)
            else:
                self._kernel_event(e, stacks)
        self._cell_times = [c[0] for c in self.cell]
        self._syscall_starts = [c[0] for c in self.syscalls]
        self._kernel_starts = {cpu: [p[0] for p in pieces] for cpu, pieces in self.kernel_pieces.items()}

    def _kernel_event(self, e: Event, stacks: dict[int, list[tuple[str, float]]]) -> None:
        """Interrupt and softirq entries and exits as flat pieces: a nested one (an interrupt
        during a softirq) cuts its outer one, so each instant has one label."""
        stack = stacks.setdefault(e.cpu, [])
        pieces = self.kernel_pieces.setdefault(e.cpu, [])
        kind = "irq" if e.kind.startswith("irq") else "softirq"
        label = f"{kind}:{e.label if kind == 'softirq' else e.label.split(' ', 2)[-1]}"
        if e.kind.endswith("entry"):
            if stack:  # the outer one's piece so far
                outer, since = stack[-1]
                if e.ts > since:
                    pieces.append((since, e.ts, outer))
            stack.append((label, e.ts))
        elif stack:
            inner, since = stack.pop()
            if e.ts > since:
                pieces.append((since, e.ts, inner))
            if stack:  # the outer one resumes
                stack[-1] = (stack[-1][0], e.ts)
        # An exit without its entry (the trace began inside the handler) counts for nothing.

    def running(self, cpu: int, t: float) -> tuple[str, int] | None:
        """The task on ``cpu`` at ``t`` (None: no switch on it was traced)."""
        found = self._running.get(cpu)
        if not found:
            return None
        times, tasks = found
        i = bisect_right(times, t) - 1
        return tasks[i] if i >= 0 else self._first_prev[cpu]

    def switches_on(self, cpu: int, a: float, b: float) -> list[float]:
        """Times of the switches on ``cpu`` within (a, b)."""
        times, _ = self._running.get(cpu, ([], []))
        return times[bisect_right(times, a):bisect_right(times, b)]

    def kernel_within(self, cpu: int, a: float, b: float) -> list[tuple[float, float, str]]:
        """The interrupt and softirq pieces on ``cpu`` clipped to [a, b]."""
        pieces = self.kernel_pieces.get(cpu, [])
        starts = self._kernel_starts.get(cpu, [])
        out = []
        for s, e, label in pieces[max(0, bisect_right(starts, a) - 1):bisect_right(starts, b)]:
            s, e = max(s, a), min(e, b)
            if e > s:
                out.append((s, e, label))
        return out

    def cell_state(self, t: float) -> tuple[str, int | None]:
        """The cell thread at ``t``: (running | runnable | asleep | unknown, its CPU or None)."""
        i = bisect_right(self._cell_times, t) - 1
        if i < 0:
            return "unknown", None
        _, what, cpu, prev_state = self.cell[i]
        if what == "in":
            return "running", cpu
        if what == "wake":
            return "runnable", cpu
        return _after_out(prev_state), cpu

    def syscalls_within(self, a: float, b: float) -> list[tuple[float, float, str]]:
        """The cell thread's system calls clipped to [a, b]."""
        out = []
        start = max(0, bisect_right(self._syscall_starts, a) - 1)
        for s, e, name in self.syscalls[start:bisect_right(self._syscall_starts, b)]:
            s, e = max(s, a), min(e, b)
            if e > s:
                out.append((s, e, name))
        return out

    def preempted_peer(self, a: float, b: float) -> tuple[str, int] | None:
        """The peer thread preempted for the longest part of [a, b], when that is at least
        half of it: the likely one the cell thread was waiting for."""
        best: tuple[float, int] | None = None
        for s, e, tid in self.preempted:
            overlap = min(e, b) - max(s, a)
            if overlap > 0 and (best is None or overlap > best[0]):
                best = (overlap, tid)
        if best is None or best[0] < 0.5 * (b - a):
            return None
        return self.peers[best[1]], best[1]

    def faults_within(self, a: float, b: float) -> int:
        return bisect_right(self.faults, b) - bisect_right(self.faults, a)

    def cell_changes(self, a: float, b: float) -> list[tuple[float, str, int, str]]:
        return self.cell[bisect_right(self._cell_times, a):bisect_right(self._cell_times, b)]

    def next_cell_cpu(self, t: float) -> int | None:
        """The CPU the cell thread next ran on after ``t``."""
        for _ts, what, cpu, _ in self.cell[bisect_right(self._cell_times, t):]:
            if what == "in":
                return cpu
        return None


def _after_out(prev_state: str) -> str:
    """The thread's state after it was switched out in ``prev_state``: preempted (still
    runnable, ``R`` or ``R+``), stopped by a signal (``T``, ``t``) or asleep."""
    if prev_state.startswith("R"):
        return "runnable"
    return "stopped" if prev_state[:1] in ("T", "t") else "asleep"


def _split(timeline: Timeline, cpu: int, a: float, b: float, base: str | None) -> list[Piece]:
    """[a, b] on ``cpu``: the interrupt and softirq time within it, and the rest to ``base``
    (a cause) or, when ``base`` is None, to whichever task ran on the CPU meanwhile."""
    pieces: list[Piece] = []
    kernel = timeline.kernel_within(cpu, a, b)
    for s, e, label in kernel:
        pieces.append(Piece(label, (e - s) * 1000.0))
    # The rest, cut where the CPU switched tasks.
    cuts = [a, *timeline.switches_on(cpu, a, b), b]
    for s, e in zip(cuts, cuts[1:]):
        if e <= s:
            continue
        covered = sum(min(ke, e) - max(ks, s) for ks, ke, _ in kernel if min(ke, e) > max(ks, s))
        rest_ms = (e - s - covered) * 1000.0
        if rest_ms <= 0:
            continue
        task = timeline.running(cpu, (s + e) / 2)
        if base is not None:
            # With the task the CPU ran meanwhile: a late wake-up while it idled was the host's.
            pieces.append(Piece(base, rest_ms, *(task or ("", None))))
        elif task is None:
            pieces.append(Piece(NOT_TRACED, rest_ms))
        else:
            comm, pid = task
            # The thread itself, at the instant it was switched in.
            cause = OWN_WORK if pid == timeline.cell_tid else group_of(comm)
            pieces.append(Piece(cause, rest_ms, comm=comm, pid=pid))
    return pieces


def _own_work(timeline: Timeline, cpu: int, a: float, b: float) -> list[Piece]:
    """The cell thread's own time in [a, b]: inside each of its system calls (``cb-cell own
    work: futex``) and outside them (its user code, and page faults), less interrupt time;
    while another emulator thread sat preempted for most of it, ``cb-cell waiting on a
    preempted cb-io`` (a queue's pop spins while a push it sees begun is unfinished)."""
    peer = timeline.preempted_peer(a, b)
    if peer is not None and not timeline.syscalls_within(a, b):
        comm, pid = peer
        return [Piece(f"cb-cell waiting on a preempted {comm}", p.ms, comm, pid) if p.cause == OWN_WORK else p
                for p in _split(timeline, cpu, a, b, OWN_WORK)]
    pieces: list[Piece] = []
    at = a
    for s, e, name in timeline.syscalls_within(a, b):
        if s > at:
            pieces += _split(timeline, cpu, at, s, OWN_WORK)
        pieces += _split(timeline, cpu, s, e, f"{OWN_WORK}: {name}")
        at = e
    if b > at:
        pieces += _split(timeline, cpu, at, b, OWN_WORK)
    return pieces


def attribute(timeline: Timeline, slips: Iterable[Slip], origin_mono_s: float) -> list[SlipCauses]:
    """Each slip's time by cause (see the module's description). ``origin_mono_s``: the
    monotonic time of the emulator's time zero (subframe 0's boundary), s."""
    out = []
    for slip in slips:
        start_ms, ran_ms = slip.span_ms()
        a, b = origin_mono_s + start_ms / 1000.0, origin_mono_s + ran_ms / 1000.0
        state, cpu = timeline.cell_state(a)
        result = SlipCauses(slip.t_ms, slip.late_ms, slip.subframes, slip.busy, state, cpu)
        if timeline.first_ts is None or timeline.last_ts is None or a < timeline.first_ts or b > timeline.last_ts \
                or state == "unknown":
            result.pieces.append(Piece(NOT_TRACED, slip.late_ms))
            out.append(result)
            continue
        # The interval cut at each change of the cell thread's state.
        changes = timeline.cell_changes(a, b)
        bounds = [a, *(c[0] for c in changes), b]
        for i, (s, e) in enumerate(zip(bounds, bounds[1:])):
            if i > 0:
                _, what, change_cpu, prev_state = changes[i - 1]
                state = {"in": "running", "wake": "runnable"}.get(what) or _after_out(prev_state)
                cpu = change_cpu
            if e <= s:
                continue
            if state == "running" and cpu is not None:
                result.pieces += _own_work(timeline, cpu, s, e)
            elif state == "stopped":
                result.pieces.append(Piece(STOPPED, (e - s) * 1000.0))
            elif state == "runnable":
                where = timeline.next_cell_cpu(s)
                where = cpu if where is None else where
                result.pieces += _split(timeline, where, s, e, None) if where is not None else \
                    [Piece(NOT_TRACED, (e - s) * 1000.0)]
            else:  # asleep past its boundary: the timer (or doorbell) wake-up came late
                where = timeline.next_cell_cpu(s)
                result.pieces += _split(timeline, where, s, e, WAKEUP_LATE) if where is not None else \
                    [Piece(WAKEUP_LATE, (e - s) * 1000.0)]
        result.page_faults = timeline.faults_within(a, b)
        if result.state != "running":
            ran = next((c[0] for c in timeline.cell_changes(a, b + 0.05) if c[1] == "in"), None)
            result.switch_in_error_ms = None if ran is None else round((ran - b) * 1000.0, 3)
        out.append(result)
    return out


# -- summaries -------------------------------------------------------------------------------


def shares(slips: Iterable[SlipCauses]) -> list[dict[str, Any]]:
    """Causes by share of the late time, largest first: cause, ms, share %, slips it led, and
    the tasks (comm:pid) that made it up, largest first."""
    total_ms = 0.0
    ms: dict[str, float] = {}
    led: dict[str, int] = {}
    tasks: dict[str, dict[str, float]] = {}
    for s in slips:
        for p in s.pieces:
            total_ms += p.ms
            ms[p.cause] = ms.get(p.cause, 0.0) + p.ms
            if p.comm:
                key = f"{p.comm}:{p.pid}"
                tasks.setdefault(p.cause, {})[key] = tasks.get(p.cause, {}).get(key, 0.0) + p.ms
        main = s.main_cause()
        led[main] = led.get(main, 0) + 1
    rows = []
    for cause, value in sorted(ms.items(), key=lambda kv: -kv[1]):
        top = sorted(tasks.get(cause, {}).items(), key=lambda kv: -kv[1])[:5]
        rows.append({"cause": cause, "ms": round(value, 3),
                     "share_pct": round(100.0 * value / total_ms, 1) if total_ms > 0 else 0.0,
                     "slips_led": led.get(cause, 0), "tasks": [{"task": k, "ms": round(v, 3)} for k, v in top]})
    return rows


def slip_json(s: SlipCauses) -> dict[str, Any]:
    """A slip as JSON, its pieces merged by cause and task (µs precision), largest first."""
    merged: dict[tuple[str, str, int | None], float] = {}
    for p in s.pieces:
        key = (p.cause, p.comm, p.pid)
        merged[key] = merged.get(key, 0.0) + p.ms
    pieces = [{"cause": cause, "ms": round(ms, 3), **({"comm": comm, "pid": pid} if comm else {})}
              for (cause, comm, pid), ms in sorted(merged.items(), key=lambda kv: -kv[1])]
    return {**{k: v for k, v in asdict(s).items() if k != "pieces"}, "pieces": pieces}


def render_lines(rows: list[dict[str, Any]], title: str, width: int = 78, limit: int = 12) -> list[str]:
    """The causes as a plain table of at most ``width`` columns (78: printed indented by two)."""
    lines = [title[:width], f"{'cause':<32} {'late ms':>9} {'share':>6} {'led':>4}  top task"[:width]]
    for row in rows[:limit]:
        top = row["tasks"][0]["task"] if row["tasks"] else ""
        line = f"{row['cause'][:32]:<32} {row['ms']:>9.2f} {row['share_pct']:>5.1f}% {row['slips_led']:>4}  {top}"
        lines.append(line[:width])
    if len(rows) > limit:
        lines.append(f"… and {len(rows) - limit} more cause(s) in the JSON"[:width])
    return lines


def one_line(rows: list[dict[str, Any]], n: int = 3) -> str:
    """The largest causes on one line: ``chromium 61 %, softirq:NET_RX 20 %, …``."""
    return ", ".join(f"{r['cause']} {r['share_pct']:.0f} %" for r in rows[:n]) or "no slip"


# -- tracefs ---------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


def _fs_type(path: Path) -> int | None:
    buf = ctypes.create_string_buffer(120)  # struct statfs; f_type is its first long
    if _libc.statfs(os.fsencode(str(path)), buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def tracefs_mounted(path: Path = TRACEFS) -> bool:
    return path.is_dir() and os.path.ismount(path) and _fs_type(path) == TRACEFS_MAGIC


def mount_tracefs(path: Path = TRACEFS) -> None:
    if _libc.mount(b"nodev", os.fsencode(str(path)), b"tracefs", 0, None) != 0:
        err = ctypes.get_errno()
        raise SchedTraceError(f"mounting tracefs on {path}: {os.strerror(err)}")


def unmount_tracefs(path: Path = TRACEFS) -> bool:
    """Unmount the tracefs at ``path``; False when none is mounted there (or it is busy)."""
    if not tracefs_mounted(path):
        return False
    return _libc.umount2(os.fsencode(str(path)), 0) == 0


def remove_instance(path: Path) -> bool:
    """Remove a tracefs instance directory; False when it was already gone."""
    try:
        path.rmdir()
        return True
    except FileNotFoundError:
        return False
    except OSError as e:
        raise SchedTraceError(f"removing the trace instance {path}: {e.strerror}") from e


def emulator_threads(emulator_pid: int) -> dict[int, str]:
    """The emulator's threads, tid → name (``cb-cell``, ``cb-io``, …)."""
    task_dir = Path(f"/proc/{emulator_pid}/task")
    threads = {}
    try:
        for task in task_dir.iterdir():
            with contextlib.suppress(OSError):
                threads[int(task.name)] = (task / "comm").read_text().strip()
    except OSError as e:
        raise SchedTraceError(f"listing the emulator's threads ({task_dir}): {e.strerror}") from e
    return threads


def cell_tid(threads: dict[int, str], emulator_pid: int) -> int:
    """The thread id of the emulator's cell thread (by its name) among ``threads``."""
    for tid, comm in threads.items():
        if comm == CELL_COMM:
            return tid
    raise SchedTraceError(f"the emulator (pid {emulator_pid}) has no thread named {CELL_COMM}")


def mono_minus_unix_s() -> float:
    """CLOCK_MONOTONIC − CLOCK_REALTIME now, s (the emulator gives its time zero in Unix time)."""
    a = time.clock_gettime_ns(time.CLOCK_REALTIME)
    m = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    b = time.clock_gettime_ns(time.CLOCK_REALTIME)
    return (m - (a + b) / 2) / 1e9


class SchedTrace:
    """The run's tracefs instance: made by :meth:`open` (on ``res``, so it goes with the run),
    recording between :meth:`start` and :meth:`stop`."""

    def __init__(self, res: Resources, cell_tid: int, buffer_kb: int = BUFFER_KB, root: Path = TRACEFS,
                 peers: dict[int, str] | None = None) -> None:
        self.res = res
        self.cell_tid = cell_tid
        #: The emulator's other threads, tid → name.
        self.peers = dict(peers or {})
        self.buffer_kb = buffer_kb
        self.root = root
        self.path = root / "instances" / res.name("")
        #: Events the ring buffer lost in the last recording (it was full).
        self.events_lost = 0

    def _write(self, relative: str, value: str) -> None:
        target = self.path / relative
        try:
            target.write_text(value)
        except OSError as e:
            raise SchedTraceError(f"writing {value.strip()!r} to {target}: {e.strerror or e}") from e

    def open(self) -> SchedTrace:
        if not tracefs_mounted(self.root):
            mount_tracefs(self.root)
            # Recorded once made (not before): a mount that failed must never lead a cleanup to
            # unmount a tracefs someone else mounted later.
            self.res.ledger.record("tracefs", str(self.root), path=str(self.root))
            self.res.callback(unmount_tracefs, self.root)
        self.res.ledger.record("trace-instance", self.path.name, path=str(self.path))
        try:
            self.path.mkdir()
        except OSError as e:
            raise SchedTraceError(f"making the trace instance {self.path}: {e.strerror}") from e
        self.res.callback(self.close)
        self._write("trace_clock", "mono")
        self._write("buffer_size_kb", str(self.buffer_kb))
        for event in EVENTS_ALL:
            self._write(f"events/{event}/enable", "1")
        for event in EVENTS_CELL:
            self._write(f"events/{event}/filter", f"pid == {self.cell_tid}")
            self._write(f"events/{event}/enable", "1")
        for event in EVENTS_CELL_KERNEL:
            if (self.path / "events" / event).is_dir():
                self._write(f"events/{event}/filter", f"common_pid == {self.cell_tid}")
                self._write(f"events/{event}/enable", "1")
        for event in EVENTS_OPTIONAL:
            if (self.path / "events" / event).is_dir():
                self._write(f"events/{event}/enable", "1")
        self._write("tracing_on", "0")
        return self

    def start(self) -> None:
        """Empty the buffer and record."""
        self._write("trace", "")
        self._write("tracing_on", "1")

    def stop(self) -> None:
        """Stop recording (the lost events counted); :meth:`read` then has what was recorded."""
        self._write("tracing_on", "0")
        self.events_lost = self._lost()

    def read(self) -> list[Event]:
        """The events of the last recording."""
        target = self.path / "trace"
        try:
            with target.open(errors="replace") as f:
                return list(parse_trace(f, where=str(target)))
        except OSError as e:
            raise SchedTraceError(f"reading {target}: {e.strerror or e}") from e

    def _lost(self) -> int:
        lost = 0
        for stats in sorted((self.path / "per_cpu").glob("cpu*/stats")):
            with contextlib.suppress(OSError, ValueError):
                for line in stats.read_text().splitlines():
                    key, _, value = line.partition(":")
                    if key.strip() in ("overrun", "dropped events"):
                        lost += int(value.strip())
        return lost

    def close(self) -> None:
        """Stop and remove the instance (a second call finds it gone)."""
        if not self.path.exists():
            return
        with contextlib.suppress(OSError):
            (self.path / "tracing_on").write_text("0")
        for attempt in range(50):
            try:
                remove_instance(self.path)
                return
            except SchedTraceError as e:
                # EBUSY while a reader still holds one of its files: wait for it a little.
                if attempt == 49 or not isinstance(e.__cause__, OSError) or e.__cause__.errno != errno.EBUSY:
                    raise
                time.sleep(0.1)


class LoadAttribution:
    """A replay's per-load attribution: :meth:`load` writes ``sched.json`` into each load's
    directory; :meth:`finish` writes ``sched-causes.json`` and returns the run's table lines."""

    def __init__(self, trace: SchedTrace, origin_unix_s: float) -> None:
        self.trace = trace
        self.origin_unix_s = origin_unix_s
        self.loads: list[dict[str, Any]] = []
        self._all: list[SlipCauses] = []

    def load(self, load: int, scheme: str, load_dir: Path, events: list[Event], slips: list[Slip],
             mono_offset_s: float) -> dict[str, Any]:
        timeline = Timeline(events, self.trace.cell_tid, self.trace.peers)
        attributed = attribute(timeline, slips, self.origin_unix_s + mono_offset_s)
        rows = shares(attributed)
        summary = {"load": load, "scheme": scheme, "slips": len(attributed),
                   "late_ms": round(sum(s.late_ms for s in attributed), 3), "events": len(events),
                   "events_lost": self.trace.events_lost, "causes": rows}
        load_dir.mkdir(parents=True, exist_ok=True)
        (load_dir / "sched.json").write_text(json.dumps({**summary, "slip_causes": [slip_json(s) for s in attributed]},
                                                        indent=1) + "\n")
        self.loads.append(summary)
        self._all += attributed
        return summary

    def finish(self, run_dir: Path) -> list[str]:
        rows = shares(self._all)
        (run_dir / "sched-causes.json").write_text(json.dumps(
            {"slips": len(self._all), "late_ms": round(sum(s.late_ms for s in self._all), 3), "causes": rows,
             "loads": self.loads}, indent=1) + "\n")
        late_ms = sum(s.late_ms for s in self._all)
        return render_lines(rows, f"who held the cell clock: {len(self._all)} slip(s) >= 0.5 ms, "
                                  f"{late_ms:.1f} ms late in all")
