"""Benchmark of the emulator: forwarding rate, CPU, timing, latency, a 45-UE cell, Mahimahi mode.

``python -m clawbed.emulator.bench`` runs each measurement on real namespaces and the real
``clawbed-emu`` (``make build``), prints a table and writes ``bench-results/emulator.json``
under the repository root.

Mahimahi: when ``mm-link`` is installed (``$MM_LINK``, or on ``PATH``) the same machine
measures it beside the emulator, live (:func:`mm_link_steps`: idle CPU, CPU at 100 Mbit/s, the
bulk TCP ceiling, the 12 Mbit/s inter-arrival p99 from its own delivery log), each mm-link
step right after the emulator step it is compared with, in every repetition
(:func:`interleave`), and the table has a column for it. mm-link refuses to run as root, so a
root bench runs it as an unprivileged user (:class:`MmUser`: ``--mm-user NAME``, or one it
creates, ``cb<run id>mm``, and removes at exit), with its traces and logs in a folder of that
user's, and each run in a network namespace of the bench's own with IP forwarding on (mm-link
requires it; the host's setting is left alone), where its TUN, NAT rules and the iperf3 server
live and go. mm-link's CPU is its own processes' (the one started and the two ferries it
forks), not the command's inside it. Without mm-link, or whenever the live side fails, the
reference figures follow in a table of their own, each with where and when it was measured
(:data:`REFERENCES`; figures from another machine and another day are not a comparison), and
the output says why.

CPU is the emulator process's (per thread) from ``/proc/PID/task/*/stat``, in percent of one
core over the measured interval. The machine's load average and the CPU time the hypervisor
stole during each step are recorded with the results: on a shared machine or a VM the
figures are lower bounds of what the emulator can do.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
from rich.console import Console

from clawbed.emulator.process import BINARY, EmulatedCell
from clawbed.emulator.scenarios import constant_mahimahi_trace, constant_trace
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.emulator.truth import Direction, PacketEvent, read_packets
from clawbed.errors import ClawbedError
from clawbed.netns import Endpoint, Resources, new_run_id, resource_name
from clawbed.paths import REPO_ROOT, shared_data
from clawbed.signals import interrupt_handler
from clawbed.tables import TerminalTable

RESULTS = REPO_ROOT / "bench-results" / "emulator.json"
#: Mahimahi figures measured elsewhere, with where and when: printed (not compared) when
#: mm-link is not installed here.
REFERENCES = [
    {"what": "bulk TCP ceiling", "mm_link": "2.6 Gbit/s", "clawbed_emu": "6.5 Gbit/s",
     "where": "side by side on a fresh 2-vCPU machine (issue 14)", "when": "2026-11"},
    {"what": "12 Mbit/s saturated, delivered inter-arrival p99", "mm_link": "1.29 ms", "clawbed_emu": "1.01 ms",
     "where": "side by side on a fresh 2-vCPU machine (issue 14)", "when": "2026-11"},
    {"what": "CPU with no traffic", "mm_link": "4.75 % of a core", "clawbed_emu": "0.45 % of a core",
     "where": "side by side on a fresh 2-vCPU machine (issue 14)", "when": "2026-11"},
    {"what": "bulk TCP 3.0 Gbit/s, 270 kpps; 12 Mbit/s inter-arrival p99 1.7 ms; 8–10 % of a core at 100 Mbit/s",
     "mm_link": "(as written)", "clawbed_emu": "",
     "where": "written into this file with the emulator (commit 6c4a72f); the machine was not recorded",
     "when": "2026-11-21 or before"},
]
#: The environment variable naming the mm-link binary (else ``mm-link`` on PATH).
MM_LINK_ENV = "MM_LINK"
#: iperf3's port for the mm-link measurements (the server runs in the run's namespace, outside mm-link's).
MM_IPERF_PORT = 5299
#: A rate no measurement reaches: the emulator, not its link model, is the bottleneck.
AMPLE_RATE = "40gbit"
NO_DELAYS = {"core_down_ms": 0, "core_up_ms": 0, "air_ms": 0, "sr_period_ms": 0, "grant_delay_ms": 0}
#: Idle RTT the model gives with every configured delay 0, beyond the wait for the first
#: subframe boundary, ms: the request takes a subframe (1 ms); the reply reaches the base
#: station just after the boundary at which the request left, so it waits almost a whole
#: subframe (1 ms), then takes one (1 ms). The wait for the first boundary depends on the
#: request's phase against the subframe clock: 0.5 ms on average over uniform phases.
MODEL_IDLE_RTT_BEYOND_WAIT_MS = 3.0
IPERF_PORT = 5201
#: The binary measured (``--binary``); None: the release build.
_binary: Path | None = None
SINK_PORT = 9000
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")



def _nth_trace(i: int, keys: tuple[str, ...], run: Any) -> Any:
    """``run[i][keys[0]][keys[1]]…``: one Mahimahi trace's figure in a run, for a table's span."""
    value = run[i]
    for key in keys:
        value = value[key]
    return value

def _cell(n_ues: int, out: Path, **kwargs: Any) -> EmulatedCell:
    """An emulated cell running the binary under measurement."""
    return EmulatedCell(n_ues, out, binary=_binary, **kwargs)


def _cpu_s(stat_path: Path) -> float:
    """User + system CPU time in a ``/proc/…/stat`` file, s."""
    stat = stat_path.read_text()
    # Fields after the command name (which may hold spaces) start with the state (field 3);
    # utime and stime are fields 14 and 15.
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


class CpuMeter:
    """CPU time of process ``pid`` (user + system) between :meth:`start` and :meth:`per_thread`,
    per thread name (the emulator names its threads ``cb-io``, ``cb-diag``, …)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._wall_s = 0.0
        self._threads: dict[str, float] = {}

    def _per_thread_s(self) -> dict[str, float]:
        """CPU time so far per thread name (threads of one name summed), s."""
        totals: dict[str, float] = {}
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                name = (task / "comm").read_text().strip()
                totals[name] = totals.get(name, 0.0) + _cpu_s(task / "stat")
            except OSError:  # the thread ended meanwhile
                continue
        return totals

    def start(self) -> CpuMeter:
        self._threads, self._wall_s = self._per_thread_s(), time.monotonic()
        return self

    def per_thread(self) -> dict[str, float]:
        """Percent of one core each thread name used since :meth:`start`."""
        now = self._per_thread_s()
        wall = time.monotonic() - self._wall_s
        return {name: round(100.0 * (cpu - self._threads.get(name, 0.0)) / wall, 1) for name, cpu in sorted(now.items())}


def _iperf(cell: EmulatedCell, args: list[str], seconds: float) -> tuple[dict[str, Any], dict[str, float]]:
    """iperf3 from the core namespace to a one-off server in UE 0: (its JSON result, the
    emulator's CPU % per thread)."""
    ue = cell.topo.ues[0]
    ue.popen(["iperf3", "-s", "-1", "-B", str(ue.address), "-p", str(IPERF_PORT)], name="iperf3-server",
             log_path=cell.output_dir / "iperf3-server.log")
    time.sleep(0.3)  # the server binds
    meter = CpuMeter(cell.emulator.pid).start()
    done = cell.topo.core.run(["iperf3", "-c", str(ue.address), "-p", str(IPERF_PORT), "-t", str(seconds), "-J", *args],
                              timeout_s=seconds + 30)
    return json.loads(done.stdout), meter.per_thread()


