"""The emulator as a link: open-loop capacity, idle RTT, pause, and interrupted runs.

Real namespaces, the real ``clawbed-emu`` binary (``make build``), real kernel sockets.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from clawbed.emulator.process import EmulatedCell, EmulatorError
from clawbed.emulator.scenarios import constant_mahimahi_trace
from clawbed.emulator.traffic import UDP_IP_OVERHEAD_BYTES, UdpSink, send_udp_command
from clawbed.emulator.truth import Direction, PacketEvent, read_packets, read_truth

pytestmark = pytest.mark.root

SINK_PORT = 9000
#: Subframes per measurement window: 100 ms.
WINDOW_MS = 100
#: Subframes at the end of a run whose deliveries may not have been written when it stopped.
STOP_MARGIN_MS = 10
#: Delays that make the queue the only thing between sender and receiver.
NO_DELAYS = {"core_down_ms": 0, "core_up_ms": 0, "air_ms": 0, "sr_period_ms": 0, "grant_delay_ms": 0}


def flood(cell: EmulatedCell, rate: str, seconds: float, ues: list[int] | None = None, payload_bytes: int = 1400):
    """A paced UDP flow from the core namespace to the sink port of each UE (default all)."""
    targets = [(str(cell.topo.ues[i].address), SINK_PORT) for i in (ues or range(len(cell.topo.ues)))]
    return cell.topo.core.popen(send_udp_command(sys.executable, targets, rate, payload_bytes, seconds),
                                name="udp-send", log_path=cell.output_dir / "udp-send.log")


def backlogged_windows(queue_bytes: np.ndarray, window_ms: int) -> list[int]:
    """Start of each aligned window throughout which the queue was never empty (the subframe
    before the window included), so every subframe of it could use its whole capacity."""
    starts = []
    for start in range(window_ms, len(queue_bytes) - window_ms + 1, window_ms):
        if (queue_bytes[start - 1:start + window_ms] > 0).all():
            starts.append(start)
    return starts


@pytest.mark.parametrize("mode", ["rate", "mahimahi"])
def test_open_loop_delivers_the_trace_per_100_ms(tmp_path: Path, mode: str) -> None:
    """A flow above capacity keeps the queue backlogged; every backlogged 100 ms window then
    delivers the trace's capacity (24 Mbit/s = 300 000 bytes per 100 ms) within 1 %: at
    most one packet (1428 bytes, 0.48 %) straddles each window edge."""
    capacity_bytes_per_ms = 3000
    if mode == "rate":
        ue = {"rate": "24mbit"}
    else:
        ue = {"mahimahi_trace": constant_mahimahi_trace(tmp_path / "2x12mbit.down", packets_per_ms=2)}
    out = tmp_path / "run"
    with EmulatedCell(1, out, ue=ue, mode=mode, delays=NO_DELAYS) as cell:
        with UdpSink([cell.topo.ues[0].name], SINK_PORT) as sink:
            sender = flood(cell, "36mbit", 3.0)
            sender.popen.wait(timeout=30)
            time.sleep(0.3)  # let the queue drain into the sink
            counters = cell.stop()
            received_packets, _ = sink.counts()[0]
    truth = read_truth(out / "truth.cbcol")
    delivered = truth.ue(0, "delivered_bytes").astype(np.int64)
    windows = backlogged_windows(truth.ue(0, "queue_bytes"), WINDOW_MS)
    assert len(windows) >= 15, f"only {len(windows)} backlogged windows: the flow did not saturate the link"
    expected = capacity_bytes_per_ms * WINDOW_MS
    per_window = np.array([delivered[s:s + WINDOW_MS].sum() for s in windows])
    worst = np.abs(per_window - expected).max() / expected
    assert worst <= 0.01, f"delivered per 100 ms {per_window.min()}..{per_window.max()}, expected {expected} ± 1 %"

    # The packet log agrees with the truth window by window: a packet handed over in
    # subframe k is written to the TUN at the end of k (no air delay here). The queue is
    # still backlogged when the run stops, so the packets of its last subframes may still be
    # on their way to the writer (counted as in flight at shutdown, never written): the
    # windows that reach into the last STOP_MARGIN_MS subframes are left out.
    log = read_packets(out / "packets.cbcol")
    down = log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK, ue=0)
    written_ms = down["t_scheduled_us"] // 1000 - 1
    for s in (s for s in windows if s + WINDOW_MS <= len(delivered) - STOP_MARGIN_MS):
        in_window = (written_ms >= s) & (written_ms < s + WINDOW_MS)
        assert down["bytes"][in_window].sum() == delivered[s:s + WINDOW_MS].sum()

    # End to end: the UE's socket got every packet the emulator wrote.
    assert counters["engine"]["ues"][0]["downlink"]["delivered"]["packets"] == received_packets > 0


def _ping_rtts_ms(output: str) -> list[float]:
    return [float(m) for m in re.findall(r"time=([0-9.]+) ms", output)]


@pytest.mark.parametrize("delays", [
    {"core_down_ms": 20, "core_up_ms": 15, "air_ms": 2, "sr_period_ms": 0, "grant_delay_ms": 4},
    {"core_down_ms": 25, "core_up_ms": 25, "air_ms": 1, "sr_period_ms": 10, "grant_delay_ms": 8},
])
def test_idle_rtt_is_the_configured_delays(tmp_path: Path, delays: dict[str, float]) -> None:
    """Idle ping RTT from the model (emulator/dataplane/src/engine.rs, uplink.rs):

    uplink   = SR wait [0, P) + grant G, then the next subframe boundary [0, 1) ms, the
               subframe (1 ms), air, core up;
    downlink = core down, the next subframe boundary [0, 1) ms, the subframe (1 ms), air.

    So RTT ∈ [B, B + P + 2 ms) with B = G + core up + core down + 2·air + 2 ms. No ping may
    be faster than B (the emulator never delivers early); the median must lie in the range,
    with 0.5 ms allowed for the kernel and the emulator's wake-up on a shared machine.
    """
    base = delays["grant_delay_ms"] + delays["core_up_ms"] + delays["core_down_ms"] + 2 * delays["air_ms"] + 2
    upper = base + delays["sr_period_ms"] + 2
    with EmulatedCell(1, tmp_path, ue={"rate": "10mbit"}, mode="rate", delays=delays) as cell:
        # An interval that is no multiple of the SR period, so the pings see every SR phase.
        out = cell.topo.ues[0].run(["ping", "-n", "-c", "20", "-i", "0.113", str(cell.topo.server_address)]).stdout
    rtts = _ping_rtts_ms(out)
    assert len(rtts) == 20, out
    assert min(rtts) >= base - 0.05, f"RTTs {sorted(rtts)} below the model's minimum {base} ms"
    median = statistics.median(rtts)
    assert base <= median <= upper + 0.5, f"median RTT {median} ms outside [{base}, {upper}] ms; all: {sorted(rtts)}"


def test_pause_stops_emulated_time(tmp_path: Path) -> None:
    """While paused no subframe runs: the run's emulated time is its wall time minus the pause,
    and every subframe that ran is in the ground truth."""
    with EmulatedCell(1, tmp_path, ue={"rate": "10mbit"}, mode="rate") as cell:
        time.sleep(0.3)
        cell.emulator.pause()
        time.sleep(1.0)
        cell.emulator.resume()
        time.sleep(0.3)
        counters = cell.stop()
    assert counters["engine"]["paused_ms"] >= 950
    truth = read_truth(tmp_path / "truth.cbcol")
    assert truth.rows == counters["emulated_ms"]
    assert (np.diff(truth["t_ms"]) == 1).all()
    assert counters["emulated_ms"] < 1000, "the paused second was counted as emulated time"


def test_sigint_mid_run_keeps_every_subframe(tmp_path: Path) -> None:
    """SIGINT (Ctrl-C) stops the emulator cleanly: the ground truth holds every subframe that
    ran (the last, partial chunk included) and the packet log every delivery."""
    with EmulatedCell(1, tmp_path, ue={"rate": "20mbit"}, mode="rate", delays=NO_DELAYS) as cell:
        with UdpSink([cell.topo.ues[0].name], SINK_PORT):
            flood(cell, "10mbit", 2.3)
            time.sleep(2.5)
            cell.emulator.interrupt()
            counters = cell.stop()
    truth = read_truth(tmp_path / "truth.cbcol")
    assert not truth.truncated
    assert truth.rows == counters["emulated_ms"] > 2000
    assert truth.chunks == -(-truth.rows // 1000)  # the one-second chunks and the partial last one
    log = read_packets(tmp_path / "packets.cbcol")
    delivered = counters["engine"]["ues"][0]["downlink"]["delivered"]
    down = log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)
    assert len(down["bytes"]) == delivered["packets"] > 0
    assert int(down["bytes"].sum()) == delivered["bytes"]


def test_killed_run_keeps_every_complete_chunk(tmp_path: Path) -> None:
    """A run killed without warning (SIGKILL) leaves every complete one-second chunk readable;
    a file cut inside a chunk reads as the chunks before it, marked truncated."""
    with EmulatedCell(1, tmp_path, ue={"rate": "20mbit"}, mode="rate", delays=NO_DELAYS) as cell:
        with UdpSink([cell.topo.ues[0].name], SINK_PORT):
            flood(cell, "10mbit", 2.0)
            time.sleep(2.6)
            os.kill(cell.emulator.pid, signal.SIGKILL)
            with pytest.raises(EmulatorError, match="signal 9"):
                cell.stop()
    truth = read_truth(tmp_path / "truth.cbcol")
    assert truth.rows >= 2000 and truth.rows == 1000 * truth.chunks
    assert (truth["t_ms"] == np.arange(truth.rows)).all()
    assert read_packets(tmp_path / "packets.cbcol").rows > 0

    whole = (tmp_path / "truth.cbcol").read_bytes()
    cut = tmp_path / "cut.cbcol"
    cut.write_bytes(whole[:len(whole) - 100])
    partial = read_truth(cut)
    assert partial.truncated and partial.chunks == truth.chunks - 1
    assert (partial["ues[0].delivered_bytes"] == truth["ues[0].delivered_bytes"][:partial.rows]).all()


def test_delivered_udp_payload_matches_the_truth(tmp_path: Path) -> None:
    """Below capacity nothing queues up: every datagram sent arrives, and the truth's delivered
    bytes are the datagrams' IP bytes."""
    with EmulatedCell(1, tmp_path, ue={"rate": "20mbit"}, mode="rate") as cell:
        with UdpSink([cell.topo.ues[0].name], SINK_PORT) as sink:
            sender = flood(cell, "5mbit", 1.5)
            sender.popen.wait(timeout=30)
            time.sleep(0.3)
            counters = cell.stop()
            packets, payload = sink.counts()[0]
    truth = read_truth(tmp_path / "truth.cbcol")
    assert packets > 0
    assert int(truth.ue(0, "delivered_bytes").sum()) == payload + packets * UDP_IP_OVERHEAD_BYTES
    assert counters["engine"]["ues"][0]["downlink"]["dropped_overflow"]["packets"] == 0


def test_a_run_with_a_duration_ends_by_itself(tmp_path: Path) -> None:
    """``duration_s``: the emulator stops on its own after that much emulated time; stopping
    it afterwards collects its counters, and its truth has exactly those subframes."""
    with EmulatedCell(1, tmp_path, ue={"rate": "10mbit"}, mode="rate", duration_s=0.5) as cell:
        deadline = time.monotonic() + 10
        while cell.emulator.running and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(EmulatorError, match=r"exited \(exit code 0\) while running"):
            cell.emulator.check_alive()
    assert cell.counters is not None and cell.counters["emulated_ms"] == 500
    assert read_truth(tmp_path / "truth.cbcol").rows == 500
