"""The record of one load: one definition for the replay that writes it, the run directory
(``results.jsonl``, ``results.csv``), the report, the result store, the dashboards and the
regression check."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from clawbed.errors import InputError


@dataclass
class LoadRecord:
    """One load of a page over the emulated cell, and what it measured."""

    #: Position in the run (0, 1, …), the round (repetition) and the scheme loaded.
    load: int
    round: int
    scheme: str
    #: Trace time the emulator was moved to just before the load, ms (None: not aligned).
    trace_ms: int | None = None
    #: The kernel's name of the scheme's congestion control (``claw_<run id>`` for claw).
    cc: str | None = None
    #: The page loaded completely (every object, no HTTP error): then ``plt_ms`` is set.
    ok: bool = False
    error: str | None = None
    #: Page load time, ms.
    plt_ms: float | None = None
    #: Bytes of the objects fetched, and what the page holds.
    bytes_total: int | None = None
    page_bytes: int | None = None
    #: ALPN-style protocol of the page's connection: ``h2`` or ``http/1.1``.
    protocol: str | None = None
    n_objects: int | None = None
    #: When the loader started and ended, and when the page's first connection opened (Unix s).
    t_start_unix_s: float | None = None
    t_end_unix_s: float | None = None
    t_first_flow_unix_s: float | None = None
    #: TCP flows the server saw during the load, and the retransmissions during it: each flow's
    #: own, less what a kept connection had retransmitted before the load
    #: (:func:`load_retransmits`).
    flows: int = 0
    retransmits: int | None = None
    #: The load's directory, relative to the run directory.
    load_dir: str = ""
    #: The loader's per-object timings (``loaders.ObjectTiming`` as plain data).
    objects: list[dict[str, Any]] = field(default_factory=list)
    #: Bytes each background activity got across during the load.
    background_bytes: dict[str, int] = field(default_factory=dict)
    #: Why the load's time series were not all kept (the result itself stands).
    series_error: str | None = None
    #: Timing integrity of the emulator during the load (``replay.lateness``): the subframe
    #: lateness (subframes run while the cell was busy; idle batches run late on purpose and
    #: count only beyond their batch) and the delivery timing error (write − due, every
    #: packet delivered), max and p99.9, ms; the host's steal time over the load, summed over
    #: CPUs, ms, and as % of the machine's CPU time. None: not measured.
    subframe_late_max_ms: float | None = None
    subframe_late_p999_ms: float | None = None
    delivery_err_max_ms: float | None = None
    delivery_err_p999_ms: float | None = None
    steal_ms: float | None = None
    steal_pct: float | None = None
    #: CPU pressure over the load: % of its wall time during which some runnable task waited
    #: for a CPU (``/proc/pressure/cpu``, "some"): how contended the machine was — the loader,
    #: nginx and the TLS handshakes run on the same CPUs, so this moves PLT. None: no PSI.
    cpu_wait_pct: float | None = None
    #: The stall over the load: the cell thread's busy slips of 0.5 ms or more summed, ms, and
    #: how many there were (``replay.lateness``: how long the clock stood still with data in the cell).
    subframe_stall_ms: float | None = None
    subframe_slips: int | None = None
    #: The rule ``timing_ok`` was judged by (``replay.lateness.LATE_RULES``: strict, evidence).
    late_rule: str | None = None
    #: False when the emulator fell behind during the load beyond what ``late_rule`` allows
    #: (its timing is not the model's); None: not measured.
    timing_ok: bool | None = None
    #: Where the load's wall time beyond its PLT went, ms: ``scheme_setup`` (the scheme's
    #: server side, agents and clients, until ready), ``sampler_start``, ``seek``, ``loader``
    #: (the loader's wall time beyond the PLT: process and browser start, connection set-up
    #: before the first request, teardown), ``teardown`` (sampler stop, scheme teardown),
    #: ``series`` (writing the time series), ``timing`` (the lateness measurement) and ``total``
    #: (the whole load's wall time minus its PLT).
    overhead_ms: dict[str, float] = field(default_factory=dict)
    #: Attempts of this load discarded before it because their ``timing_ok`` was False
    #: (``--rerun-late``; their records are in ``late-loads.jsonl``).
    late_reruns: int = 0

    @property
    def measured(self) -> bool:
        """It has a page load time to count."""
        return self.ok and self.plt_ms is not None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any, where: str) -> LoadRecord:
        """A record from its JSON object; ``where`` (file and line) names a bad one. Fields a
        later version added are optional, so older run directories still read."""
        if not isinstance(data, dict):
            raise InputError(f"{where}: a load record must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InputError(f"{where}: unknown field(s) {', '.join(unknown)} in a load record")
        try:
            return cls(**data)
        except TypeError as e:
            raise InputError(f"{where}: {e}") from None


def load_retransmits(rows: list[dict[str, Any]], carried: dict[str, int]) -> tuple[int | None, dict[str, int]]:
    """(retransmissions during the load, each flow's total after it) from the load's TCP
    samples (``flow``, ``retrans_total``: the kernel's count over the connection's life).

    ``carried``: each flow's total at the end of the previous loads, for connections a kept
    browser carries over: they count only what they retransmitted since. A flow whose total
    is below what was carried is a new connection on a reused address and port: counted whole.
    None when there were no samples.
    """
    last: dict[str, int] = {}
    for row in rows:
        last[row["flow"]] = int(row["retrans_total"])  # a flow's last sample holds its total
    if not last:
        return None, dict(carried)
    count = 0
    for flow, total in last.items():
        before = carried.get(flow, 0)
        count += total - before if total >= before else total
    return count, {**carried, **last}


#: Lateness (ms) beyond which the strict rule counts the emulator as having fallen behind
#: during a load (``replay.lateness.StrictRule``): then the load's ``timing_ok`` is False.
LATE_LIMIT_MS = 1.0

#: ``results.csv``'s columns: the record's flat fields, in order.
CSV_COLUMNS = ("load", "round", "trace_ms", "scheme", "ok", "error", "plt_ms", "bytes_total", "page_bytes",
               "protocol", "n_objects", "t_start_unix_s", "t_end_unix_s", "t_first_flow_unix_s", "flows",
               "retransmits", "load_dir", "timing_ok", "late_reruns", "subframe_late_max_ms",
               "subframe_late_p999_ms", "delivery_err_max_ms", "delivery_err_p999_ms", "steal_ms", "steal_pct",
               "cpu_wait_pct", "subframe_stall_ms", "subframe_slips", "late_rule")