def _percentiles_ms(values_us: np.ndarray) -> dict[str, float | None]:
    if len(values_us) == 0:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    return {"p50_ms": round(float(np.percentile(values_us, 50)) / 1000, 3),
            "p99_ms": round(float(np.percentile(values_us, 99)) / 1000, 3),
            "max_ms": round(float(np.max(values_us)) / 1000, 3)}


def _first_of_instant_us(scheduled_us: np.ndarray, error_us: np.ndarray) -> np.ndarray:
    """The delivery error of the first packet written for each due instant, µs: the
    emulator's own timing. The packets after it in a burst (the cell releases one at once
    when a retransmission completes an RLC sequence) wait for the receiving kernel to take
    the ones before, about a microsecond each, which the per-packet error includes."""
    if len(error_us) == 0:
        return error_us
    order = np.argsort(scheduled_us, kind="stable")
    ordered = scheduled_us[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return np.minimum.reduceat(error_us[order], starts)


def idle_cpu(out: Path, seconds: float) -> dict[str, Any]:
    """CPU of a one-UE emulator carrying no traffic: the subframe clock, diag feed and truth alone."""
    with _cell(1, out, ue={"rate": "10mbit"}, mode="rate") as cell:
        time.sleep(0.5)  # past start-up
        meter = CpuMeter(cell.emulator.pid).start()
        time.sleep(seconds)
        threads = meter.per_thread()
    return {"cpu_percent": round(sum(threads.values()), 1), "cpu_percent_by_thread": threads}


def tcp_max(out: Path, seconds: float, **fields: Any) -> dict[str, Any]:
    """Bulk TCP (iperf3, downlink) through an ample-rate link with no configured delay;
    ``fields`` are config keys (``tun_offload=False``: one read and one write per packet)."""
    with _cell(1, out, ue={"rate": AMPLE_RATE}, mode="rate", delays=NO_DELAYS, **fields) as cell:
        result, threads = _iperf(cell, [], seconds)
        counters = cell.stop()
    cpu = sum(threads.values())
    gbit_s = result["end"]["sum_received"]["bits_per_second"] / 1e9
    packets = counters["engine"]["ues"][0]["downlink"]["delivered"]["packets"]
    kpps = packets / seconds / 1000
    return {"gbit_s": round(gbit_s, 3), "kpps": round(kpps, 1), "cpu_percent": round(cpu, 1),
            "cpu_percent_per_gbit_s": round(cpu / gbit_s, 1) if gbit_s else None,
            "cpu_percent_per_100kpps": round(100 * cpu / kpps, 1) if kpps else None, "cpu_percent_by_thread": threads}


def _tun_tx_dropped(cell: EmulatedCell) -> int:
    """Packets the kernel dropped at the core TUN's queue (the emulator did not read them in time)."""
    core = cell.topo.core
    done = core.run(["cat", f"/sys/class/net/{core.tun}/statistics/tx_dropped"], check=False)
    return int(done.stdout.strip() or 0) if done.returncode == 0 else -1


def udp_small_max(out: Path, seconds: float) -> dict[str, Any]:
    """Unpaced UDP of 64-byte payloads (iperf3 -b 0): the packet rate the emulator forwards."""
    with _cell(1, out, ue={"rate": AMPLE_RATE}, mode="rate", delays=NO_DELAYS) as cell:
        result, threads = _iperf(cell, ["-u", "-b", "0", "-l", "64"], seconds)
        tun_dropped = _tun_tx_dropped(cell)
        counters = cell.stop()
    cpu = sum(threads.values())
    down = counters["engine"]["ues"][0]["downlink"]
    delivered = down["delivered"]["packets"]
    io = counters["io"]
    return {"kpps": round(delivered / seconds / 1000, 1), "sent_kpps": round(result["end"]["sum"]["packets"] / seconds / 1000, 1),
            "mbit_s": round(down["delivered"]["bytes"] * 8 / seconds / 1e6, 1), "cpu_percent": round(cpu, 1),
            "cpu_percent_by_thread": threads,
            "dropped_in_emulator": io["handover_full"] + io["pool_exhausted"] + down["dropped_overflow"]["packets"],
            "dropped_at_tun_queue": tun_dropped,
            "cpu_percent_per_100kpps": round(100 * cpu / (delivered / seconds / 1000), 1) if delivered else None}


def at_100mbit(out: Path, seconds: float, *, full_cell: bool = False) -> dict[str, Any]:
    """Paced 100 Mbit/s UDP (1400-byte payloads): CPU, and delivery timing error from the packet
    log. Over a 1 Gbit/s constant-rate link, or (``full_cell``) through the whole cell model —
    scheduler, HARQ with the default BLER, RLC, diag feed — on a constant 20 MHz trace at MCS 28
    with two layers (~150 Mbit/s before retransmissions)."""
    if full_cell:
        trace = constant_trace(out / "ample-20mhz.cbt", mcs=28, layers=2, bandwidth_mhz=20, seconds=seconds + 10)
        link: dict[str, Any] = {"ue": {"trace": trace}, "mode": "cell"}
    else:
        link = {"ue": {"rate": "1gbit"}, "mode": "rate"}
    with _cell(1, out, delays=NO_DELAYS, **link) as cell:
        _, threads = _iperf(cell, ["-u", "-b", "100M", "-l", "1400"], seconds)
        counters = cell.stop()
    log = read_packets(out / "packets.cbcol")
    down = log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)
    error_us = down["t_actual_us"] - down["t_scheduled_us"]
    lateness = counters["engine"]["subframe_lateness"]
    timer = counters["tx"]["timer_wake_lateness"]
    first_us = _first_of_instant_us(down["t_scheduled_us"], error_us)
    return {"cpu_percent": round(sum(threads.values()), 1), "cpu_percent_by_thread": threads, "packets": int(len(error_us)),
            "delivery_error": _percentiles_ms(error_us),
            "delivery_error_first_of_instant": _percentiles_ms(first_us),
            "packets_per_instant_p99": round(float(np.percentile(np.unique(down["t_scheduled_us"], return_counts=True)[1], 99)), 1)
            if len(error_us) else None,
            "subframe_lateness_p99_ms": round(lateness["p99_us"] / 1000, 3),
            # The machine's own timer precision: how late the kernel woke the writer.
            "timer_wake_lateness_ms": {"p50": round(timer["p50_us"] / 1000, 3), "p99": round(timer["p99_us"] / 1000, 3)},
            "writer_spin_margin_ms": round(counters["tx"]["spin_margin_us"] / 1000, 3)}


def _ping_rtts_ms(output: str) -> np.ndarray:
    rtts = [float(m) for m in re.findall(r"time=([0-9.]+) ms", output)]
    if not rtts:
        raise RuntimeError(f"ping reported no RTT:\n{output}")
    return np.array(rtts)


#: Ping interval, s: no whole number of subframes, so the pings' phase against the subframe
#: clock can spread (ping tends to lock its sends to the replies' arrival anyway, which is
#: why the model's RTT is computed per ping below).
PING_INTERVAL_S = 0.0231


