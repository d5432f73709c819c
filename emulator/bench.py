"""Benchmark of the emulator: forwarding rate, CPU, timing, latency, a 45-UE cell, Mahimahi mode.

``python -m clawbed.emulator.bench`` runs each measurement on real namespaces and the real
``clawbed-emu`` (``make build``), prints a table beside Mahimahi's reference figures and
writes ``bench-results/emulator.json`` under the repository root.

CPU is the emulator process's (per thread) from ``/proc/PID/task/*/stat``, in percent of one
core over the measured interval. The machine's load average and the CPU time the hypervisor
stole during each step are recorded with the results: on a shared machine or a VM the
figures are lower bounds of what the emulator can do.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import click
import numpy as np
from rich.console import Console
from rich.table import Table

from clawbed.emulator.process import EmulatedCell
from clawbed.emulator.scenarios import constant_mahimahi_trace
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.emulator.truth import Direction, PacketEvent, read_packets, read_truth
from clawbed.netns import Endpoint, Resources, new_run_id
from clawbed.paths import REPO_ROOT, shared_dir

RESULTS = REPO_ROOT / "bench-results" / "emulator.json"
#: Mahimahi's own figures (mm-link on one core), to compare with.
REFERENCE = {
    "tcp_gbit_s": 3.0,
    "tcp_kpps": 270.0,
    "mahimahi_12mbit_interarrival_p99_ms": 1.7,
    "cpu_percent_at_100mbit": "8-10",
}
#: A rate no measurement reaches: the emulator, not its link model, is the bottleneck.
AMPLE_RATE = "40gbit"
NO_DELAYS = {"core_down_ms": 0, "core_up_ms": 0, "air_ms": 0, "sr_period_ms": 0, "grant_delay_ms": 0}
#: Mean idle RTT the model itself gives with every configured delay 0, ms: the request waits
#: for the next subframe boundary (0.5 ms on average) and takes a subframe (1 ms); the reply
#: reaches the base station just after the boundary at which the request left, so it waits
#: almost a whole subframe (1 ms), then takes one (1 ms).
MODEL_IDLE_RTT_MS = 3.5
IPERF_PORT = 5201
SINK_PORT = 9000
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


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

    def start(self) -> "CpuMeter":
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
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(float(np.percentile(values_us, 50)) / 1000, 3),
            "p99_ms": round(float(np.percentile(values_us, 99)) / 1000, 3)}


def idle_cpu(out: Path, seconds: float) -> dict[str, Any]:
    """CPU of a one-UE emulator carrying no traffic: the subframe clock, diag feed and truth alone."""
    with EmulatedCell(1, out, ue={"rate": "10mbit"}, mode="rate") as cell:
        time.sleep(0.5)  # past start-up
        meter = CpuMeter(cell.emulator.pid).start()
        time.sleep(seconds)
        threads = meter.per_thread()
    return {"cpu_percent": round(sum(threads.values()), 1), "cpu_percent_by_thread": threads}


def tcp_max(out: Path, seconds: float) -> dict[str, Any]:
    """Bulk TCP (iperf3, downlink) through an ample-rate link with no configured delay."""
    with EmulatedCell(1, out, ue={"rate": AMPLE_RATE}, mode="rate", delays=NO_DELAYS) as cell:
        result, threads = _iperf(cell, [], seconds)
        counters = cell.stop()
    cpu = sum(threads.values())
    gbit_s = result["end"]["sum_received"]["bits_per_second"] / 1e9
    packets = counters["engine"]["ues"][0]["downlink"]["delivered"]["packets"]
    return {"gbit_s": round(gbit_s, 3), "kpps": round(packets / seconds / 1000, 1), "cpu_percent": round(cpu, 1),
            "cpu_percent_per_gbit_s": round(cpu / gbit_s, 1) if gbit_s else None, "cpu_percent_by_thread": threads}


def udp_small_max(out: Path, seconds: float) -> dict[str, Any]:
    """Unpaced UDP of 64-byte payloads (iperf3 -b 0): the packet rate the emulator forwards."""
    with EmulatedCell(1, out, ue={"rate": AMPLE_RATE}, mode="rate", delays=NO_DELAYS) as cell:
        result, threads = _iperf(cell, ["-u", "-b", "0", "-l", "64"], seconds)
        counters = cell.stop()
    cpu = sum(threads.values())
    down = counters["engine"]["ues"][0]["downlink"]
    delivered = down["delivered"]["packets"]
    io = counters["io"]
    return {"kpps": round(delivered / seconds / 1000, 1), "sent_kpps": round(result["end"]["sum"]["packets"] / seconds / 1000, 1),
            "mbit_s": round(down["delivered"]["bytes"] * 8 / seconds / 1e6, 1), "cpu_percent": round(cpu, 1),
            "cpu_percent_by_thread": threads,
            "dropped_in_emulator": io["handover_full"] + io["pool_exhausted"] + down["dropped_overflow"]["packets"]}


def at_100mbit(out: Path, seconds: float) -> dict[str, Any]:
    """Paced 100 Mbit/s UDP (1400-byte payloads): CPU, and delivery timing error from the packet log."""
    with EmulatedCell(1, out, ue={"rate": "1gbit"}, mode="rate", delays=NO_DELAYS) as cell:
        _, threads = _iperf(cell, ["-u", "-b", "100M", "-l", "1400"], seconds)
        counters = cell.stop()
    log = read_packets(out / "packets.cbcol")
    down = log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)
    error_us = down["t_actual_us"] - down["t_scheduled_us"]
    lateness = counters["engine"]["subframe_lateness"]
    return {"cpu_percent": round(sum(threads.values()), 1), "cpu_percent_by_thread": threads, "packets": int(len(error_us)),
            "delivery_error": _percentiles_ms(error_us),
            "subframe_lateness_p99_ms": round(lateness["p99_us"] / 1000, 3)}


def _ping_median_ms(output: str) -> float:
    rtts = [float(m) for m in re.findall(r"time=([0-9.]+) ms", output)]
    if not rtts:
        raise RuntimeError(f"ping reported no RTT:\n{output}")
    return statistics.median(rtts)


def idle_latency(out: Path, count: int) -> dict[str, Any]:
    """Median ping RTT through the emulator with every configured delay 0, and over a direct veth.

    With no configured delay the model still has its subframe clock (:data:`MODEL_IDLE_RTT_MS`);
    what the emulator adds beyond the model is the RTT less that and less the veth's.
    """
    ping = ["ping", "-n", "-c", str(count), "-i", "0.023"]
    with EmulatedCell(1, out / "emu", ue={"rate": "1gbit"}, mode="rate", delays=NO_DELAYS) as cell:
        emulated = _ping_median_ms(cell.topo.ues[0].run([*ping, str(cell.topo.server_address)]).stdout)
    run_id = new_run_id()
    with Resources(run_id, out / "veth" / "ledger.jsonl") as res:
        a, b = res.namespace("a"), res.namespace("b")
        res.veth(Endpoint(a, res.name("va"), "10.66.0.1"), Endpoint(b, res.name("vb"), "10.66.0.2"))
        direct = _ping_median_ms(a.run([*ping, "10.66.0.2"]).stdout)
    return {"emulated_rtt_ms": round(emulated, 3), "direct_veth_rtt_ms": round(direct, 3),
            "added_ms": round(emulated - direct, 3), "model_rtt_ms": MODEL_IDLE_RTT_MS,
            "added_beyond_model_ms": round(emulated - direct - MODEL_IDLE_RTT_MS, 3)}


def cell_45(out: Path, seconds: float, realtime_priority: int | None = None) -> dict[str, Any]:
    """45 UEs on the busy-cell sample trace (each at its own offset), each receiving 300 kbit/s;
    with ``realtime_priority``, the cell thread runs at that SCHED_FIFO priority."""
    n = 45
    trace = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
    ues = [{"trace": trace, "trace_offset_ms": 1000 * i} for i in range(n)]
    with EmulatedCell(n, out, ue=ues, realtime_priority=realtime_priority) as cell:
        with UdpSink([u.name for u in cell.topo.ues], SINK_PORT) as sink:
            meter = CpuMeter(cell.emulator.pid).start()
            targets = [(str(u.address), SINK_PORT) for u in cell.topo.ues]
            sender = cell.topo.core.popen(send_udp_command(sys.executable, targets, "300kbit", 1000, seconds),
                                          name="udp-send", log_path=out / "udp-send.log")
            sender.popen.wait(timeout=seconds + 60)
            threads = meter.per_thread()
            counters = cell.stop()
            received = sink.counts()
    truth = read_truth(out / "truth.cbcol")
    lateness_ms = truth["wake_lateness_us"] / 1000
    engine = counters["engine"]
    return {"ues": n, "realtime_priority": counters["realtime_priority"],
            "cpu_percent": round(sum(threads.values()), 1), "cpu_percent_by_thread": threads,
            "ues_with_traffic": sum(p > 0 for p, _ in received),
            "subframe_lateness_ms": {"p50": round(float(np.percentile(lateness_ms, 50)), 3),
                                     "p99": round(float(np.percentile(lateness_ms, 99)), 3),
                                     "max": round(float(lateness_ms.max()), 3)},
            "subframes_over_1ms_late_percent": round(100.0 * float((lateness_ms > 1.0).mean()), 2),
            "diag_batches_dropped": engine["diag_batches_dropped"], "truth_rows_dropped": engine["truth_rows_dropped"]}


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
        with EmulatedCell(1, run_out, ue={"mahimahi_trace": path}, mode="mahimahi", delays=NO_DELAYS) as cell:
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


def _cpu_ticks() -> tuple[int, int]:
    """(all, steal) CPU ticks of the machine so far, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields), fields[7]


