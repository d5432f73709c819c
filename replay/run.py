"""One replay: the cell, the web server, and N loads of one page per scheme, interleaved.

Order of a run (everything through one :class:`~clawbed.netns.Resources` stack, so Ctrl-C,
SIGTERM or an error removes exactly what was made, and every finished load stays on disk):

1. the run directory and its manifest (config, versions, trace SHA-256, host facts);
2. the topology (UE and core namespaces; with a wireline rate, the wired side built with
   Mininet: the server host behind a gateway whose link to the core is the TBF bottleneck,
   ``replay/network/topology.py``), the UE's sysctls (receive window), the emulator on the trace;
3. the page, materialised into ``<run dir>/site``, served by nginx (TLS, h2 or HTTP/1.1) in
   the server namespace; the TCP sampler's netlink socket in that namespace;
   then the background traffic, if any (``replay/network/crosstraffic.py``: cross traffic
   through the wireline bottleneck, other UEs' downloads), warmed up for
   :data:`BACKGROUND_WARMUP_S` and described in the manifest;
4. for each round, for each scheme (A B C A B C …), one load: with ``idle_before_s``, first a
   wait with nothing sent (the UE's radio demotes, as between the SPDY paper's page views); then
   the scheme's server side (sysctls, its CC as the namespace default; for claw/cqic the BPF
   CC, the ACK-flag reader and the agent) and its client (claw/cqic) → the sampler → with
   ``align_trace``, the emulator's traces moved to the round's start (:meth:`ReplayConfig.round_trace_ms`:
   every load of a round meets the same channel and the same other users) → the
   loader in the UE namespace → sampler stopped, scheme torn down → the emulator's ground
   truth (with UE 0's RRC/DRX state), the UE's diag feed and the client's estimates cut to the
   load's time span and written beside the TCP samples and the server namespace's TCP counters
   over the load (``netstat.json``: timeouts, spurious-RTO undos, DSACKs) in
   ``loads/NNN-<scheme>/`` → one line in the results
   (with ``background_bytes``: what each background activity got across during the load);
5. the background stopped (its byte totals into the manifest), then the emulator.

A load that fails (the loader's error, a scheme that cannot be set up, a timeout) is recorded
with its error and the run goes on; the emulator dying ends the run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clawbed import doctor
from clawbed.claw.schemes import SchemeContext, UeEndpoint, get_scheme
from clawbed.emulator.config import DEFAULT_SCHEDULER, Delays, EmulatorConfig, parse_rate_bps
from clawbed.emulator.process import BINARY, Emulator, EmulatorError
from clawbed.emulator.truth import TruthFormatError, read_truth
from clawbed.errors import ClawbedError, InputError
from clawbed.netns import Resources, new_run_id
from clawbed.paths import runs_dir
from clawbed.replay import cpus, drwa, loaders, mahimahi, pages, rmem, schedtrace, settings, webserver
from clawbed.replay.capture import ServerCapture
from clawbed.replay.flows import FlowSet
from clawbed.replay.lateness import (
    DEFAULT_LATE_RULE,
    LATE_RULES,
    LateAction,
    Lateness,
    LoadTiming,
    cpu_pressure_us,
    cpu_ticks,
    judge,
    late_action,
    pressure_between,
    steal_between,
)
from clawbed.replay.loaders.browser import CHROMIUM_HTTP1_CONNECTIONS
from clawbed.replay.network.crosstraffic import (
    MAX_OTHER_UES,
    Background,
    CrossTrafficSpec,
    OtherUeSpec,
    SchemeSettings,
    build_activities,
    ue_flow_from,
)
from clawbed.replay.network.topology import Impairment, Shaping, Topology, probe_netem
from clawbed.replay.records import LoadRecord, load_retransmits
from clawbed.replay.rundir import (
    RunDir,
    check_name,
    compress_in_place,
    default_name,
    describe_made,
    host_facts,
    read_csv,
    resources_made,
    sha256_file,
    versions,
    write_csv,
    write_zstd_lines,
)
from clawbed.replay.sampler import DEFAULT_PERIOD_S, SAMPLE_COLUMNS, TcpSampler
from clawbed.tcpstack import server_overrides, set_both_ends
from clawbed.traces.inputs import as_trace, needs_import
from clawbed.traces.io import read_trace

LOADERS = ("browser", "h2")
HTTP_VERSIONS = ("2", "1.1")
#: The UE's TCP receive buffer: min, default, max bytes. The maximum (8 MiB) is well above
#: the largest W_claw of the bundled traces, so the receive window never limits a scheme
#: (spec: "Client receive window").
UE_TCP_RMEM_BYTES = rmem.UNCAPPED
#: How long to wait for the emulator's files to cover a load's end (the truth is written in
#: 1 s chunks, or at once when asked, the diag file flushed every 100 ms), s.
FILES_CATCH_UP_S = 2.0
#: How often a replay looks for the load's end in the truth file, and asks the emulator again
#: to write what it holds (the subframes of the load's last ms may not have reached the
#: recorder at the first request), s.
FILES_POLL_S = 0.02
FLUSH_AGAIN_S = 0.1
#: How long a run samples steal, other processes' CPU and a probe's 1 ms wake-ups before it
#: starts (the doctor's verdict in the manifest), s: half a second of a run of minutes.
DOCTOR_SAMPLE_S = 0.5
#: Ground-truth columns kept per load (UE 0's are prefixed ``ues[0].`` in the file).
CELL_TRUTH_COLUMNS = ("n_rb", "total_alloc_rbs", "other_alloc_rbs", "other_demand_rbs")
UE_TRUTH_COLUMNS = ("alloc_rbs", "demand_rbs", "mcs", "tbs_bits", "queue_bytes", "delivered_bytes",
                    "overflow_drops", "rlc_loss_drops")
TRUTH_CSV_COLUMNS = ("t_unix_s", *CELL_TRUTH_COLUMNS, *UE_TRUTH_COLUMNS)
#: UE 0's radio state, after those columns in ``truth.csv``: the RRC state (``idle``, ``fach``,
#: ``promoting``, ``connected``), the DRX state, and 1 while its link was stalled. Empty in a
#: file of an emulator without them.
RADIO_TRUTH_COLUMNS = ("rrc", "drx", "stalled")
#: The scripted events (``events``, emulator/events.py) as UE 0 and the cell met them, after
#: those: 1 while a scripted outage was in force, UE 0's capacity scale, packets scripted
#: drops took, RBs a burst of other users took. Empty in a file of an emulator without them.
EVENT_TRUTH_COLUMNS = ("scripted_outage", "capacity_factor", "event_drops", "burst_rbs")
#: Where each of those comes from in the emulator's truth.
_EVENT_TRUTH_SOURCES = {"scripted_outage": "ues[0].scripted_outage", "capacity_factor": "ues[0].capacity_factor",
                        "event_drops": "ues[0].event_drops", "burst_rbs": "burst_rbs"}
#: The truth file's columns a load's truth.csv is cut from (UE 0's and the cell's).
_TRUTH_READ = frozenset(("t_ms", *CELL_TRUTH_COLUMNS,
                         *(f"ues[0].{name}" for name in (*UE_TRUTH_COLUMNS, *RADIO_TRUTH_COLUMNS)),
                         *_EVENT_TRUTH_SOURCES.values()))
#: Longest wait before a load (``idle_before_s``), s.
MAX_IDLE_BEFORE_S = 3600.0
#: How long background traffic runs before the first load, s: long enough for bulk flows to
#: leave slow start and fill the bottleneck's queue, so every load meets the same competition.
BACKGROUND_WARMUP_S = 3.0


@dataclass
class ReplayConfig:
    """Everything a replay is run from (written into the manifest as is)."""

    trace: Path
    page: str
    schemes: list[str]
    runs: int
    http_version: str = "2"
    loader: str = "browser"
    #: Round-trip delay of the core network (split evenly into both directions), ms; None:
    #: the trace's ``core_delay_ms`` column or the emulator's default.
    core_rtt_ms: float | None = None
    #: The base station's per-UE queue limit: a size (``3MiB``) or bytes; None: the emulator's
    #: default (3 MiB).
    bs_buffer: str | int | None = None
    #: Rate of a wireline bottleneck between the core and the server (``20mbit``); None: none.
    wireline_rate: str | None = None
    #: netem on the wired link between the core and the server, each direction: delay and
    #: jitter (ms), random loss and reordering (%). Without netem in the kernel a delay moves
    #: into the emulator's core delay and the rest is refused (:meth:`Replay._wired_side`).
    wired_delay_ms: float = 0.0
    wired_jitter_ms: float = 0.0
    wired_loss_pct: float = 0.0
    wired_reorder_pct: float = 0.0
    #: The cell's scheduler: a policy name or ``{"kind": NAME, <its parameters>}``.
    scheduler: str | dict[str, Any] = DEFAULT_SCHEDULER
    #: The base station's queue policy (``ues[i].cell.queue``) and the cell's loss model
    #: (``cell.loss``), the same form; None: the emulator's defaults.
    queue: str | dict[str, Any] | None = None
    loss: str | dict[str, Any] | None = None
    #: Air interface delay, ms; the UE's uplink rate (``5mbit``); RSRQ measurement noise σ, dB.
    #: None: the emulator's defaults (1 ms; the trace's uplink capacity; 0.5 dB).
    air_delay_ms: float | None = None
    uplink_rate: str | None = None
    rsrq_noise_db: float | None = None
    seed: int = 1
    name: str | None = None
    #: Longest a load may take before it counts as failed, s.
    load_timeout_s: float = 60.0
    #: CLAW feedback period, ms.
    feedback_period_ms: int = 100
    sample_period_s: float = DEFAULT_PERIOD_S
    output_root: Path = field(default_factory=runs_dir)
    #: Wired cross traffic, one cross-traffic host each, sharing the wireline bottleneck.
    cross_traffic: list[CrossTrafficSpec] = field(default_factory=list)
    #: Other UEs of the cell (UEs 1, 2, …; the loads run on UE 0), each with its downloads.
    other_ues: list[OtherUeSpec] = field(default_factory=list)
    #: Background flows on the loads' own UE (``replay/flows.py``), entries as a spec writes them
    #: (``{"kind": "poisson", "rate_per_s": 2, "bytes": [100000]}``); checked by ``settings``.
    flows: list[dict[str, Any]] = field(default_factory=list)
    #: Scripted events of the emulator (``emulator/events.py``; ``at_ms`` counts from each load's
    #: start when the trace is aligned, else from the run's), e.g. ``{"kind": "outage", "at_ms": 3000, "ms": 500}``.
    events: list[dict[str, Any]] = field(default_factory=list)
    #: Start every load of a round at the same trace time (:meth:`round_trace_ms`), so the
    #: schemes compared meet the same channel; False: each load meets the trace wherever the
    #: run has got to (the loads of a round then see different stretches of it).
    align_trace: bool = True
    #: A deliberate slowdown, for calibrating a regression check: this many ms added to the
    #: emulator's core delay on the server → UE path (every downlink packet), so every round
    #: trip of the page takes that much longer. 0: none.
    inject_delay_ms: float = 0.0
    #: Load again a load during which the emulator fell behind (``timing_ok`` False), up to
    #: ``max_late_reruns`` times; the discarded attempts go to ``late-loads.jsonl``. With kept
    #: connections a late load is kept flagged instead (``lateness.late_action``: a rerun would be warm).
    rerun_late: bool = True
    max_late_reruns: int = 2
    #: The UE's receive-buffer cap: a phone of BB12's table, PHONE:NETWORK, or bytes
    #: (``replay/rmem.py``); None: uncapped (:data:`UE_TCP_RMEM_BYTES`).
    ue_rmem: str | int | None = None
    #: DRWA at the UE (``replay/drwa.py``: λ = 3, α = 7/8).
    drwa: bool = False
    #: The CLAW client of every UE that runs one: ``fast`` (compiled) or ``reference`` (Python).
    claw_client: str = "fast"
    #: How the UEs' diag feeds are delivered: ``phone`` (in log packets, late) or ``ideal``
    #: (each subframe as it happens); emulator/DIAG_FEED.md, "Feed timing".
    feed_timing: str = "phone"
    #: Capture the server's device into ``server.pcap`` (``replay/capture.py``) for the run.
    capture_server: bool = False
    #: The cell's RRC/DRX model (``cell.rrc``): a policy name of ``emulator/policies.json``
    #: (``lte``, ``umts``, ``off``) or ``{"kind": NAME, <its parameters>}``; None: the emulator's
    #: default (``lte``).
    rrc: str | dict[str, Any] | None = None
    #: The link-layer stall process (``cell.stall``), the same form (``off``, ``poisson``); None:
    #: the emulator's default (``off``).
    stall: str | dict[str, Any] | None = None
    #: Wait this long before each load, the emulator running and nothing sent, so the UE's radio
    #: demotes as between the SPDY paper's page views (60 s apart), s. In the load's
    #: ``overhead_ms`` as ``idle_before``; outside its timing-integrity span.
    idle_before_s: float = 0.0
    #: One browser for all the run's loads (each in a new tab, the cache still off), so the
    #: connections an earlier load opened carry the next one, idle in between as a user's
    #: browser keeps them (the SPDY paper's persistent connection). Browser loader, one scheme.
    keep_connections: bool = False
    #: Server sysctls over the schemes' common ones (``clawbed.claw.server.sysctls``), e.g. the
    #: SPDY paper's servers' ``net.ipv4.tcp_slow_start_after_idle = 1``; set for each load.
    server_sysctls: dict[str, str] = field(default_factory=dict)
    #: Both ends' TCP as a kernel era had it (``clawbed/tcpstack.py``, docs/tcp-stacks.md): the
    #: server's era goes under ``server_sysctls``; ``current``: this kernel as it is.
    server_stack: str = "current"
    ue_stack: str = "current"
    #: The UE's sysctls over its defaults and its era's (``tcpstack.UE_SYSCTLS``), and its TUN's
    #: offloads (``{"gro": "off"}``).
    ue_sysctls: dict[str, str] = field(default_factory=dict)
    ue_offloads: dict[str, str] = field(default_factory=dict)
    #: Run the emulator's clock and writer on a CPU of their own and the run's other processes
    #: on the rest (``replay/cpus.py``: why, and what it costs): True with two CPUs or more,
    #: None (auto) with :data:`cpus.AUTO_MIN_CPUS` or more, False never.
    reserve_emulator_cpu: bool | None = None
    #: The cell thread pinned to the last CPU and the loader (the browser) kept off it, the
    #: rest anywhere (``replay/cpus.py``, :class:`cpus.LoaderSplit`); with a reservation, the
    #: reservation's placement holds instead.
    loader_off_cell_cpu: bool = False
    #: nginx compresses text responses on the fly (gzip; off: the bytes on the wire are the files').
    gzip: bool = False
    #: HTTP/1.1 connections per host the loader opens (Chromium's are fixed at 6).
    h1_connections_per_host: int = 6
    #: Which loads count as late (``lateness.LATE_RULES``: ``evidence``, a bound on the stall
    #: and the worst slip; ``strict``, anything beyond 1 ms); docs/timing.md.
    late_rule: str = DEFAULT_LATE_RULE
    #: Record the scheduler's events during each load in a tracefs instance of the run's own
    #: and attribute each late subframe to who ran instead of the cell thread
    #: (``replay/schedtrace.py``): ``sched.json`` per load, ``sched-causes.json`` per run.
    trace_sched: bool = False

    def check(self) -> None:
        """Refuse a bad setting before anything is created; each error names its flag."""
        if not self.trace.is_file():
            raise InputError(f"--trace {self.trace}: no such file")
        if not self.schemes:
            raise InputError("--schemes: give at least one scheme")
        for name in self.schemes:
            try:
                get_scheme(name)
            except InputError as e:
                raise InputError(f"--schemes: {e}") from None
        if len(set(self.schemes)) != len(self.schemes):
            raise InputError(f"--schemes {','.join(self.schemes)}: a scheme is listed twice")
        if self.runs < 1:
            raise InputError(f"--runs {self.runs}: must be at least 1")
        if self.loader not in LOADERS:
            raise InputError(f"--loader {self.loader!r}: one of {', '.join(LOADERS)}")
        if self.http_version not in HTTP_VERSIONS:
            raise InputError(f"--http {self.http_version!r}: one of {', '.join(HTTP_VERSIONS)}")
        if self.core_rtt_ms is not None and not 0 <= self.core_rtt_ms <= 10_000:
            raise InputError(f"--core-rtt-ms {self.core_rtt_ms}: must be 0..10000")
        # The shared settings: one check, whichever door they came in by (replay/settings.py).
        settings.check_all(self.settings(), as_flags=True)
        if self.wireline_rate is not None:
            try:
                parse_rate_bps(self.wireline_rate)
                Shaping(self.wireline_rate)  # and what the wired bottleneck can shape
            except ValueError as e:
                raise InputError(f"--wireline-rate: {e}") from None
        try:
            self.impairment()
        except ValueError as e:
            flag = {"delay_ms": "--wired-delay-ms", "jitter_ms": "--wired-jitter-ms", "loss_pct": "--wired-loss",
                    "reorder_pct": "--wired-reorder"}
            message = str(e)
            for field_name, option in flag.items():
                message = message.replace(f"Impairment.{field_name}", option).replace(f"give {field_name}",
                                                                                      f"give {option}")
            raise InputError(message) from None
        if not 0 <= self.idle_before_s <= MAX_IDLE_BEFORE_S:
            raise InputError(f"--idle-before-s {self.idle_before_s}: must be 0..{MAX_IDLE_BEFORE_S:g}")
        if self.loader == "browser" and self.h1_connections_per_host != CHROMIUM_HTTP1_CONNECTIONS:
            # Refused rather than ignored: the run would claim a setting Chromium never took.
            raise InputError(f"--h1-connections-per-host {self.h1_connections_per_host}: the browser loader cannot "
                             f"set it: Chromium opens up to {CHROMIUM_HTTP1_CONNECTIONS} HTTP/1.1 "
                             f"connections per host and no switch of it changes that; use --loader h2")
        if self.gzip and self.page.startswith(mahimahi.PREFIX):
            raise InputError(f"--gzip: the page {self.page} is a recorded site, served with its recorded bodies and "
                             f"encodings; compressing on the fly does not apply to it")
        if self.keep_connections and self.loader != "browser":
            raise InputError(f"--keep-connections: only the browser loader keeps connections, not {self.loader!r}")
        if self.keep_connections and len(self.schemes) > 1:
            raise InputError(f"--keep-connections: give one scheme, not {','.join(self.schemes)}: a connection "
                             f"one scheme's load opened would carry the next scheme's load with its own "
                             f"congestion control")
        if self.reserve_emulator_cpu and len(cpus.allowed_cpus()) < 2:
            raise InputError(f"--reserve-cpu: needs two CPUs, and this process may run on "
                             f"{len(cpus.allowed_cpus())} ({sorted(cpus.allowed_cpus())})")
        if self.late_rule not in LATE_RULES:
            raise InputError(f"--late-rule {self.late_rule!r}: one of {', '.join(LATE_RULES)}")
        if not 0 <= self.inject_delay_ms <= 10_000:
            raise InputError(f"--inject-delay-ms {self.inject_delay_ms}: must be 0..10000")
        if self.max_late_reruns < 0:
            raise InputError(f"--max-late-reruns {self.max_late_reruns}: must be >= 0")
        if self.load_timeout_s <= 0:
            raise InputError(f"--load-timeout-s {self.load_timeout_s}: must be positive")
        if self.name is not None:
            check_name(self.name)
        for cross in self.cross_traffic:
            cross.check()
        if self.cross_traffic and self.wireline_rate is None:
            raise InputError("--cross-traffic shares the wireline bottleneck: give --wireline-rate too")
        for other in self.other_ues:
            other.check()
            if other.kind == "page":
                try:
                    pages.get_page(other.page)
                except InputError as e:
                    raise InputError(f"--other-ues: {e}") from None
        if len(self.other_ues) > MAX_OTHER_UES:
            raise InputError(f"--other-ues {len(self.other_ues)}: at most {MAX_OTHER_UES} (the cell holds "
                             f"{MAX_OTHER_UES + 1} UEs)")

    def impairment(self) -> Impairment | None:
        """netem's share of the wired link, or None when nothing is asked of it."""
        impairment = Impairment(self.wired_delay_ms, self.wired_jitter_ms, self.wired_loss_pct,
                                self.wired_reorder_pct)
        return impairment if impairment.active else None

    def settings(self) -> dict[str, Any]:
        """The shared settings (replay/settings.py) as this config has them."""
        return {name: getattr(self, name) for name in settings.SETTINGS if hasattr(self, name)}

    def plan(self) -> list[tuple[int, str]]:
        """(round, scheme) of every load, schemes interleaved: A B C A B C …"""
        return [(r, s) for r in range(self.runs) for s in self.schemes]

    def round_trace_ms(self, round_: int, trace_duration_ms: int) -> int:
        """The trace time every load of round ``round_`` starts at, ms: the rounds spread
        evenly over the trace, so the repetitions sample its conditions and the schemes of
        one round meet the same ones."""
        return round_ * (trace_duration_ms // self.runs)


def _emulator_fields(config: ReplayConfig, core_rtt_ms: float | None) -> dict[str, Any]:
    """The emulator's config keys for ``config`` (beyond the topology's), with the core RTT
    the run uses (``config.core_rtt_ms``, or more when a wired delay moved into it)."""
    # Unset settings are left to the emulator's defaults (what runs before they existed ran).
    fields, _ = settings.emulator_fields(config.settings())
    fields["seed"] = config.seed
    if core_rtt_ms is None and config.inject_delay_ms > 0:
        core_rtt_ms = Delays().core_down_ms + Delays().core_up_ms
    if core_rtt_ms is not None:
        half = core_rtt_ms / 2
        fields["delays"] = {**fields.get("delays", {}), "core_down_ms": half + config.inject_delay_ms,
                            "core_up_ms": half, "ignore_trace_core_delay": True}
    return fields


class DiagTail:
    """Reads the emulator's diag file of one UE as it grows, keeping the lines of a time span."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def take(self, t0_unix_s: float, t1_unix_s: float) -> list[bytes]:
        """The messages stamped in [t0, t1]; waits (up to :data:`FILES_CATCH_UP_S`) for the
        file to reach t1. Lines before t0 are skipped for good; later ones stay for the next call."""
        kept: list[bytes] = []
        deadline = time.monotonic() + FILES_CATCH_UP_S
        while True:
            last_t = self._read_into(kept, t0_unix_s, t1_unix_s)
            if last_t >= t1_unix_s or time.monotonic() > deadline:
                return kept
            time.sleep(FILES_POLL_S)

    def _read_into(self, kept: list[bytes], t0: float, t1: float) -> float:
        """Append the new complete lines within [t0, t1] to ``kept``; the last timestamp read."""
        last_t = -math.inf
        try:
            f = self.path.open("rb")
        except OSError:
            return last_t
        with f:
            f.seek(self._offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # being written: read it whole next time
                t = float(json.loads(line)["timestamp"])
                if t > t1:
                    return t  # leave it (and what follows) for the next load
                self._offset += len(line)
                last_t = t
                if t >= t0:
                    kept.append(line)
        return last_t


def _truth_rows(truth_path: Path, origin_unix_s: float, t0: float, t1: float,
                flush: Callable[[], None] | None = None) -> list[list[Any]]:
    """Ground-truth rows (UE 0) within [t0, t1] Unix s, waiting for the chunk that covers t1;
    ``flush`` asks the emulator to write what it holds (:meth:`Emulator.flush_records`)."""
    deadline = time.monotonic() + FILES_CATCH_UP_S
    asked = -math.inf
    while True:
        try:
            truth = read_truth(truth_path, _TRUTH_READ)
        except (TruthFormatError, OSError):
            truth = None
        # A run younger than one truth chunk (1 s) has a file with no rows, and no columns, yet.
        covered = truth is not None and truth.rows > 0 and origin_unix_s + truth["t_ms"][-1] / 1000 >= t1
        now = time.monotonic()
        if covered or now > deadline:
            break
        if flush is not None and now - asked >= FLUSH_AGAIN_S:
            flush()
            asked = now
        time.sleep(FILES_POLL_S)
    if truth is None or truth.rows == 0:
        return []
    t_unix = origin_unix_s + truth["t_ms"].astype(np.float64) / 1000.0
    keep = (t_unix >= t0) & (t_unix <= t1)
    # Microseconds, as the TCP samples: rounding to the ms could move a row outside [t0, t1].
    columns = [np.round(t_unix[keep], 6)]
    columns += [truth[name][keep] for name in CELL_TRUTH_COLUMNS]
    columns += [truth.ue(0, name)[keep] for name in UE_TRUTH_COLUMNS]
    for name in RADIO_TRUTH_COLUMNS:
        try:
            columns.append(truth.ue(0, name)[keep])
        except KeyError:
            columns.append(np.full(int(keep.sum()), "", dtype=object))
    for name in EVENT_TRUTH_COLUMNS:
        try:
            columns.append(truth[_EVENT_TRUTH_SOURCES[name]][keep])
        except KeyError:
            columns.append(np.full(int(keep.sum()), "", dtype=object))
    return [list(row) for row in zip(*(c.tolist() for c in columns))]


def _tcp_counters(pid: int | None) -> dict[str, int]:
    """The TCP counters of the namespace of process ``pid`` (``TcpExtTCPSpuriousRTOs``,
    ``TcpRetransSegs``, … as nstat names them), from its /proc/<pid>/net files; empty when
    they cannot be read (the counters are evidence, never a reason to fail a load)."""
    counters: dict[str, int] = {}
    if pid is None:
        return counters
    for name in ("netstat", "snmp"):
        try:
            lines = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()
        except OSError:
            continue
        # Pairs of lines: "TcpExt: Name1 Name2 …" then "TcpExt: 1 2 …".
        for head, values in zip(lines[::2], lines[1::2]):
            proto, _, keys = head.partition(":")
            if proto not in ("Tcp", "TcpExt"):
                continue
            for key, value in zip(keys.split(), values.partition(":")[2].split()):
                try:
                    counters[proto + key] = int(value)
                except ValueError:
                    continue
    return counters


def _write_counter_deltas(path: Path, before: dict[str, int], after: dict[str, int]) -> None:
    """The counters that changed over the load (after − before) as ``netstat.json``: counted for
    the whole server namespace, so with background traffic served from it they include its."""
    deltas = {k: after[k] - before[k] for k in sorted(after) if k in before and after[k] != before[k]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(deltas, indent=1) + "\n")


def _slice_estimates(log_path: Path, out: Path, t0: float, t1: float) -> int:
    """Copy the client's estimate rows stamped within [t0, t1] into ``out``; return how many."""
    columns = read_csv(log_path)
    if not columns:
        return 0
    names = list(columns)
    unix = [float(v) if v else math.nan for v in columns["unix_s"]]
    rows = [[columns[n][i] for n in names] for i, t in enumerate(unix) if t0 <= t <= t1]
    return write_csv(out, names, rows)


@dataclass
class ReplayEvent:
    """What :func:`run_replay` reports to its caller as it goes (for a progress display)."""

    kind: str  # "ready" (cell and web server up), "load-start", "load-done", "warning", "note"
    total_loads: int
    record: LoadRecord | None = None
    load: int | None = None
    scheme: str | None = None
    message: str | None = None  # a warning's text


class Replay:
    """A replay of ``config`` into a new run directory (``config.output_root/<name>``)."""

    def __init__(self, config: ReplayConfig, on_event: Callable[[ReplayEvent], None] | None = None) -> None:
        config.check()
        self.config = config
        self.on_event = on_event or (lambda event: None)
        #: What --trace named, when it was imported on the fly (a phone log, a Mahimahi trace).
        self.trace_source: Path | None = None
        if needs_import(config.trace):
            self.trace_source = config.trace
            config.trace = as_trace(config.trace, note=lambda m: self.on_event(ReplayEvent("note", 0, message=m)))
        # Bad page names fail here, before anything is created.
        self.page = pages.get_page(config.page, config.seed)
        self.trace = read_trace(config.trace)
        self._warn_unfaithful()
        self.name = config.name or default_name()
        self.run_id = new_run_id()
        self.run_dir = RunDir(config.output_root / self.name)
        self.records: list[LoadRecord] = []
        #: The background flows on the loads' UE (none without ``flows``).
        self.flows = FlowSet([ue_flow_from(f) for f in config.flows], config.seed)
        #: The emulator's PID once it runs (a test stalls it with SIGSTOP to see the load flagged).
        self.emulator_pid: int | None = None
        #: Loads run again because the emulator fell behind during them.
        self.late_reruns = 0
        #: The run's loader process, once the web server is up.
        self._loader: loaders.LoaderWorker | None = None
        #: A process in the server's namespace (nginx), whose /proc/<pid>/net has its TCP counters.
        self._server_pid: int | None = None
        #: Each kept connection's retransmissions at the end of the last load (records.load_retransmits).
        self._flow_retrans: dict[str, int] = {}
        #: The run's namespaces and TUNs by role, once made (the manifest's ``made``).
        self._roles: dict[str, dict[str, str]] = {}
        #: The CPUs the loader's processes start on (``loader_off_cell_cpu``); None: any.
        self._loader_cpus: tuple[int, ...] | None = None

    def _warn_unfaithful(self) -> None:
        """A setting the trace makes unfaithful: a Mahimahi import encodes lost capacity as other
        users' RBs, which a closed-loop scheduler would hand back to the UE."""
        generator = str(self.trace.metadata.get("provenance", {}).get("generator", ""))
        scheduler = self.config.scheduler
        name = scheduler if isinstance(scheduler, str) else scheduler.get("kind")
        if generator.endswith("--from mahimahi") and name == "proportional-fair":
            self.on_event(ReplayEvent("warning", 0, message=(
                f"{self.config.trace.name} is a Mahimahi import, faithful only under an open-loop scheduler: "
                f"proportional-fair may give the UE the capacity the recording lost; use --scheduler "
                f"background-first")))

    def run(self) -> list[LoadRecord]:
        """Run every load; return their records (also in ``results.jsonl``). On Ctrl-C or
        SIGTERM, everything is torn down, the manifest says ``interrupted`` and
        :class:`KeyboardInterrupt` propagates."""
        cfg = self.config
        started = time.time()
        # Whether this machine can hold the 1 ms clock, as `clawbed doctor` judges it, sampled
        # before this run starts anything of its own.
        verdict = doctor.judge(doctor.collect(sample_s=DOCTOR_SAMPLE_S))
        warning = doctor.run_warning(verdict)
        if warning:
            self.on_event(ReplayEvent("warning", 0, message=warning))
        self.run_dir.write_manifest(
            status="running", name=self.name, run_id=self.run_id, started_unix_s=started,
            config={**asdict(cfg), "trace": str(cfg.trace.resolve()), "output_root": str(cfg.output_root)},
            trace={"path": str(cfg.trace.resolve()), "sha256": sha256_file(cfg.trace), **self.trace.metadata,
                   **({"imported_from": str(self.trace_source.resolve()),
                       "imported_from_sha256": sha256_file(self.trace_source)} if self.trace_source else {})},
            seed=cfg.seed, versions=versions(BINARY),
            doctor=verdict.summary(),
            host=host_facts(), plan=[{"load": i, "round": r, "scheme": s} for i, (r, s) in enumerate(cfg.plan())])
        status = "failed"
        try:
            with Resources(self.run_id, self.run_dir.ledger_path) as res:
                self._run_in(res)
            status = "complete"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            ok = sum(1 for r in self.records if r.ok)
            self._record_made()
            self.run_dir.write_manifest(status=status, finished_unix_s=time.time(),
                                        duration_s=round(time.time() - started, 3),
                                        loads_done=len(self.records), loads_ok=ok)
        return self.records

    # -- set-up -------------------------------------------------------------------------------

    def _run_in(self, res: Resources) -> None:
        cfg = self.config
        cpu_plan = cpus.plan_cpus(cpus.allowed_cpus(), cfg.reserve_emulator_cpu)
        if cpu_plan is not None:
            # First, so everything the run starts inherits the set, and last to be undone.
            res.enter_context(cpus.ProcessConfined(cpu_plan.others))
        split = None if cpu_plan is not None else cpus.plan_loader_split(cpus.allowed_cpus(), cfg.loader_off_cell_cpu)
        #: Where the loader's processes go (the browsers inherit it): None, anywhere.
        self._loader_cpus = split.loader if split is not None else None
        self.run_dir.write_manifest(cpus=cpu_plan.describe() if cpu_plan else split.describe() if split else None)
        topo = Topology(res, n_ues=1 + len(cfg.other_ues))
        ue = topo.ues[0]
        server_ns, server_device, server_address = topo.core.ns, topo.core.tun, topo.server_address
        impairment, core_rtt_ms = self._wired_link(topo)
        if cfg.inject_delay_ms > 0 and core_rtt_ms is None and self.trace.get("core_delay_ms") is not None:
            raise InputError(f"--inject-delay-ms adds to the emulator's core delay, but the trace {cfg.trace} sets "
                             f"that per subframe: give --core-rtt-ms as well")
        if cfg.wireline_rate is not None or impairment is not None:
            # The server moves to the wired side: a Mininet host behind the gateway, whose
            # link to the core router is the TBF-shaped bottleneck (and netem's impairment).
            server = topo.add_server(Shaping(cfg.wireline_rate) if cfg.wireline_rate else None,
                                     impairment=impairment)
            server_ns, server_device, server_address = server.ns, server.device, server.address
        ue_rmem = rmem.resolve(cfg.ue_rmem)
        if ue_rmem is not None:  # a phone's cap (and its tcp_moderate_rcvbuf)
            ue_rmem.apply(ue.ns)
        else:
            ue.ns.sysctl("net.ipv4.tcp_rmem", " ".join(str(v) for v in UE_TCP_RMEM_BYTES))
        self.run_dir.write_manifest(ue_tcp={"rmem": ue_rmem.describe() if ue_rmem else None, **rmem.read_back(ue.ns)})
        ue_settings: dict[str, Any] = {"trace": cfg.trace, **settings.emulator_fields(cfg.settings())[1]}
        emu_fields = _emulator_fields(cfg, core_rtt_ms)
        if cpu_plan is not None:
            emu_fields["affinity"] = cpu_plan.emulator_affinity()
        elif split is not None:
            emu_fields["affinity"] = split.emulator_affinity()
        # Only the replay's UE has its feed written to files: the other UEs' clients read
        # theirs live, their ground truth is in truth.cbcol, and 44 files at ~1 MB/s each
        # would take the emulator's diag thread a whole core (Fig 19's cell).
        per_ue = [ue_settings] + [{**ue_settings, "diag_file": False}] * len(cfg.other_ues)
        emu_config = EmulatorConfig.for_topology(topo, output_dir=self.run_dir.emulator_dir, ue=per_ue,
                                                 **emu_fields)
        emu = Emulator(res, emu_config).start()
        self.emulator_pid = emu.pid
        self._set_stacks(res, topo.ues, server_ns, server_device)  # the TUNs and their routes exist now
        ue_drwa = None
        if cfg.drwa or self.flows.wants_drwa:  # on the UE's TUN, which the emulator made; removed with the run
            # One controller for the UE: the page's connections with --drwa, and the flows that ask.
            ue_drwa = drwa.Drwa(netns=ue.ns.name, dev=ue.tun, run_id=self.run_id, run_dir=self.run_dir.path,
                                ledger=res.ledger, log_path=self.run_dir.path / "drwa.csv",
                                select=self.flows.drwa_select(page=cfg.drwa))
            res.callback(ue_drwa.close)
        origin_unix_s = int(emu.ready["origin_unix_ns"]) / 1e9
        timing = LoadTiming(emu.truth_path, emu.packets_path, origin_unix_s)
        sched: schedtrace.SchedTrace | None = None
        attribution: schedtrace.LoadAttribution | None = None
        if cfg.trace_sched:  # a tracefs instance of the run's own, removed with it
            threads = schedtrace.emulator_threads(emu.pid)
            cell = schedtrace.cell_tid(threads, emu.pid)
            sched = schedtrace.SchedTrace(res, cell, peers={t: c for t, c in threads.items() if t != cell}).open()
            attribution = schedtrace.LoadAttribution(sched, origin_unix_s)
            self.run_dir.write_manifest(sched_trace={"instance": str(sched.path), "cell_tid": sched.cell_tid,
                                                     "buffer_kb": sched.buffer_kb})

        site = self.run_dir.path / "site"
        self.page.materialize(site)
        web = webserver.WebServer(res, server_ns, site, str(server_address), cfg.http_version, gzip=cfg.gzip)
        url = web.url(self.page.root.path)
        self._server_pid = web.proc.pid
        self.access = web.access  # the loaders resolve the page's host names and trust its certificate with it
        if cfg.capture_server:  # before the first connection (its SYN carries the UE's MSS)
            capture = ServerCapture(res, server_ns, server_device, self.run_dir.path / "server.pcap")
            res.callback(lambda: self.run_dir.write_manifest(server_capture=capture.stop()))
        sampler = TcpSampler(server_ns.name, web.port, period_s=cfg.sample_period_s, more_ports=web.ports).open()
        res.callback(sampler.close)
        # One loader process answers the run's loads (each still has a browser or client of
        # its own, unless connections are kept): started now, its start-up is no load's.
        self._loader = loaders.LoaderWorker(res, ue.ns, cfg.loader, http1=cfg.http_version == "1.1",
                                            access=self.access, log_dir=self.run_dir.path,
                                            loader_args=(["--keep-connections"] if cfg.keep_connections else [])
                                            + ["--http1-connections", str(cfg.h1_connections_per_host)])
        res.callback(self._loader.close)
        with cpus.ChildrenPlaced(self._loader_cpus):
            self._loader.start()
        diag = DiagTail(emu.diag_path(0))
        endpoint = UeEndpoint(ue.ns, str(ue.address), ue.index, ue.tun, emu.diag_port(0))
        client_args = ["--n-rb", str(self.trace.n_rb), "--n-antennas", str(self.trace.n_antennas),
                       "--client-impl", cfg.claw_client]
        self.run_dir.write_manifest(url=url, emulator={"ready": emu.ready, "config": emu_config.to_json()})
        activities = self._start_background(res, topo, SchemeSettings(emu.diag_port, client_args,
                                                                     cfg.feedback_period_ms))
        plan = cfg.plan()
        self._roles = {"namespaces": {**{f"ue{u.index}": u.ns.name for u in topo.ues}, "core": topo.core.name,
                                      "server": server_ns.name},
                       "tuns": {**{f"ue{u.index}": u.tun for u in topo.ues}, "core": topo.core.tun}}
        self.on_event(ReplayEvent("ready", len(plan), message=describe_made(self._record_made(), self.run_dir.path)))

        for index, (round_, scheme_name) in enumerate(plan):
            emu.check_alive()
            self.on_event(ReplayEvent("load-start", len(plan), load=index, scheme=scheme_name))
            trace_ms = cfg.round_trace_ms(round_, self.trace.duration_ms) if cfg.align_trace else None
            late_reruns = 0
            while True:
                began = time.monotonic()
                load_dir = self.run_dir.load_dir(index, scheme_name)
                ctx = SchemeContext(resources=res, run_dir=load_dir, server_ns=server_ns,
                                    server_address=str(server_address), server_device=server_device,
                                    ues=[endpoint], feedback_period_ms=cfg.feedback_period_ms,
                                    client_args=client_args, sysctls=server_overrides(cfg.server_stack, cfg.server_sysctls))
                record, client_log = self._one_load(index, round_, scheme_name, ctx, url, ue, sampler, activities,
                                                    trace_ms, emu.seek, sched)
                mark = time.monotonic()
                try:
                    self._keep_series(record, load_dir, sampler.rows, diag, emu.truth_path, origin_unix_s,
                                      client_log, emu.flush_records)
                except Exception as e:  # noqa: BLE001 - the load's result outlives a failure of its series
                    record.series_error = f"{type(e).__name__}: {e}"
                    self.on_event(ReplayEvent("warning", len(plan), record=record, load=index, scheme=scheme_name,
                                              message=f"load {index}: its time series were not all kept: "
                                                      f"{record.series_error}"))
                flow_rows = self._keep_flows(record, load_dir)
                series_done = time.monotonic()
                lateness = self._judge_timing(record, timing)
                judged = time.monotonic()
                if sched is not None and attribution is not None:
                    self._attribute_lateness(record, load_dir, lateness, sched, attribution)
                    record.overhead_ms["sched_trace"] = round((time.monotonic() - judged) * 1000, 1)
                done = time.monotonic()
                record.overhead_ms.update(series=round((series_done - mark) * 1000, 1),
                                          timing=round((judged - series_done) * 1000, 1),
                                          total=round((done - began) * 1000 - (record.plt_ms or 0.0), 1))
                record.late_reruns = late_reruns
                action = late_action(record.timing_ok, rerun_late=cfg.rerun_late, reruns=late_reruns,
                                     max_reruns=cfg.max_late_reruns, keep_connections=cfg.keep_connections)
                if action is LateAction.FLAG_KEPT_CONNECTIONS:
                    self.on_event(ReplayEvent("warning", len(plan), record=record, load=index, scheme=scheme_name,
                                              message=f"load {index} ({scheme_name}): {describe_lateness(record)}; "
                                                      f"kept flagged, not loaded again: its connections are "
                                                      f"kept, so a rerun would be a warm load in its place"))
                if action is not LateAction.RERUN:
                    break
                # The emulator fell behind during this load: keep it aside and load again.
                late_reruns += 1
                self.late_reruns += 1
                aside = load_dir.with_name(f"{load_dir.name}.late{late_reruns}")
                load_dir.rename(aside)
                record.load_dir = str(aside.relative_to(self.run_dir.path))
                self.run_dir.append_late(record)
                self.on_event(ReplayEvent("warning", len(plan), record=record, load=index, scheme=scheme_name,
                                          message=f"load {index} ({scheme_name}): {describe_lateness(record)}; "
                                                  f"loading it again ({late_reruns} of at most "
                                                  f"{cfg.max_late_reruns})"))
            self.run_dir.append_result(record)
            self._record_made()  # the load's own processes (scheme agents) are in the ledger by now
            self.flows.keep(index, flow_rows)
            self.records.append(record)
            self.on_event(ReplayEvent("load-done", len(plan), record=record, load=index, scheme=scheme_name))
        self._stop_background(activities)
        if attribution is not None:
            for line in attribution.finish(self.run_dir.path):
                self.on_event(ReplayEvent("note", len(plan), message=line))
        if self.flows.flows:
            self.flows.write_run(self.run_dir.path / "flows.csv")
            self.run_dir.write_manifest(flows_summary=self.flows.summary())
        if topo.wired is not None:
            # The wired side with its bottleneck's counters over the whole run.
            self.run_dir.write_manifest(wired=topo.wired.describe())
        counters = emu.stop()
        if ue_drwa is not None:
            self.run_dir.write_manifest(drwa=ue_drwa.describe())
        self.run_dir.write_manifest(emulator_counters=counters, late_reruns=self.late_reruns,
                                    loads_timing_flagged=sum(1 for r in self.records if r.timing_ok is False))
        # Each load kept its own slice; the whole-run feed is kept too, compressed (and its
        # copy in the phone's format, diag-ue0.mi2log, when the emulator wrote one).
        compress_in_place(emu.diag_path(0))
        mi2log = emu.diag_path(0).with_suffix(".mi2log")
        if mi2log.is_file():
            compress_in_place(mi2log)

    def _record_made(self) -> dict[str, Any]:
        """Write what the run made into the manifest's ``made`` (namespaces and TUNs by role, every
        namespace, link and process of the ledger), for an outside script and `clawbed exec`."""
        made = resources_made(self.run_dir.ledger_path, self.run_id, self._roles)
        self.run_dir.write_manifest(made=made)
        return made

    def _set_stacks(self, res: Resources, ues: list[Any], server_ns: Any, server_device: str) -> None:
        """Both ends' TCP stacks (clawbed/tcpstack.py): every UE's sysctls, routes and offloads
        (the other UEs' too, so none keeps the host's congestion control), the server's routes,
        Cubic's kernel-wide parameters; said on the terminal and in the manifest (``tcp_stacks``:
        the server's and the loads' UE's in full), undone with the run's resources."""
        cfg = self.config
        applied = set_both_ends(server_ns, server_device, [(u.ns, u.tun) for u in ues], server_stack=cfg.server_stack,
                                ue_stack=cfg.ue_stack, ue_sysctls=cfg.ue_sysctls, ue_offloads=cfg.ue_offloads,
                                server_sysctls=cfg.server_sysctls)
        for one in applied:
            res.callback(one.restore)
        server, ue0, others = applied[0], applied[1], applied[2:]
        self.run_dir.write_manifest(tcp_stacks={"server": server.describe(), "ue": ue0.describe(),
                                                "other_ues_same": len(others)})
        for line in (server.summary(), ue0.summary() + (f" (and on {len(others)} other UEs)" if others else "")):
            self.on_event(ReplayEvent("note", len(cfg.plan()), message=line))

    def _wired_link(self, topo: Topology) -> tuple[Impairment | None, float | None]:
        """Probe netem once in the run's core namespace and decide how the wired link's
        impairment is given: (netem's impairment or None, the core RTT for the emulator).
        Without netem a delay moves into the emulator's core delay (said on the terminal and
        in the manifest); jitter, loss and reordering, which only netem gives, are refused."""
        cfg = self.config
        probe = probe_netem(topo.core.ns)
        wanted = cfg.impairment()
        wired: dict[str, Any] = {"netem": probe.describe(), "impairment": wanted.describe() if wanted else None,
                                 "via": "netem" if wanted and probe.available else None}
        core_rtt_ms = cfg.core_rtt_ms
        if wanted is not None and not probe.available:
            if wanted.needs_netem_only:
                options = {"jitter_ms": "--wired-jitter-ms", "loss_pct": "--wired-loss",
                           "reorder_pct": "--wired-reorder"}
                raise InputError(f"{', '.join(options[f] for f in wanted.needs_netem_only)}: only netem gives "
                                 f"these and this kernel has no netem ({probe.detail}); run on a kernel with "
                                 f"sch_netem (e.g. the Vagrant VM) or leave them out")
            if core_rtt_ms is None and self.trace.get("core_delay_ms") is not None:
                raise InputError(f"--wired-delay-ms without netem goes into the emulator's core delay, but the "
                                 f"trace {cfg.trace} sets that per subframe: give --core-rtt-ms as well")
            base_ms = core_rtt_ms if core_rtt_ms is not None else \
                Delays().core_down_ms + Delays().core_up_ms
            core_rtt_ms = base_ms + 2 * wanted.delay_ms
            wired["via"] = "emulator core delay"
            wired["core_rtt_ms"] = core_rtt_ms
            self.on_event(ReplayEvent("warning", len(cfg.plan()), message=(
                f"this kernel has no netem ({probe.detail}): the wired delay of {wanted.delay_ms:g} ms each way "
                f"is added to the emulator's core delay (core RTT {core_rtt_ms:g} ms)")))
            wanted = None
        self.run_dir.write_manifest(wired_link=wired)
        return wanted, core_rtt_ms

    def _start_background(self, res: Resources, topo: Topology, settings: SchemeSettings) -> list[Background]:
        """Start the configured cross traffic and other UEs (their processes are on ``res``, so
        Ctrl-C stops them; other UEs on claw/cqic get their own instance, ``claw``), let them
        warm up, and record what runs in the manifest."""
        cfg = self.config
        activities = build_activities(cfg.cross_traffic, cfg.other_ues, cfg.seed, settings,
                                      page_bytes=lambda name, seed: pages.get_page(name, seed).total_bytes)
        activities += self.flows.flows  # the flows on the loads' own UE (after DRWA, which reads their SYNs)
        for activity in activities:
            activity.start(res, topo)
        if activities:
            time.sleep(BACKGROUND_WARMUP_S)
        self.run_dir.write_manifest(background=[a.describe() for a in activities])
        return activities

    def _stop_background(self, activities: list[Background]) -> None:
        """Stop the background traffic (before the emulator, whose TUNs its counters read) and
        record each activity's total bytes in the manifest."""
        totals = [{**a.describe(), "bytes_delivered": a.bytes_delivered()} for a in activities]
        for activity in reversed(activities):  # last started, first stopped: each restores what it found
            activity.stop()
        if activities:
            self.run_dir.write_manifest(background=totals)

    # -- one load ------------------------------------------------------------------------------

    def _one_load(self, index: int, round_: int, scheme_name: str, ctx: SchemeContext, url: str,
                  ue: Any, sampler: TcpSampler, activities: list[Background],
                  trace_ms: int | None, seek: Callable[[int], None],
                  sched: schedtrace.SchedTrace | None = None) -> tuple[LoadRecord, Path | None]:
        """Set the scheme up, load the page once while sampling, tear the scheme down; the
        load's record (a failure is recorded, never raised, except Ctrl-C and a dead emulator)
        and the scheme's client log, if it has one.
        With a ``trace_ms``, ``seek`` moves the emulator's traces there just before the loader
        starts (None: the trace runs on)."""
        cfg = self.config
        load_dir = ctx.run_dir
        record = LoadRecord(load=index, round=round_, scheme=scheme_name, page_bytes=self.page.total_bytes,
                            load_dir=str(load_dir.relative_to(self.run_dir.path)))
        scheme = get_scheme(scheme_name)()
        client_log = None
        phase = time.monotonic()

        def lap(name: str) -> None:
            nonlocal phase
            now = time.monotonic()
            record.overhead_ms[name] = round((now - phase) * 1000, 1)
            phase = now

        if cfg.idle_before_s > 0:
            # Nothing is sent meanwhile, so the UE's radio demotes (the RRC tail timers) as between
            # the SPDY paper's page views; before the scheme's set-up, whose client may send.
            time.sleep(cfg.idle_before_s)
            lap("idle_before")
        loader_started = None
        sched_on = False
        counters_before: dict[str, int] | None = None
        decoded_bytes = 0
        try:
            # claw/cqic register their CC as <variant>_<run id>: no other run holds that name.
            scheme.setup(ctx)
            record.cc = scheme.server_cc  # the kernel's name of it, as the TCP samples show
            scheme.start_clients(ctx)  # returns once they are ready
            client_log = scheme.client_log(ctx, ctx.ues[0])
            lap("scheme_setup")
            sampler.reset(cc_maps_dir=scheme.cc_maps_dir)
            # A kept connection is this load's; any other flow there now is an earlier load's.
            sampler.start(leave_out_present=not cfg.keep_connections)
            background_before = {a.name: a.bytes_delivered() for a in activities}
            counters_before = _tcp_counters(self._server_pid)
            lap("sampler_start")
            if trace_ms is not None:
                seek(trace_ms)
                record.trace_ms = trace_ms
            lap("seek")
            loader_started = phase
            steal_before, pressure_before = cpu_ticks(), cpu_pressure_us()
            self.on_event(ReplayEvent("loader-start", len(self.config.plan()), load=index, scheme=scheme_name))
            if sched is not None:  # the scheduler's events over the loader's span only
                sched.start()
                sched_on = True
            record.t_start_unix_s = time.time()
            assert self._loader is not None
            with cpus.ChildrenPlaced(self._loader_cpus):  # a worker started again is placed too
                result = self._loader.load(url, cfg.load_timeout_s)
            record.t_end_unix_s = time.time()
            if sched is not None:
                sched.stop()
                sched_on = False
            lap("loader")
            record.overhead_ms["loader"] = round(record.overhead_ms["loader"] - (result.plt_ms or 0.0), 1)
            record.steal_ms, record.steal_pct = steal_between(steal_before, cpu_ticks())
            record.cpu_wait_pct = pressure_between(pressure_before, cpu_pressure_us(),
                                                   record.t_end_unix_s - record.t_start_unix_s)
            # What the background got across while the page loaded: the competition it met.
            record.background_bytes = {a.name: a.bytes_delivered() - background_before[a.name] for a in activities}
            record.ok, record.error, record.plt_ms = bool(result.ok), result.error, result.plt_ms
            record.bytes_total, record.protocol = result.bytes_total, result.protocol
            decoded_bytes = result.bytes_decoded or 0
            record.n_objects, record.objects = len(result.objects), [_plain(o) for o in result.objects]
        except (ClawbedError, OSError) as e:
            if isinstance(e, EmulatorError):
                raise
            record.t_end_unix_s = record.t_end_unix_s or time.time()
            record.error = f"{type(e).__name__}: {e}"
        finally:
            if loader_started is not None and "loader" not in record.overhead_ms:
                lap("loader")  # it failed: its whole wall time
            if sched is not None and sched_on:
                sched.stop()
            sampler.stop()
            if counters_before is not None:
                _write_counter_deltas(load_dir / "netstat.json", counters_before, _tcp_counters(self._server_pid))
            try:
                scheme.teardown()
            except ClawbedError as e:
                record.ok = False
                record.error = (record.error + "; " if record.error else "") + f"teardown: {e}"
            lap("teardown")
        # Files' sizes are bodies as decoded: a gzip-serving server's arrive smaller.
        got = max(record.bytes_total or 0, decoded_bytes)
        if record.ok and record.bytes_total is not None and got < self.page.required_bytes:
            record.ok = False
            record.error = f"incomplete: {got} of {self.page.required_bytes} bytes"
        return record, client_log

    def _keep_flows(self, record: LoadRecord, load_dir: Path) -> list[dict[str, Any]]:
        """The background flows' figures over the load's span into its directory (``flows.json``,
        ``flows.csv``); a failure is a warning, never the load's."""
        if not self.flows.flows or record.t_start_unix_s is None or record.t_end_unix_s is None:
            return []
        try:
            return self.flows.write_load(load_dir, record.t_start_unix_s, record.t_end_unix_s)
        except Exception as e:  # noqa: BLE001 - the load's result outlives a failure of its flows' figures
            self.on_event(ReplayEvent("warning", len(self.config.plan()), record=record, load=record.load,
                                      scheme=record.scheme, message=f"load {record.load}: the background flows' "
                                                                    f"figures were not kept: {type(e).__name__}: {e}"))
            return []

    def _judge_timing(self, record: LoadRecord, timing: LoadTiming) -> Lateness | None:
        """The emulator's lateness over the load's span and ``timing_ok`` (nothing measured
        when the load never started)."""
        if record.t_start_unix_s is None or record.t_end_unix_s is None:
            return None
        try:
            lateness = timing.measure(record.t_start_unix_s, record.t_end_unix_s)
            judge(record, lateness, self.config.late_rule)
            return lateness
        except Exception as e:  # noqa: BLE001 - a failed measurement leaves the fields None, said so
            self.on_event(ReplayEvent("warning", len(self.config.plan()), record=record, load=record.load,
                                      scheme=record.scheme,
                                      message=f"load {record.load}: its timing was not measured: "
                                              f"{type(e).__name__}: {e}"))
            return None

    def _attribute_lateness(self, record: LoadRecord, load_dir: Path, lateness: Lateness | None,
                            sched: schedtrace.SchedTrace, attribution: schedtrace.LoadAttribution) -> None:
        """The load's scheduler trace read and its slips attributed (``sched.json``), one line
        said; a failure is a warning, never the load's."""
        try:
            events = sched.read()
            summary = attribution.load(record.load, record.scheme, load_dir, events,
                                       lateness.slips if lateness else [], schedtrace.mono_minus_unix_s())
        except Exception as e:  # noqa: BLE001 - the load's result outlives a failed attribution
            self.on_event(ReplayEvent("warning", len(self.config.plan()), record=record, load=record.load,
                                      scheme=record.scheme, message=f"load {record.load}: its scheduler trace was "
                                                                    f"not attributed: {type(e).__name__}: {e}"))
            return
        if summary["events_lost"]:
            self.on_event(ReplayEvent("warning", len(self.config.plan()), record=record, load=record.load,
                                      scheme=record.scheme, message=(
                                          f"load {record.load}: the scheduler trace lost {summary['events_lost']:,} "
                                          f"events (its buffer, {sched.buffer_kb} KiB a CPU, was full): slips "
                                          f"after that are 'not traced'")))
        line = (f"load {record.load} sched: {summary['slips']} slip(s), {summary['late_ms']:.1f} ms: "
                f"{schedtrace.one_line(summary['causes'], 2)}")
        self.on_event(ReplayEvent("note", len(self.config.plan()), message=line[:78]))

    def _keep_series(self, record: LoadRecord, load_dir: Path, rows: list[dict[str, Any]], diag: DiagTail,
                     truth_path: Path, origin_unix_s: float, client_log: Path | None,
                     flush: Callable[[], None] | None = None) -> None:
        """Write the load's TCP samples, ground truth, diag feed and CLAW estimates; fill in
        the record's flow and retransmission counts."""
        write_csv(load_dir / "tcp.csv", SAMPLE_COLUMNS, rows)
        flows: dict[str, int] = {}
        for row in rows:
            flows[row["flow"]] = row["retrans_total"]  # the flow's last sample holds its total
        record.flows = len(flows)
        # The loader's worker takes a while to start: the first sample of a flow is when the
        # page's connection opened, the origin of the report's time axes.
        record.t_first_flow_unix_s = rows[0]["t_unix_s"] if rows else None
        # A kept connection's count runs over its whole life: the load's own is what it added.
        carried = self._flow_retrans if self.config.keep_connections else {}
        record.retransmits, self._flow_retrans = load_retransmits(rows, carried)
        if record.objects:
            with (load_dir / "objects.json").open("w") as f:
                json.dump(record.objects, f, indent=1)
        t0, t1 = record.t_start_unix_s, record.t_end_unix_s
        if t0 is None or t1 is None:
            return
        write_csv(load_dir / "truth.csv", (*TRUTH_CSV_COLUMNS, *RADIO_TRUTH_COLUMNS, *EVENT_TRUTH_COLUMNS),
                  _truth_rows(truth_path, origin_unix_s, t0, t1, flush))
        write_zstd_lines(load_dir / "diag.jsonl.zst", diag.take(t0, t1))
        if client_log is not None and client_log.exists():
            _slice_estimates(client_log, load_dir / "estimates.csv", t0, t1)


def describe_lateness(record: LoadRecord) -> str:
    """One line on a load's timing integrity, e.g. for a flagged load."""
    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f} ms"
    rule = LATE_RULES.get(record.late_rule or DEFAULT_LATE_RULE, LATE_RULES[DEFAULT_LATE_RULE])
    verdict = {True: "on time", False: f"the emulator fell behind ({rule.name} rule: {rule.describe()})",
               None: "timing not measured"}[record.timing_ok]
    return (f"{verdict} (subframe lateness max {ms(record.subframe_late_max_ms)}, p99.9 "
            f"{ms(record.subframe_late_p999_ms)}, stall {ms(record.subframe_stall_ms)} in "
            f"{record.subframe_slips if record.subframe_slips is not None else '–'} slip(s); delivery error max "
            f"{ms(record.delivery_err_max_ms)}, p99.9 {ms(record.delivery_err_p999_ms)}; steal "
            f"{record.steal_pct if record.steal_pct is not None else '–'} %)")


def _plain(obj: Any) -> Any:
    """A loader's object timing as plain JSON data (a dataclass, a mapping or a value)."""
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    return obj