def idle_latency(out: Path, count: int) -> dict[str, Any]:
    """Mean ping RTT through the emulator with every configured delay 0, against the model's
    RTT for each ping and a direct veth's RTT.

    The model's RTT for a ping is the wait from its request's arrival to the next subframe
    boundary plus :data:`MODEL_IDLE_RTT_BEYOND_WAIT_MS`; the arrival times come from the
    packet log. What the emulator adds is the measured RTT less the model's and less the
    veth's (the kernel and ping themselves). Of that, the part inside the emulator (reply
    written − request read, less the model) is reported too.
    """
    ping = ["ping", "-n", "-c", str(count), "-i", str(PING_INTERVAL_S)]
    with _cell(1, out / "emu", ue={"rate": "1gbit"}, mode="rate", delays=NO_DELAYS) as cell:
        rtts = _ping_rtts_ms(cell.topo.ues[0].run([*ping, str(cell.topo.server_address)]).stdout)
        counters = cell.stop()
    log = read_packets(out / "emu" / "packets.cbcol")
    requests = log.select(event=PacketEvent.DELIVER, direction=Direction.UPLINK)
    replies = log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)
    n = min(len(requests["t_arrival_us"]), len(replies["t_actual_us"]), len(rtts))
    arrival_ms = requests["t_arrival_us"][:n] / 1000
    model_ms = np.ceil(arrival_ms) - arrival_ms + MODEL_IDLE_RTT_BEYOND_WAIT_MS
    inside_ms = replies["t_actual_us"][:n] / 1000 - arrival_ms
    run_id = new_run_id()
    with Resources(run_id, out / "veth" / "ledger.jsonl") as res:
        a, b = res.namespace("a"), res.namespace("b")
        res.veth(Endpoint(a, res.name("va"), "10.66.0.1"), Endpoint(b, res.name("vb"), "10.66.0.2"))
        direct = float(_ping_rtts_ms(a.run([*ping, "10.66.0.2"]).stdout).mean())
    emulated, model = float(rtts[:n].mean()), float(model_ms.mean())
    engine = counters["engine"]
    return {"pings": int(n), "emulated_rtt_ms": round(emulated, 3), "direct_veth_rtt_ms": round(direct, 3),
            "added_ms": round(emulated - direct, 3), "model_rtt_ms": round(model, 3),
            "added_beyond_model_ms": round(emulated - direct - model, 3),
            "inside_emulator_beyond_model_ms": round(float((inside_ms - model_ms).mean()), 3),
            # The writes' own lateness, per direction.
            "delivery_error_p50_ms": {"downlink": round(engine["downlink_delivery_error"]["p50_us"] / 1000, 3),
                                      "uplink": round(engine["uplink_delivery_error"]["p50_us"] / 1000, 3)}}


def cell_45(out: Path, seconds: float, **fields: Any) -> dict[str, Any]:
    """45 UEs on the busy-cell sample trace (each at its own offset), each receiving 300 kbit/s;
    ``fields`` are config keys (``realtime_priority=0``: normal priority; ``diag={"file": False}``)."""
    n = 45
    trace = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
    ues = [{"trace": trace, "trace_offset_ms": 1000 * i} for i in range(n)]
    with _cell(n, out, ue=ues, **fields) as cell:
        with UdpSink([u.name for u in cell.topo.ues], SINK_PORT) as sink:
            meter = CpuMeter(cell.emulator.pid).start()
            targets = [(str(u.address), SINK_PORT) for u in cell.topo.ues]
            sender = cell.topo.core.popen(send_udp_command(sys.executable, targets, "300kbit", 1000, seconds),
                                          name="udp-send", log_path=out / "udp-send.log")
            sender.popen.wait(timeout=seconds + 60)
            threads = meter.per_thread()
            counters = cell.stop()
            received = sink.counts()
    engine = counters["engine"]
    # The subframes the cell thread ran on time (an idle cell's, batched on purpose, are not
    # in it: their lateness is by design), from the emulator's own histogram.
    lateness = engine["subframe_lateness"]
    return {"ues": n, "realtime_priority": counters["realtime_priority"], "diag_file": counters["diag"]["file"],
            "cpu_percent": round(sum(threads.values()), 1), "cpu_percent_by_thread": threads,
            "ues_with_traffic": sum(p > 0 for p, _ in received),
            "subframe_lateness_ms": {"p50": round(lateness["p50_us"] / 1000, 3), "p99": round(lateness["p99_us"] / 1000, 3),
                                     "max": round(lateness["max_us"] / 1000, 3)},
            "idle_subframes_percent": round(100.0 * engine["idle_subframes"] / max(engine["subframes"], 1), 2),
            "live_subframes": lateness["count"],
            "downlink_delivery_error_ms": {"p50": round(engine["downlink_delivery_error"]["p50_us"] / 1000, 3),
                                           "p99": round(engine["downlink_delivery_error"]["p99_us"] / 1000, 3)},
            "diag_batches_dropped": engine["diag_batches_dropped"], "truth_rows_dropped": engine["truth_rows_dropped"]}


@dataclass
class Step:
    key: str
    what: str
    run: Callable[[Path], Any]