@dataclass
class Step:
    key: str
    what: str
    run: Callable[[Path], Any]


def run_all(work: Path, seconds: float, console: Console) -> dict[str, Any]:
    mahimahi_dir = shared_dir() / "data" / "mahimahi-traces"
    traces = [constant_mahimahi_trace(work / "constant-12mbit.down", packets_per_ms=1),
              *sorted(mahimahi_dir.glob("*.down"))]
    steps = [
        Step("idle", "idle CPU", lambda d: idle_cpu(d, seconds)),
        Step("tcp", "bulk TCP", lambda d: tcp_max(d, seconds)),
        Step("udp_small", "small-packet UDP", lambda d: udp_small_max(d, seconds)),
        Step("at_100mbit", "100 Mbit/s UDP", lambda d: at_100mbit(d, seconds)),
        Step("idle_latency", "idle RTT", lambda d: idle_latency(d, 100)),
        Step("cell_45_ues", "45-UE cell", lambda d: cell_45(d, seconds)),
        Step("cell_45_ues_fifo", "45-UE cell, SCHED_FIFO cell thread", lambda d: cell_45(d, seconds, realtime_priority=50)),
        Step("mahimahi", "Mahimahi traces", lambda d: mahimahi(d, seconds, traces)),
    ]
    results: dict[str, Any] = {"seconds_per_measurement": seconds, "load_average_before": os.getloadavg()[0],
                               "cpus": os.cpu_count(), "reference_mm_link": REFERENCE}
    steal: dict[str, float] = {}
    for step in steps:
        console.print(f"[dim]measuring {step.what} …[/dim]")
        directory = work / step.key
        directory.mkdir(parents=True)
        total, stolen = _cpu_ticks()
        results[step.key] = step.run(directory)
        # CPU time the hypervisor gave to others while this step ran: a VM's timing noise.
        total_after, stolen_after = _cpu_ticks()
        steal[step.key] = round(100.0 * (stolen_after - stolen) / max(total_after - total, 1), 1)
    results["cpu_steal_percent"] = steal
    results["load_average_after"] = os.getloadavg()[0]
    return results


