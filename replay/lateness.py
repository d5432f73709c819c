"""Timing integrity of one load: how far the emulator fell behind real time while the page
loaded, and how much CPU time the hypervisor stole from the machine meanwhile.

Two measures, from the emulator's own files, cut to the load's time span:

* **subframe lateness** (``truth.cbcol``'s ``wake_lateness_us``): how late each subframe ran
  after its boundary. While the cell is idle the emulator runs subframes in batches of up to
  :data:`IDLE_BATCH_MS` on purpose (their outputs do not depend on when they run), so a
  subframe of an idle cell — no UE has anything queued or demanded — counts only by what
  exceeds the batch. The truth has no column saying which subframes were batched; the rule
  can miss a 1–10 ms stall of a cell whose only packets sit in the core delay lines (the
  delivery error below still sees what it does to them).
* **delivery timing error** (``packets.cbcol``): write time − due time of every packet the
  emulator delivered during the load — what a stall does to the measured RTTs.

Steal time comes from ``/proc/stat`` (the ``cpu`` line's 8th value) before and after the load.

A late wake-up of the cell thread runs every missed subframe at once, so one slip of L ms
shows as subframes late by L, L − 1, … ms: a :class:`Slip` is one such wake-up, its lateness
the first subframe's. A load's **stall** is the sum of its busy slips of at least
:data:`SLIP_FLOOR_MS`: how long the cell's clock stood still while the load's data was in it,
the most its packets were held back in all.

Which loads are flagged (``timing_ok`` False) is a :class:`LateRule` of :data:`LATE_RULES`
(``--late-rule``; docs/timing.md): ``strict``, any subframe lateness or delivery error beyond
:data:`~clawbed.replay.records.LATE_LIMIT_MS`; ``evidence`` (the default), a bound on the stall
and on the worst single slip, from what injected stalls did to the PLT (``make bench``).

What a late load becomes (:func:`late_action`): run again (``--rerun-late``, up to
``max_late_reruns`` times) — except with kept connections (``--keep-connections``): the
browser's connections are then warm from the late attempt itself, so a rerun would be a warm
load standing in for a cold one (load 0: 1,246 ms late, then 741 and 838 ms warm). Such a
load is kept, flagged (``timing_ok`` False), and the run goes on.

The files are read incrementally (:class:`ColumnTail`): each load decodes only the chunks
written since the previous one.
"""

from __future__ import annotations

import enum
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zstandard

from clawbed.emulator.truth import _CHUNK_PREFIX, _FILE_PREFIX, TruthFormatError, _read_chunk
from clawbed.replay.records import LATE_LIMIT_MS, LoadRecord