def _mahimahi_rates_bps(path: Path) -> tuple[float, float]:
    """(mean, peak over 100 ms windows) capacity of a Mahimahi trace, bit/s."""
    stamps = np.loadtxt(path, dtype=np.int64, ndmin=1)
    per_100ms = np.bincount(stamps // 100) * 1500 * 8 / 0.1
    return len(stamps) * 1500 * 8 / (stamps[-1] / 1000), float(per_100ms.max())


def _schedule_gaps_us(path: Path, span_ms: int) -> np.ndarray:
    """Gaps between the trace's delivery opportunities over ``span_ms`` (looping), µs."""
    stamps = np.loadtxt(path, dtype=np.int64, ndmin=1)
    period = int(stamps[-1])
    cycles = span_ms // period + 1
    times = (stamps[None, :] + period * np.arange(cycles)[:, None]).ravel()
    return np.diff(times[times < span_ms]) * 1000


def mahimahi(out: Path, seconds: float, traces: list[Path]) -> list[dict[str, Any]]:
    """Each Mahimahi trace in ``mahimahi`` mode, saturated by a UDP flow 20 % above its peak
    100 ms capacity (1500-byte packets: one per delivery opportunity), so every opportunity
    carries a packet: the delivered packets' inter-arrival p99 beside the trace's own (the
    schedule's), and the delivery timing error. The sender is the paced Python one, not
    iperf3: iperf3's control connection would wait behind the flood in the deep queue."""
    rows = []
    for path in traces:
        mean_bps, peak_bps = _mahimahi_rates_bps(path)
        run_out = out / f"run-{path.name}"
        with _cell(1, run_out, ue={"mahimahi_trace": path}, mode="mahimahi", delays=NO_DELAYS) as cell:
            with UdpSink([cell.topo.ues[0].name], SINK_PORT):
                meter = CpuMeter(cell.emulator.pid).start()
                sender = cell.topo.core.popen(
                    send_udp_command(sys.executable, [(str(cell.topo.ues[0].address), SINK_PORT)],
                                     f"{round(peak_bps * 1.2)}bit", 1472, seconds),
                    name="udp-send", log_path=run_out / "udp-send.log")
                sender.popen.wait(timeout=seconds + 60)
                threads = meter.per_thread()
                cell.stop()
        down = read_packets(run_out / "packets.cbcol").select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)
        actual = np.sort(down["t_actual_us"])
        span_ms = int(actual[-1] // 1000) if len(actual) else 0
        rows.append({"trace": path.name, "mean_capacity_mbit_s": round(mean_bps / 1e6, 2),
                     "offered_mbit_s": round(peak_bps * 1.2 / 1e6, 2),
                     # Over the deliveries' own span: the queue keeps delivering after the sender stops.
                     "delivered_mbit_s": round(int(down["bytes"].sum()) * 8 / max(actual[-1] - actual[0], 1), 2)
                     if len(actual) else 0.0,
                     "interarrival_p99_ms": _percentiles_ms(np.diff(actual))["p99_ms"],
                     "schedule_interarrival_p99_ms": _percentiles_ms(_schedule_gaps_us(path, span_ms))["p99_ms"],
                     "delivery_error": _percentiles_ms(down["t_actual_us"] - down["t_scheduled_us"]),
                     "cpu_percent": round(sum(threads.values()), 1)})
    return rows


# -- Mahimahi's mm-link, live beside the emulator ------------------------------------------------


class MmLinkMissing(RuntimeError):
    """``$MM_LINK`` names no program: said in the table's place, not fatal to the bench."""


def mm_link_binary() -> Path | None:
    """mm-link to measure: ``$MM_LINK`` (a path or a name on PATH), else ``mm-link`` on PATH,
    else None. Raises :class:`MmLinkMissing` when ``$MM_LINK`` names no program."""
    named = os.environ.get(MM_LINK_ENV)
    if named:
        found = named if "/" in named else shutil.which(named)
        if not found or not Path(found).is_file():
            raise MmLinkMissing(f"${MM_LINK_ENV}={named}: no such program")
        return Path(found)
    found = shutil.which("mm-link")
    return Path(found) if found else None


#: Suffix of the user a root bench creates for mm-link: ``cb<run id>mm``.
MM_USER_ROLE = "mm"
#: Role of the network namespace each root mm-link run happens in: ``cb<run id>mmns``.
MM_NAMESPACE_ROLE = "mmns"
#: How long to wait for mm-link beyond its command's own duration, s.
MM_LINK_GRACE_S = 60.0
#: How often mm-link's processes' CPU time is read while it runs, s.
MM_SAMPLE_INTERVAL_S = 0.1
#: Start-up left out of mm-link's CPU figure (its forks, dnsmasq, the command's start), s.
MM_STARTUP_S = 0.5


def mm_user_name(run_id: str) -> str:
    """The user a root bench makes for mm-link: ``cb<run id>mm`` (a valid user name, ≤ 15 characters)."""
    return resource_name(run_id, MM_USER_ROLE)


@dataclass
class MmUser:
    """The unprivileged user mm-link runs as (it refuses root), and a folder of its own for
    the traces it reads and the logs it writes (the bench's temporary folder is root's only)."""

    name: str
    uid: int
    gid: int
    folder: Path
    #: Made by the bench (removed at exit) rather than named with ``--mm-user``.
    created: bool = False

    def dir_for(self, out: Path) -> Path:
        """A folder for one step's files (named as the step's ``out``), the user's."""
        path = self.folder / out.name
        path.mkdir(exist_ok=True)
        os.chown(path, self.uid, self.gid)
        return path


def _user_entry(name: str) -> pwd.struct_passwd:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise click.BadParameter(f"no such user {name!r}", param_hint="--mm-user") from None
    if entry.pw_uid == 0:
        raise click.BadParameter(f"{name!r} is root; mm-link refuses to run as root", param_hint="--mm-user")
    return entry


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def _remove_user(name: str, console: Console | None) -> None:
    """``userdel`` the bench's own user (its group goes with it); a failure is said, with the
    command that finishes the job, since the bench is already on its way out."""
    if not _user_exists(name):
        return
    done = subprocess.run(["userdel", name], capture_output=True, text=True)
    if done.returncode != 0 and console is not None:
        console.print(f"[red]could not remove the user {name} made for mm-link (userdel: {done.stderr.strip()}); "
                      f"remove it with: userdel {name}[/red]")


@contextlib.contextmanager
def mm_user(name: str | None, console: Console | None = None) -> Iterator[MmUser | None]:
    """The user mm-link runs as: None when this process is not root (it runs as us); the
    user ``name`` (``--mm-user``); else a system user ``cb<run id>mm`` made now (no home, no
    login shell) and removed on the way out, also on an error, Ctrl-C or SIGTERM. Its folder
    is a fresh temporary one, removed on the way out."""
    if os.geteuid() != 0:
        yield None
        return
    created = name is None
    if name is None:
        name = mm_user_name(new_run_id())
    # SIGTERM unwinds like Ctrl-C while the user exists (Resources does the same for its runs).
    old_sigterm = signal.signal(signal.SIGTERM, interrupt_handler(os.getpid()))
    try:
        if created:
            done = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir",
                                   "/nonexistent", "--shell", "/usr/sbin/nologin", name], capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"creating the user {name} for mm-link (useradd): {done.stderr.strip()}")
            if console is not None:
                console.print(f"[dim]mm-link runs as {name}, a system user made for this bench (removed at exit)[/dim]")
        entry = _user_entry(name)
        folder = Path(tempfile.mkdtemp(prefix="clawbed-mm-"))
        try:
            os.chown(folder, entry.pw_uid, entry.pw_gid)
            yield MmUser(name, entry.pw_uid, entry.pw_gid, folder, created)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    finally:
        try:
            if created:
                _remove_user(name, console)
        finally:
            signal.signal(signal.SIGTERM, old_sigterm)


def _process_table() -> dict[int, tuple[int, str, int, float]]:
    """Every process now: pid → (parent pid, command name, start time in ticks, CPU time so
    far in s (user + system))."""
    table: dict[int, tuple[int, str, int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # ended meanwhile
            continue
        # The command name sits in parentheses and may hold spaces; the fields after it start
        # with the state (field 3): ppid is field 4, utime and stime 14 and 15, starttime 22.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(fields[1]), name, int(fields[19]),
                                  (int(fields[11]) + int(fields[12])) / _TICKS_PER_S)
    return table


class ProcessTreeCpu:
    """CPU time of process ``root`` and its descendants whose command name is ``name`` (mm-link
    forks its uplink and downlink ferries, which keep its name; dnsmasq and the command it
    runs are not mm-link), between :meth:`start` and the last :meth:`sample`. Every
    descendant seen is remembered (pid and start time), so that :meth:`stop_survivors` can
    stop exactly those that outlive the root."""

    def __init__(self, root: int, name: str) -> None:
        self.root = root
        self.name = name[:15]  # the kernel keeps 15 characters of a command name
        #: pid → (start ticks, command name) of every process seen in the tree.
        self.seen: dict[int, tuple[int, str]] = {}
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._t0 = self._t1 = time.monotonic()

    def _tree(self) -> dict[int, tuple[int, str, int, float]]:
        table = _process_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, *_) in table.items():
            children.setdefault(ppid, []).append(pid)
        tree, todo = {}, [self.root]
        while todo:
            pid = todo.pop()
            if pid in table:
                tree[pid] = table[pid]
                todo += children.get(pid, [])
        for pid, (_, name, start, _cpu) in tree.items():
            self.seen[pid] = (start, name)  # the latest name: a fork takes its own at exec
        return tree

    def _cpu_by_pid(self) -> dict[int, float]:
        return {pid: cpu for pid, (_, name, _start, cpu) in self._tree().items() if name == self.name}

    def start(self) -> ProcessTreeCpu:
        self._first = self._last = self._cpu_by_pid()
        self._t0 = self._t1 = time.monotonic()
        return self

    def sample(self) -> None:
        now = self._cpu_by_pid()
        if now:
            self._last = {**self._last, **now}
            self._t1 = time.monotonic()

    def percent(self) -> float:
        """Percent of one core the tree's ``name`` processes used from :meth:`start` to the
        last :meth:`sample` (one that started later counts from its start)."""
        used = sum(cpu - self._first.get(pid, 0.0) for pid, cpu in self._last.items())
        return round(100.0 * used / max(self._t1 - self._t0, 1e-3), 2)

    def processes(self) -> int:
        """How many ``name`` processes the tree held at the last :meth:`sample`."""
        return len(self._last)

    def stop_survivors(self) -> list[str]:
        """SIGKILL every process seen in the tree that still runs (same pid and start time,
        so never another one that took its pid); their names and pids."""
        stopped = []
        table = _process_table()
        for pid, (start, name) in self.seen.items():
            if pid in table and table[pid][2] == start:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                stopped.append(f"{name} ({pid})")
        return stopped