def _by_thread(result: dict[str, Any]) -> str:
    return ", ".join(f"{name} {pct}" for name, pct in result["cpu_percent_by_thread"].items())


def render(results: dict[str, Any], console: Console) -> None:
    table = Table(title="clawbed-emu benchmark", show_lines=False)
    table.add_column("measurement")
    table.add_column("clawbed-emu", justify="right")
    table.add_column("mm-link reference", justify="right")
    tcp, udp, r100, idle = (results[k] for k in ("tcp", "udp_small", "at_100mbit", "idle_latency"))
    table.add_row("CPU with no traffic (1 UE)", f"{results['idle']['cpu_percent']} % of a core: {_by_thread(results['idle'])}", "")
    table.add_row("TCP through the emulator (iperf3)", f"{tcp['gbit_s']} Gbit/s, {tcp['kpps']} kpps", "~3 Gbit/s, ~270 kpps")
    table.add_row("CPU per Gbit/s (TCP)", f"{tcp['cpu_percent_per_gbit_s']} % of a core", "~33 % (derived: one core, 3 Gbit/s)")
    table.add_row("  TCP: CPU % by thread", _by_thread(tcp), "")
    table.add_row("small-packet UDP (64 B payload)", f"{udp['kpps']} kpps ({udp['mbit_s']} Mbit/s), CPU {udp['cpu_percent']} %", "")
    table.add_row("CPU at 100 Mbit/s", f"{r100['cpu_percent']} % of a core", "~8-10 %")
    table.add_row("delivery timing error p50 / p99",
                  f"{r100['delivery_error']['p50_ms']} / {r100['delivery_error']['p99_ms']} ms", "")
    table.add_row("idle RTT, zero configured delay",
                  f"{idle['emulated_rtt_ms']} ms (veth {idle['direct_veth_rtt_ms']} ms; model {idle['model_rtt_ms']} ms; "
                  f"+{idle['added_beyond_model_ms']} ms beyond the model)", "")
    for key, label in (("cell_45_ues", "45-UE cell"), ("cell_45_ues_fifo", "45-UE cell, SCHED_FIFO")):
        c45 = results[key]
        lat = c45["subframe_lateness_ms"]
        table.add_row(f"{label}: CPU", f"{c45['cpu_percent']} % of a core, {c45['ues_with_traffic']}/45 UEs served", "")
        table.add_row(f"  {label}: CPU % by thread", _by_thread(c45), "")
        table.add_row(f"  {label}: subframe lateness p50 / p99 / max",
                      f"{lat['p50']} / {lat['p99']} / {lat['max']} ms ({c45['subframes_over_1ms_late_percent']} % > 1 ms)", "")
    for row in results["mahimahi"]:
        reference = "~1.7 ms" if row["trace"].startswith("constant-12mbit") else ""
        table.add_row(f"mahimahi {row['trace']}: inter-arrival p99 (trace's own); delivery error p99",
                      f"{row['interarrival_p99_ms']} ms ({row['schedule_interarrival_p99_ms']} ms); "
                      f"{row['delivery_error']['p99_ms']} ms", reference)
    console.print(table)
    console.print(f"load average {results['load_average_before']:.2f} → {results['load_average_after']:.2f} "
                  f"on {results['cpus']} CPUs; CPU stolen by the hypervisor per step (%): "
                  + ", ".join(f"{k} {v}" for k, v in results["cpu_steal_percent"].items())
                  + " (a loaded or stolen-from machine lowers every figure)")


@click.command()
@click.option("--seconds", type=click.FloatRange(min=1), default=5.0, show_default=True,
              help="Duration of each traffic measurement, s.")
def main(seconds: float) -> None:
    """Measure the emulator and write bench-results/emulator.json."""
    console = Console()
    with tempfile.TemporaryDirectory(prefix="clawbed-emu-bench-") as tmp:
        results = run_all(Path(tmp), seconds, console)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    render(results, console)
    console.print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