#: Longest an idle cell's subframes wait to be run in a batch, ms (``IDLE_BATCH_NS`` in
#: ``emulator/dataplane/src/engine.rs``).
IDLE_BATCH_MS = 10.0
#: How long to wait for the files to cover the load's end, s (truth and packet-log chunks are
#: written every ~20 ms; the replay has waited for the truth already).
CATCH_UP_S = 2.0
#: Rows older than this before the last load's start are dropped from memory, s.
KEEP_BEFORE_S = 5.0
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ColumnTail:
    """The columns ``wanted`` of a growing ``.cbcol`` file, decoded chunk by chunk as it grows:
    :meth:`poll` decodes what was appended since the last call (complete chunks only)."""

    def __init__(self, path: Path, wanted: tuple[str, ...], *, prefix_match: tuple[str, ...] = ()) -> None:
        self.path = path
        self.wanted = wanted
        #: Columns kept by name prefix and suffix pairs, e.g. ("ues[", ".queue_bytes").
        self.prefix_match = prefix_match
        self._pos: int | None = None
        self._index = 0
        self._decompressor = zstandard.ZstdDecompressor()
        self.columns: dict[str, np.ndarray] = {}
        self.rows = 0

    def _keep(self, name: str) -> bool:
        return name in self.wanted or any(name.startswith("ues[") and name.endswith(s) for s in self.prefix_match)

    def poll(self) -> None:
        try:
            with self.path.open("rb") as f:
                if self._pos is None:
                    head = f.read(_FILE_PREFIX.size)
                    if len(head) < _FILE_PREFIX.size:
                        return
                    header_len = _FILE_PREFIX.unpack(head)[3]
                    self._pos = _FILE_PREFIX.size + header_len
                f.seek(self._pos)
                data = f.read()
        except OSError:
            return
        at = 0
        new: list[tuple[int, dict[str, np.ndarray]]] = []
        while at + _CHUNK_PREFIX.size <= len(data):
            decoded = _read_chunk(self.path, data, at, self._index, self._decompressor)
            if decoded is None:
                break
            at, rows, columns = decoded
            self._index += 1
            new.append((rows, {k: v for k, v in columns.items() if self._keep(k)}))
        self._pos += at
        for rows, columns in new:
            for name in set(self.columns) | set(columns):
                old = self.columns.get(name, np.full(self.rows, np.nan))
                add = columns.get(name)
                add = np.full(rows, np.nan) if add is None else add.astype(np.float64, copy=False)
                self.columns[name] = np.concatenate([old.astype(np.float64, copy=False), add])
            self.rows += rows

    def drop_before(self, key: str, floor: float) -> None:
        """Forget the rows whose ``key`` is below ``floor`` (memory stays bounded over a run)."""
        if key not in self.columns:
            return
        keep = ~(self.columns[key] < floor)
        if keep.all():
            return
        self.columns = {k: v[keep] for k, v in self.columns.items()}
        self.rows = int(keep.sum())


#: A slip of the cell clock counts toward a load's stall (and is attributed by a scheduler
#: trace) from this lateness on, ms: below it, the wake-up's own jitter on a virtual machine.
SLIP_FLOOR_MS = 0.5


@dataclass(frozen=True)
class Slip:
    """One late wake-up of the cell thread and the subframes it ran at once."""

    #: Emulated time of the first subframe it ran late (its boundary), ms.
    t_ms: float
    #: That subframe's lateness (the slip's worst), ms; for an idle cell, beyond its batch.
    late_ms: float
    #: Subframes run in that wake-up.
    subframes: int
    #: The cell held data (some UE had something queued or demanded) during it.
    busy: bool
    #: When the wake-up ran them, emulated ms (None: ``t_ms + late_ms``); for an idle batch,
    #: its lateness is what it ran beyond the batch, so the slip is the ``late_ms`` before this.
    ran_ms: float | None = None

    def span_ms(self) -> tuple[float, float]:
        """The late interval, emulated ms: from when it should have run to when it ran."""
        ran = self.t_ms + self.late_ms if self.ran_ms is None else self.ran_ms
        return ran - self.late_ms, ran


@dataclass
class Lateness:
    subframe_max_ms: float | None
    subframe_p999_ms: float | None
    delivery_max_ms: float | None
    delivery_p999_ms: float | None
    #: Sum of the busy slips of at least :data:`SLIP_FLOOR_MS`, ms (None: not measured).
    stall_ms: float | None = None
    #: Those slips, in time order (for a scheduler trace's attribution).
    slips: list[Slip] = field(default_factory=list)
    #: How long the measured span (the load) lasted, ms (None: not known).
    span_ms: float | None = None


def find_slips(t_ms: np.ndarray, lateness_us: np.ndarray, busy: np.ndarray,
               floor_ms: float = SLIP_FLOOR_MS) -> list[Slip]:
    """The slips of at least ``floor_ms`` among subframes ``t_ms`` (emulated ms) with their
    recorded lateness (µs) and busy flags: subframes run in one wake-up share its time
    (boundary + lateness), so consecutive rows with the same run time form one slip."""
    t = np.asarray(t_ms, dtype=np.float64)
    if len(t) == 0:
        return []
    late_us = np.asarray(lateness_us, dtype=np.float64)
    busy = np.asarray(busy, dtype=bool)
    effective = effective_subframe_lateness_ms(late_us, busy)
    # The run time in µs, rounded: the truth stores lateness in µs as f64.
    ran_us = np.round(t * 1000.0 + late_us)
    starts = np.flatnonzero(np.concatenate([[True], ran_us[1:] != ran_us[:-1]]))
    ends = np.append(starts[1:], len(t))
    out = []
    for a, b in zip(starts, ends):
        worst = float(np.nanmax(effective[a:b]))
        if worst >= floor_ms:
            out.append(Slip(t_ms=float(t[a]), late_ms=round(worst, 3), subframes=int(b - a),
                            busy=bool(busy[a:b].any()), ran_ms=round(float(ran_us[a]) / 1000.0, 3)))
    return out