@dataclass
class MmLinkRun:
    """What one mm-link run gave: its command's output and mm-link's own CPU."""

    stdout: str
    #: mm-link's processes' CPU while the command ran (start-up excluded), % of one core;
    #: None when none was seen running (it ended within its start-up).
    cpu_percent: float | None
    #: How many mm-link processes there were (the one started and its ferries).
    processes: int
    #: Processes of the run still alive after mm-link ended, stopped by the bench.
    stopped_after_exit: list[str]


def mm_link_argv(binary: Path, trace: Path, command: str, *extra: str, user: MmUser | None = None) -> list[str]:
    """mm-link's command line with ``trace`` both ways, running ``sh -c command``; as
    ``user`` (real and effective ids, no supplementary groups: mm-link checks the real ones)
    when given."""
    argv = [str(binary), str(trace), str(trace), *extra, "--", "sh", "-c", command]
    if user is not None:
        argv = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--", *argv]
    return argv


def _mm_link(binary: Path, trace: Path, command: str, seconds: float, *extra: str, out: Path,
             user: MmUser | None = None, iperf_server: bool = False) -> MmLinkRun:
    """Run ``command`` (sh -c; ``$MAHIMAHI_BASE`` is the host outside) inside ``mm-link trace
    trace``, as ``user`` when given, with an iperf3 server outside when ``iperf_server``.

    As root, the run happens in a network namespace of its own (``cb<run id>mmns``, IP
    forwarding on, as mm-link requires): mm-link's TUN, its NAT rules and the iperf3 server
    live there and go with it, and the host's own forwarding setting is never touched. The
    namespace, the server and mm-link are on a ledger in ``out`` and removed on the way out
    (error and Ctrl-C too); any process of mm-link's tree left running is stopped and named."""
    out.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    if user is not None:
        env |= {"HOME": str(user.folder), "USER": user.name, "LOGNAME": user.name}
    with Resources(new_run_id(), out / "mm-link-ledger.jsonl") as res, \
            (out / "mm-link.stdout").open("w+") as stdout:
        def inside(argv: list[str]) -> list[str]:
            return argv
        if os.geteuid() == 0:
            ns = res.namespace(MM_NAMESPACE_ROLE)
            ns.sysctl("net.ipv4.ip_forward", 1)
            inside = ns.command
        if iperf_server:
            res.process(inside(["iperf3", "-s", "-p", str(MM_IPERF_PORT)]), name="iperf3-server",
                        log_path=out / "iperf3-server.log")
            time.sleep(0.3)  # the server binds
        proc = res.process(inside(mm_link_argv(binary, trace, command, *extra, user=user)), name="mm-link",
                           log_path=out / "mm-link.log", stdout=stdout.fileno(), env=env)
        meter = ProcessTreeCpu(proc.pid, binary.name)
        try:
            deadline = time.monotonic() + seconds + MM_LINK_GRACE_S
            started = time.monotonic() + MM_STARTUP_S
            while proc.alive() and time.monotonic() < started:
                meter.sample()  # learns the tree's processes as they appear
                time.sleep(MM_SAMPLE_INTERVAL_S / 2)
            meter.start()
            while proc.alive():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{binary.name} still ran {seconds + MM_LINK_GRACE_S:.0f} s after it started")
                time.sleep(MM_SAMPLE_INTERVAL_S)
                meter.sample()
        finally:
            returncode = proc.close()
            stopped = meter.stop_survivors()
        if returncode != 0:
            err = (out / "mm-link.log").read_text(errors="replace").strip()
            left = f" (it left running, stopped by the bench: {', '.join(stopped)})" if stopped else ""
            raise RuntimeError(f"{binary.name} exited {returncode}: {err[-300:]}{left}")
        stdout.seek(0)
        text = stdout.read()
    return MmLinkRun(text, meter.percent() if meter.processes() else None, meter.processes(), stopped)


def _mm_result(run: MmLinkRun, **figures: Any) -> dict[str, Any]:
    result = {**figures, "cpu_percent": run.cpu_percent, "mm_link_processes": run.processes}
    if run.stopped_after_exit:
        result["stopped_after_exit"] = run.stopped_after_exit
    return result