def stall_ms(slips: list[Slip]) -> float:
    """The busy slips' lateness summed, ms: how long the clock stood still with data in the cell."""
    return round(sum(s.late_ms for s in slips if s.busy), 3)


def effective_subframe_lateness_ms(lateness_us: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """Each subframe's lateness, ms, counting a subframe of an idle cell only beyond the idle
    batch it may have run in."""
    late_ms = np.asarray(lateness_us, dtype=np.float64) / 1000.0
    return np.where(busy, late_ms, np.maximum(late_ms - IDLE_BATCH_MS, 0.0))


def _stats(values: np.ndarray) -> tuple[float | None, float | None]:
    values = values[np.isfinite(values)]
    if len(values) == 0:
        return None, None
    return round(float(values.max()), 3), round(float(np.quantile(values, 0.999, method="higher")), 3)


class LoadTiming:
    """Reads the emulator's truth and packet log as they grow and measures each load's lateness."""

    def __init__(self, truth_path: Path, packets_path: Path, origin_unix_s: float) -> None:
        self.origin_unix_s = origin_unix_s
        self.truth = ColumnTail(truth_path, ("t_ms", "wake_lateness_us"),
                                prefix_match=(".queue_bytes", ".demand_rbs"))
        self.packets = ColumnTail(packets_path, ("t_actual_us", "t_scheduled_us", "event"))

    def measure(self, t0_unix_s: float, t1_unix_s: float) -> Lateness:
        t0_ms = (t0_unix_s - self.origin_unix_s) * 1000.0
        t1_ms = (t1_unix_s - self.origin_unix_s) * 1000.0
        deadline = time.monotonic() + CATCH_UP_S
        while True:
            try:
                self.truth.poll()
                self.packets.poll()
            except TruthFormatError:
                pass
            t = self.truth.columns.get("t_ms")
            if (t is not None and len(t) and np.nanmax(t) >= t1_ms) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        out = Lateness(None, None, None, None, span_ms=t1_ms - t0_ms)
        tc = self.truth.columns
        if "t_ms" in tc and "wake_lateness_us" in tc:
            sel = (tc["t_ms"] >= t0_ms) & (tc["t_ms"] <= t1_ms)
            busy = np.zeros(int(sel.sum()), dtype=bool)
            for name, values in tc.items():
                if name.startswith("ues["):
                    busy |= np.nan_to_num(values[sel]) > 0
            late = effective_subframe_lateness_ms(tc["wake_lateness_us"][sel], busy)
            out.subframe_max_ms, out.subframe_p999_ms = _stats(late)
            out.slips = find_slips(tc["t_ms"][sel], tc["wake_lateness_us"][sel], busy)
            out.stall_ms = stall_ms(out.slips) if len(late) else None
        pc = self.packets.columns
        if "t_actual_us" in pc:
            t_ms = pc["t_actual_us"] / 1000.0
            sel = (pc["event"] == 0) & (t_ms >= t0_ms) & (t_ms <= t1_ms)
            err_ms = (pc["t_actual_us"][sel] - pc["t_scheduled_us"][sel]) / 1000.0
            out.delivery_max_ms, out.delivery_p999_ms = _stats(err_ms)
            if not sel.any() and out.subframe_max_ms is not None:
                out.delivery_max_ms = out.delivery_p999_ms = 0.0  # nothing delivered: no error
        floor_ms = t0_ms - KEEP_BEFORE_S * 1000.0
        self.truth.drop_before("t_ms", floor_ms)
        self.packets.drop_before("t_actual_us", floor_ms * 1000.0)
        return out


def cpu_ticks(path: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(steal, total) clock ticks of all CPUs since boot, or None where unreadable."""
    try:
        with path.open() as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu" or len(first) < 9:
        return None
    values = [int(v) for v in first[1:]]
    # guest and guest_nice (9th, 10th) are already inside user and nice.
    return values[7], sum(values[:8])


def cpu_pressure_us(path: Path = Path("/proc/pressure/cpu")) -> int | None:
    """Total µs during which some runnable task waited for a CPU (PSI), or None without PSI."""
    try:
        first = path.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    for item in first[1:]:
        if item.startswith("total="):
            return int(item[6:])
    return None


def pressure_between(before: int | None, after: int | None, wall_s: float) -> float | None:
    """% of ``wall_s`` during which some task waited for a CPU, between two PSI readings."""
    if before is None or after is None or wall_s <= 0:
        return None
    return round(min(100.0, (after - before) / 1e6 / wall_s * 100.0), 1)


def steal_between(before: tuple[int, int] | None, after: tuple[int, int] | None) -> tuple[float | None, float | None]:
    """(steal ms summed over CPUs, steal % of the machine's CPU time) between two readings."""
    if before is None or after is None:
        return None, None
    steal, total = after[0] - before[0], after[1] - before[1]
    return round(steal * 1000.0 / _CLK_TCK, 1), round(100.0 * steal / total, 2) if total > 0 else 0.0


class LateRule:
    """Which loads count as late: one subclass and one :func:`register_rule` per rule."""

    name: str = ""
    #: One line for ``--help`` and the docs.
    help: str = ""

    def timing_ok(self, lateness: Lateness) -> bool | None:
        """False: the load is flagged; None: nothing was measured."""
        raise NotImplementedError

    def describe(self) -> str:
        """The rule's bounds, for a flagged load's message."""
        raise NotImplementedError


#: name → rule, ``--late-rule``'s choices.
LATE_RULES: dict[str, LateRule] = {}


def register_rule(rule: LateRule) -> LateRule:
    if rule.name in LATE_RULES:
        raise ValueError(f"late rule {rule.name!r} is registered twice")
    LATE_RULES[rule.name] = rule
    return rule


class StrictRule(LateRule):
    """Any subframe (or delivery) later than :data:`LATE_LIMIT_MS`: the rule before the evidence."""

    name = "strict"
    help = f"flag a load when any busy subframe or delivery was more than {LATE_LIMIT_MS:g} ms late"

    def timing_ok(self, lateness: Lateness) -> bool | None:
        measured = [v for v in (lateness.subframe_max_ms, lateness.delivery_max_ms) if v is not None]
        return all(v <= LATE_LIMIT_MS for v in measured) if measured else None

    def describe(self) -> str:
        return f"more than {LATE_LIMIT_MS:g} ms late somewhere"


class EvidenceRule(LateRule):
    """A bound on the stall (the sum of the busy slips) and on the worst single slip, set from
    what injected stalls did to the PLT (docs/timing.md, "A threshold from evidence")."""

    name = "evidence"
    #: Largest stall (sum of busy slips of at least SLIP_FLOOR_MS) a load may have, ms, or
    #: STALL_SHARE of the load's duration when that is more: a stall can add at most itself to
    #: the PLT, and a bound fixed in ms would hold a 4 s load to half the share of a 2 s one.
    MAX_STALL_MS = 5.0
    #: The stall's bound as a share of the load's duration (0.5 %: 5 ms of a 1 s load).
    STALL_SHARE = 0.005
    #: Largest single slip, and delivery error, ms: Cubic's smallest HyStart delay threshold
    #: (an RTT sample must exceed the minimum by more than 4 ms), so one slip cannot end a
    #: slow start by itself; single stalls of 2-8 ms moved no PLT beyond the noise (12 pairs
    #: per page and scheme, docs/timing.md). It was 2 ms, half of that, until measured.
    MAX_SLIP_MS = 4.0
    help = (f"flag a load when the cell's clock stood still more than {MAX_STALL_MS:g} ms (or "
            f"{100 * STALL_SHARE:g} % of the load, if more) in all while it held data, or more than "
            f"{MAX_SLIP_MS:g} ms at once")

    def max_stall_ms(self, span_ms: float | None) -> float:
        """The stall bound of a load lasting ``span_ms``, ms."""
        return max(self.MAX_STALL_MS, self.STALL_SHARE * (span_ms or 0.0))

    def timing_ok(self, lateness: Lateness) -> bool | None:
        worst = [v for v in (lateness.subframe_max_ms, lateness.delivery_max_ms) if v is not None]
        if not worst:
            return None
        return (all(v <= self.MAX_SLIP_MS for v in worst)
                and (lateness.stall_ms or 0.0) <= self.max_stall_ms(lateness.span_ms))

    def describe(self) -> str:
        return (f"stalled more than {self.MAX_STALL_MS:g} ms (or {100 * self.STALL_SHARE:g} % of the load) "
                f"in all or {self.MAX_SLIP_MS:g} ms at once")


register_rule(StrictRule())
register_rule(EvidenceRule())
#: The rule a replay uses unless told (``--late-rule``).
DEFAULT_LATE_RULE = "evidence"


def judge(record: LoadRecord, lateness: Lateness, rule: str = DEFAULT_LATE_RULE) -> None:
    """Fill in the record's lateness fields and ``timing_ok`` by the rule named ``rule``."""
    record.subframe_late_max_ms, record.subframe_late_p999_ms = lateness.subframe_max_ms, lateness.subframe_p999_ms
    record.delivery_err_max_ms, record.delivery_err_p999_ms = lateness.delivery_max_ms, lateness.delivery_p999_ms
    record.subframe_stall_ms = lateness.stall_ms
    record.subframe_slips = sum(1 for s in lateness.slips if s.busy) if lateness.stall_ms is not None else None
    record.late_rule = rule
    record.timing_ok = LATE_RULES[rule].timing_ok(lateness)


def timing_ok_by(record: LoadRecord, rule: str) -> bool | None:
    """What ``rule`` says of a load already judged (by any rule), from its record's figures:
    how a run's loads read under the other rule (``make bench``'s first-attempt share)."""
    if record.subframe_late_max_ms is None and record.delivery_err_max_ms is None:
        return None
    span_ms = None
    if record.t_start_unix_s is not None and record.t_end_unix_s is not None:
        span_ms = (record.t_end_unix_s - record.t_start_unix_s) * 1000.0
    lateness = Lateness(record.subframe_late_max_ms, record.subframe_late_p999_ms, record.delivery_err_max_ms,
                        record.delivery_err_p999_ms, stall_ms=record.subframe_stall_ms, span_ms=span_ms)
    return LATE_RULES[rule].timing_ok(lateness)


class LateAction(enum.Enum):
    """What the replay does with a load once its timing is judged."""

    #: On time, or not measured: kept.
    KEEP = "keep"
    #: Late: kept aside and the load run again.
    RERUN = "rerun"
    #: Late and kept flagged: reruns are off, or used up.
    FLAG = "flag"
    #: Late and kept flagged because connections are kept: a rerun would ride the connections
    #: this attempt warmed, a warm load in place of the one asked for.
    FLAG_KEPT_CONNECTIONS = "flag-kept-connections"


def late_action(timing_ok: bool | None, *, rerun_late: bool, reruns: int, max_reruns: int,
                keep_connections: bool) -> LateAction:
    """What becomes of a load judged ``timing_ok`` after ``reruns`` reruns."""
    if timing_ok is not False:
        return LateAction.KEEP
    if not rerun_late or reruns >= max_reruns:
        return LateAction.FLAG
    if keep_connections:
        return LateAction.FLAG_KEPT_CONNECTIONS
    return LateAction.RERUN