def _files_dir(out: Path, user: MmUser | None) -> Path:
    """Where a step's traces and logs go (made if need be): the user's folder when mm-link runs as one."""
    if user is not None:
        return user.dir_for(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def mm_link_idle(binary: Path, out: Path, seconds: float, user: MmUser | None = None) -> dict[str, Any]:
    """mm-link's CPU with no traffic, on a 12 Mbit/s constant trace."""
    trace = constant_mahimahi_trace(_files_dir(out, user) / "constant-12mbit.down", packets_per_ms=1)
    return _mm_result(_mm_link(binary, trace, f"sleep {seconds}", seconds, out=out, user=user))


def _iperf_json(run: MmLinkRun) -> dict[str, Any]:
    try:
        result: dict[str, Any] = json.loads(run.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(f"iperf3 inside mm-link gave no JSON result ({e}): {run.stdout.strip()[-300:]}") from None
    if "error" in result:
        raise RuntimeError(f"iperf3 inside mm-link: {result['error']}")
    return result


def mm_link_tcp(binary: Path, out: Path, seconds: float, user: MmUser | None = None) -> dict[str, Any]:
    """Bulk TCP downlink (iperf3 -R from inside mm-link to a server outside) over a trace of
    1000 opportunities per ms (12 Gbit/s): mm-link's ceiling, and its CPU."""
    trace = constant_mahimahi_trace(_files_dir(out, user) / "constant-12gbit.down", packets_per_ms=1000, period_ms=100)
    run = _mm_link(binary, trace, f'iperf3 -c "$MAHIMAHI_BASE" -p {MM_IPERF_PORT} -R -J -t {seconds}', seconds,
                   out=out, user=user, iperf_server=True)
    result = _iperf_json(run)
    return _mm_result(run, gbit_s=round(result["end"]["sum_received"]["bits_per_second"] / 1e9, 3))


#: Delivery opportunities per ms of the trace for mm-link's 100 Mbit/s step: 84 × 1500 bytes
#: a ms is 1.008 Gbit/s, the emulator's 1 Gbit/s rate link of :func:`at_100mbit`.
MM_1GBIT_PACKETS_PER_MS = 84


def mm_link_100mbit(binary: Path, out: Path, seconds: float, user: MmUser | None = None) -> dict[str, Any]:
    """Paced 100 Mbit/s UDP downlink (iperf3 -R, 1400-byte datagrams) over a ~1 Gbit/s
    constant trace, as the emulator's :func:`at_100mbit`: mm-link's CPU."""
    trace = constant_mahimahi_trace(_files_dir(out, user) / "constant-1gbit.down",
                                    packets_per_ms=MM_1GBIT_PACKETS_PER_MS, period_ms=100)
    run = _mm_link(binary, trace, f'iperf3 -c "$MAHIMAHI_BASE" -p {MM_IPERF_PORT} -R -u -b 100M -l 1400 -J '
                                  f'-t {seconds}', seconds, out=out, user=user, iperf_server=True)
    result = _iperf_json(run)
    return _mm_result(run, mbit_s=round(result["end"]["sum"]["bits_per_second"] / 1e6, 1))


def mm_link_delivered_ms(log: str) -> list[int]:
    """The delivery times (ms) of mm-link's ``--downlink-log``: lines ``TIME - BYTES``
    (arrivals ``+``, drops ``d`` and ``#`` header lines are not deliveries)."""
    delivered = []
    for line in log.splitlines():
        fields = line.split()
        if line.startswith("#") or len(fields) < 2 or fields[1] != "-":
            continue
        delivered.append(int(fields[0]))
    return delivered


def mm_link_12mbit(binary: Path, out: Path, seconds: float, user: MmUser | None = None) -> dict[str, Any]:
    """A constant 12 Mbit/s trace saturated by UDP (iperf3 -R, 14 Mbit/s of 1472-byte
    datagrams): the delivered inter-arrival p99 from mm-link's own downlink log (whole ms: the
    log's resolution)."""
    files = _files_dir(out, user)
    trace = constant_mahimahi_trace(files / "constant-12mbit.down", packets_per_ms=1)
    log = files / "downlink.log"
    run = _mm_link(binary, trace, f'iperf3 -c "$MAHIMAHI_BASE" -p {MM_IPERF_PORT} -R -u -b 14M -l 1472 '
                                  f'-t {seconds}', seconds, f"--downlink-log={log}", out=out, user=user,
                   iperf_server=True)
    delivered = mm_link_delivered_ms(log.read_text())
    gaps = np.diff(np.asarray(delivered, dtype=np.int64)) * 1000
    return _mm_result(run, interarrival_p99_ms=_percentiles_ms(gaps)["p99_ms"], packets=len(delivered),
                      resolution_ms=1)


#: Each mm-link step and the emulator step it is measured beside (run right after it, in
#: every repetition, so the two see the same machine).
MM_BESIDE = {"mm_idle": "idle", "mm_tcp": "tcp", "mm_100mbit": "at_100mbit", "mm_12mbit": "mahimahi"}


def mm_link_steps(binary: Path, seconds: float, user: MmUser | None = None) -> list[Step]:
    """The mm-link measurements, beside the emulator's steps of :data:`MM_BESIDE` (``mm_``
    prefix), run as ``user`` when given."""
    return [Step("mm_idle", "mm-link: idle CPU", lambda d: mm_link_idle(binary, d, seconds, user)),
            Step("mm_tcp", "mm-link: bulk TCP", lambda d: mm_link_tcp(binary, d, seconds, user)),
            Step("mm_100mbit", "mm-link: 100 Mbit/s UDP", lambda d: mm_link_100mbit(binary, d, seconds, user)),
            Step("mm_12mbit", "mm-link: 12 Mbit/s saturated", lambda d: mm_link_12mbit(binary, d, seconds, user))]


def interleave(steps: list[Step]) -> list[Step]:
    """The emulator's steps in order, each mm-link step right after the one it is measured
    beside (:data:`MM_BESIDE`); an mm-link step without its partner in ``steps`` goes last."""
    keys = {step.key for step in steps}
    ordered = []
    for step in steps:
        if step.key in MM_BESIDE and MM_BESIDE[step.key] in keys:
            continue
        ordered.append(step)
        ordered += [s for s in steps if MM_BESIDE.get(s.key) == step.key]
    return ordered


def _cpu_ticks() -> tuple[int, int]:
    """(all, steal) CPU ticks of the machine so far, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields), fields[7]


def run_all(work: Path, seconds: float, console: Console, only: set[str] | None = None,
            repeat: int = 1, mm_user_name: str | None = None) -> dict[str, Any]:
    """Every step (or those in ``only``), each ``repeat`` times: ``results[key]`` is the first
    run's figures, ``results["runs"][key]`` every run's (for the ranges of the table).
    mm-link's steps run as :func:`mm_user` (``mm_user_name``: ``--mm-user``)."""
    with contextlib.ExitStack() as stack:
        return _run_all(stack, work, seconds, console, only, repeat, mm_user_name)


def _run_all(stack: contextlib.ExitStack, work: Path, seconds: float, console: Console, only: set[str] | None,
             repeat: int, mm_user_name: str | None) -> dict[str, Any]:
    # Mahimahi's recorded traces are optional third-party data; the constant one is our own.
    mahimahi_dir = shared_data("mahimahi-traces")
    traces = [constant_mahimahi_trace(work / "constant-12mbit.down", packets_per_ms=1),
              *(sorted(mahimahi_dir.glob("*.down")) if mahimahi_dir else [])]
    steps = [
        Step("idle", "idle CPU", lambda d: idle_cpu(d, seconds)),
        Step("tcp", "bulk TCP", lambda d: tcp_max(d, seconds)),
        Step("tcp_no_offload", "bulk TCP, TUN offload off", lambda d: tcp_max(d, seconds, tun_offload=False)),
        Step("udp_small", "small-packet UDP", lambda d: udp_small_max(d, seconds)),
        Step("at_100mbit", "100 Mbit/s UDP", lambda d: at_100mbit(d, seconds)),
        Step("at_100mbit_cell", "100 Mbit/s UDP through the full cell model",
             lambda d: at_100mbit(d, seconds, full_cell=True)),
        Step("idle_latency", "idle RTT", lambda d: idle_latency(d, 100)),
        Step("cell_45_ues", "45-UE cell (defaults: SCHED_FIFO, diag files on)", lambda d: cell_45(d, seconds)),
        Step("cell_45_ues_normal", "45-UE cell at normal priority", lambda d: cell_45(d, seconds, realtime_priority=0)),
        Step("cell_45_ues_no_diag_file", "45-UE cell, diag files off",
             lambda d: cell_45(d, seconds, diag={"file": False})),
        Step("mahimahi", "Mahimahi traces", lambda d: mahimahi(d, seconds, traces)),
    ]
    #: Why mm-link cannot run at all here ($MM_LINK names no program, its user could not be
    #: made): each of its steps that was asked for says so, and the reference table follows.
    mm_problem: str | None = None
    user: MmUser | None = None
    mm_link: Path | None = None
    try:
        mm_link = mm_link_binary()
    except MmLinkMissing as e:
        mm_problem = str(e)
    wants_mm = not only or any(key.startswith("mm_") for key in only)
    if mm_link is not None and wants_mm:
        try:
            user = stack.enter_context(mm_user(mm_user_name, console))
        except (RuntimeError, OSError) as e:
            mm_problem = f"{type(e).__name__}: {e}"
    # The mm-link steps are always known (--only may name them); without mm-link they run
    # only when named, to say why they cannot.
    steps = interleave(steps + mm_link_steps(mm_link or Path(os.environ.get(MM_LINK_ENV) or "mm-link"), seconds, user))
    unknown = (only or set()) - {step.key for step in steps}
    if unknown:
        raise click.BadParameter(f"unknown step(s) {', '.join(sorted(unknown))}; "
                                 f"known: {', '.join(step.key for step in steps)}", param_hint="--only")
    if mm_link is None and mm_problem is None:
        mm_problem = f"no mm-link here (${MM_LINK_ENV}, or mm-link on PATH)"
        steps = [step for step in steps if not step.key.startswith("mm_") or (only and step.key in only)]
    results: dict[str, Any] = {"seconds_per_measurement": seconds, "repeat": repeat,
                               "load_average_before": os.getloadavg()[0], "cpus": os.cpu_count(),
                               "mm_link": str(mm_link) if mm_link else os.environ.get(MM_LINK_ENV) or None,
                               "mm_user": user.name if user is not None else None,
                               "references": REFERENCES, "runs": {}}
    steal: dict[str, list[float]] = {}
    chosen = [step for step in steps if not only or step.key in only]
    # Repetitions outermost: an mm-link step runs right after its emulator step in every
    # round, so a machine whose load drifts shows in both columns alike.
    for i in range(repeat):
        for step in chosen:
            console.print(f"[dim]measuring {step.what} ({i + 1}/{repeat}) …[/dim]")
            directory = work / f"{step.key}-{i}"
            directory.mkdir(parents=True)
            total, stolen = _cpu_ticks()
            try:
                if mm_problem is not None and step.key.startswith("mm_"):
                    raise RuntimeError(mm_problem)
                results["runs"].setdefault(step.key, []).append(step.run(directory))
            except (RuntimeError, OSError, ValueError, KeyError, subprocess.SubprocessError, ClawbedError) as e:
                if not step.key.startswith("mm_"):
                    raise
                # mm-link that cannot run here (not setuid, refused, …): said, not fatal.
                results["runs"].setdefault(step.key, []).append({"error": f"{type(e).__name__}: {e}"})
            # CPU time the hypervisor gave to others while this step ran: a VM's timing noise.
            total_after, stolen_after = _cpu_ticks()
            steal.setdefault(step.key, []).append(round(100.0 * (stolen_after - stolen) / max(total_after - total, 1), 1))
    for step in chosen:
        results[step.key] = results["runs"][step.key][0]
    results["cpu_steal_percent"] = steal
    results["load_average_after"] = os.getloadavg()[0]
    return results


def _by_thread(result: dict[str, Any]) -> str:
    return ", ".join(f"{name} {pct}" for name, pct in result["cpu_percent_by_thread"].items())


def _span(runs: list[Any], get: Callable[[Any], Any]) -> str:
    """One figure over the runs: ``x`` for one run (or equal runs), ``lo–hi`` for several."""
    values = [get(run) for run in runs]
    numbers = [v for v in values if isinstance(v, (int, float))]
    if len(numbers) != len(values) or len(set(numbers)) <= 1:
        return str(values[0])
    return f"{min(numbers)}–{max(numbers)}"


#: The heading of mm-link's column when it was measured live.
MM_COLUMN = "mm-link, now"
#: The CPU figures compared live: (what, the emulator's step, mm-link's step).
CPU_PAIRS = (("idle", "idle", "mm_idle"), ("100 Mbit/s", "at_100mbit", "mm_100mbit"))


def cpu_ratios(runs: dict[str, list[Any]]) -> dict[str, float]:
    """clawbed-emu's CPU over mm-link's, median over the runs, for each pair of
    :data:`CPU_PAIRS` that both measured (mm-link's at zero: no ratio)."""
    ratios = {}
    for what, emu_key, mm_key in CPU_PAIRS:
        emu = [r["cpu_percent"] for r in runs.get(emu_key, [])]
        mm = [r["cpu_percent"] for r in runs.get(mm_key, []) if r.get("cpu_percent") is not None]
        if emu and mm and float(np.median(mm)) > 0:
            ratios[what] = round(float(np.median(emu)) / float(np.median(mm)), 2)
    return ratios


def render(results: dict[str, Any], console: Console) -> None:
    """The table of every step that ran; figures over repeated runs are shown as ranges."""
    runs: dict[str, list[Any]] = results["runs"]
    mm_runs = {key: value for key, value in runs.items() if key.startswith("mm_")}
    # Live: some mm-link figure measured now; any step that failed sends the reader to the
    # reference figures as well, saying why.
    live = any("error" not in r for value in mm_runs.values() for r in value)
    mm_failures = {key: next(r["error"] for r in value if "error" in r)
                   for key, value in mm_runs.items() if any("error" in r for r in value)}
    table = TerminalTable(title="clawbed-emu benchmark" + (f" beside {results['mm_link']}, both measured now on "
                                                           "this machine" if live else ""), show_lines=False)
    table.add_column("measurement")
    table.add_column("clawbed-emu", justify="right")
    if live:
        table.add_column(MM_COLUMN, justify="right")

    def row(what: str, emu: str, mm: str = "") -> None:
        if live:
            table.add_row(what, emu, mm)
        else:
            table.add_row(what, emu)

    def mm(key: str, get: Callable[[Any], Any], unit: str) -> str:
        if key not in runs:
            return ""
        errors = [r["error"] for r in runs[key] if "error" in r]
        if errors:
            return f"failed: {errors[0][:80]}"
        return f"{_span(runs[key], get)} {unit}"

    def span(key: str, get: Callable[[Any], Any]) -> str:
        return _span(runs[key], get)

    if "idle" in runs or "mm_idle" in runs:
        row("CPU with no traffic (1 UE)", span("idle", lambda r: r["cpu_percent"]) + " % of a core"
            if "idle" in runs else "", mm("mm_idle", lambda r: r["cpu_percent"], "% of a core"))
    if "idle" in runs:
        row("  idle: CPU % by thread", _by_thread(results["idle"]), "")
    if "tcp" in runs or "mm_tcp" in runs:
        row("bulk TCP ceiling (iperf3)",
            f"{span('tcp', lambda r: r['gbit_s'])} Gbit/s, {span('tcp', lambda r: r['kpps'])} kpps" if "tcp" in runs
            else "", mm("mm_tcp", lambda r: r["gbit_s"], "Gbit/s"))
        row("CPU per Gbit/s (TCP)",
            f"{span('tcp', lambda r: r['cpu_percent_per_gbit_s'])} % of a core" if "tcp" in runs else "",
            mm("mm_tcp", lambda r: round(r["cpu_percent"] / r["gbit_s"], 1) if r["gbit_s"] else None, "% of a core"))
    if "tcp" in runs:
        row("CPU per 100 kpps (TCP)", f"{span('tcp', lambda r: r['cpu_percent_per_100kpps'])} % of a core",
                      "")
        row("  TCP: CPU % by thread", _by_thread(results["tcp"]), "")
    if "tcp_no_offload" in runs:
        row("TCP, TUN offload off",
                      f"{span('tcp_no_offload', lambda r: r['gbit_s'])} Gbit/s, "
                      f"{span('tcp_no_offload', lambda r: r['kpps'])} kpps, "
                      f"{span('tcp_no_offload', lambda r: r['cpu_percent_per_gbit_s'])} % of a core per Gbit/s", "")
    if "udp_small" in runs:
        row("small-packet UDP (64 B payload)",
                      f"{span('udp_small', lambda r: r['kpps'])} kpps of {span('udp_small', lambda r: r['sent_kpps'])} "
                      f"sent, CPU {span('udp_small', lambda r: r['cpu_percent'])} % "
                      f"({span('udp_small', lambda r: r['cpu_percent_per_100kpps'])} % per 100 kpps), dropped: "
                      f"{span('udp_small', lambda r: r['dropped_in_emulator'])} in the emulator, "
                      f"{span('udp_small', lambda r: r['dropped_at_tun_queue'])} at the TUN queue", "")
        row("  UDP: CPU % by thread", _by_thread(results["udp_small"]), "")
    if "mm_100mbit" in runs and "at_100mbit" not in runs:
        row("CPU at 100 Mbit/s (1 Gbit/s rate link)", "", mm("mm_100mbit", lambda r: r["cpu_percent"], "% of a core"))
    for key, how in (("at_100mbit", "1 Gbit/s rate link"), ("at_100mbit_cell", "full cell model")):
        if key not in runs:
            continue
        row(f"CPU at 100 Mbit/s ({how})", f"{span(key, lambda r: r['cpu_percent'])} % of a core",
            mm("mm_100mbit", lambda r: r["cpu_percent"], "% of a core") if key == "at_100mbit" else "")
        row("  100 Mbit/s: CPU % by thread", _by_thread(results[key]), "")
        row("  delivery timing error p50 / p99 / max, first packet of each due instant",
                      f"{span(key, lambda r: r['delivery_error_first_of_instant']['p50_ms'])} / "
                      f"{span(key, lambda r: r['delivery_error_first_of_instant']['p99_ms'])} / "
                      f"{span(key, lambda r: r['delivery_error_first_of_instant']['max_ms'])} ms", "")
        row("  ... every packet (a burst waits for the receiver to take it)",
                      f"{span(key, lambda r: r['delivery_error']['p50_ms'])} / "
                      f"{span(key, lambda r: r['delivery_error']['p99_ms'])} / "
                      f"{span(key, lambda r: r['delivery_error']['max_ms'])} ms "
                      f"(packets due at one instant p99: {span(key, lambda r: r['packets_per_instant_p99'])})", "")
        row("  the machine's timer wake-up lateness p50 / p99",
                      f"{span(key, lambda r: r['timer_wake_lateness_ms']['p50'])} / "
                      f"{span(key, lambda r: r['timer_wake_lateness_ms']['p99'])} ms "
                      f"(writer spins the last {span(key, lambda r: r['writer_spin_margin_ms'])} ms)", "")
    if "idle_latency" in runs:
        idle = results["idle_latency"]
        row("idle RTT, zero configured delay",
                      f"{span('idle_latency', lambda r: r['emulated_rtt_ms'])} ms (veth {idle['direct_veth_rtt_ms']} ms; "
                      f"model {span('idle_latency', lambda r: r['model_rtt_ms'])} ms for these pings' phases; "
                      f"+{span('idle_latency', lambda r: r['added_beyond_model_ms'])} ms beyond the model, of which "
                      f"{span('idle_latency', lambda r: r['inside_emulator_beyond_model_ms'])} ms inside the emulator; "
                      f"write lateness p50 down/up {span('idle_latency', lambda r: r['delivery_error_p50_ms']['downlink'])}"
                      f"/{span('idle_latency', lambda r: r['delivery_error_p50_ms']['uplink'])} ms)", "")
    for key, label in (("cell_45_ues", "45-UE cell"), ("cell_45_ues_normal", "45-UE cell, normal priority"),
                       ("cell_45_ues_no_diag_file", "45-UE cell, diag files off")):
        if key not in runs:
            continue
        c45 = results[key]
        row(f"{label}: CPU", f"{span(key, lambda r: r['cpu_percent'])} % of a core, "
                      f"{span(key, lambda r: r['ues_with_traffic'])}/45 UEs served "
                      f"(cell thread priority {c45['realtime_priority']}, diag files {c45['diag_file']})", "")
        row(f"  {label}: CPU % by thread", _by_thread(c45), "")
        row(f"  {label}: subframe lateness p50 / p99 / max",
                      f"{span(key, lambda r: r['subframe_lateness_ms']['p50'])} / "
                      f"{span(key, lambda r: r['subframe_lateness_ms']['p99'])} / "
                      f"{span(key, lambda r: r['subframe_lateness_ms']['max'])} ms "
                      f"({span(key, lambda r: r['idle_subframes_percent'])} % of subframes idle, batched); "
                      f"delivery error p99 {span(key, lambda r: r['downlink_delivery_error_ms']['p99'])} ms", "")
    if "mm_12mbit" in runs and "mahimahi" not in runs:
        row("12 Mbit/s trace saturated: inter-arrival p99", "",
            mm("mm_12mbit", lambda r: r["interarrival_p99_ms"], "ms (mm-link's log: whole ms)"))
    if "mahimahi" in runs:
        for i, entry in enumerate(results["mahimahi"]):
            reference = (mm("mm_12mbit", lambda r: r["interarrival_p99_ms"], "ms (mm-link's log: whole ms)")
                         if entry["trace"].startswith("constant-12mbit") else "")
            row(f"mahimahi {entry['trace']}: inter-arrival p99 (trace's own); delivery error p99",
                          f"{span('mahimahi', functools.partial(_nth_trace, i, ('interarrival_p99_ms',)))} ms "
                          f"({entry['schedule_interarrival_p99_ms']} ms); "
                          f"{span('mahimahi', functools.partial(_nth_trace, i, ('delivery_error', 'p99_ms')))} ms",
                          reference)
    console.print(table)
    ratios = cpu_ratios(runs)
    if ratios:
        console.print("CPU, clawbed-emu ÷ mm-link (medians; below 1: the emulator costs less): "
                      + ", ".join(f"{what} ×{ratio}" for what, ratio in ratios.items()))
    if mm_failures:
        console.print(f"mm-link ({results.get('mm_link')}) failed live here"
                      + (f" (as user {results['mm_user']})" if results.get("mm_user") else "") + ": "
                      + "; ".join(f"{key}: {why}" for key, why in mm_failures.items()))
    left = {key: names for key, value in mm_runs.items() for r in value if (names := r.get("stopped_after_exit"))}
    if left:
        console.print("mm-link left processes running after it ended (the bench stopped them): "
                      + "; ".join(f"{key}: {', '.join(names)}" for key, names in left.items()))
    if not live or mm_failures:
        why = ("mm-link failed live here, so these instead" if mm_runs else
               "no mm-link here: $MM_LINK or mm-link on PATH to measure it beside the emulator")
        refs = TerminalTable(title=f"Mahimahi figures measured elsewhere ({why}) — not a comparison", show_lines=False)
        for col in ("what", "mm-link", "clawbed-emu then", "where", "when"):
            refs.add_column(col)
        for ref in results.get("references", REFERENCES):
            refs.add_row(ref["what"], ref["mm_link"], ref["clawbed_emu"], ref["where"], ref["when"])
        console.print(refs)
    console.print(f"load average {results['load_average_before']:.2f} → {results['load_average_after']:.2f} "
                  f"on {results['cpus']} CPUs; CPU stolen by the hypervisor per step (%): "
                  + ", ".join(f"{k} {'/'.join(map(str, v))}" for k, v in results["cpu_steal_percent"].items())
                  + " (a loaded or stolen-from machine lowers every figure)")


@click.command()
@click.option("--seconds", type=click.FloatRange(min=1), default=5.0, show_default=True,
              help="Duration of each traffic measurement, s.")
@click.option("--only", default="", help="Comma-separated steps to run (default: all), e.g. tcp,udp_small.")
@click.option("--repeat", type=click.IntRange(min=1), default=1, show_default=True,
              help="Runs of each step; the table shows the range.")
@click.option("--binary", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="clawbed-emu to measure (default: the release build).")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), default=RESULTS, show_default=True,
              help="Where to write the JSON results.")
@click.option("--mm-user", default=None,
              help="Unprivileged user to run mm-link as (it refuses root); default, as root: a system user "
                   "cb<run id>mm made for the bench and removed at exit.")
def main(seconds: float, only: str, repeat: int, binary: Path | None, output: Path, mm_user: str | None) -> None:
    """Measure the emulator and write bench-results/emulator.json."""
    global _binary
    _binary = binary
    console = Console()
    steps = {s.strip() for s in only.split(",") if s.strip()} or None
    with tempfile.TemporaryDirectory(prefix="clawbed-emu-bench-") as tmp:
        results = run_all(Path(tmp), seconds, console, steps, repeat, mm_user)
    results["binary"] = str(binary or BINARY)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2) + "\n")
    render(results, console)
    console.print(f"wrote {output}")


if __name__ == "__main__":
    main()
