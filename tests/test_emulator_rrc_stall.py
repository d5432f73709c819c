"""The RRC/DRX model and link-layer stalls on the real data plane (issue 12, item 2).

- A promotion holds a downlink flight: a burst sent to an idle UE waits at the base station
  through the paging wait and the promotion (ground truth: queued, nothing delivered, RRC
  not connected), then goes out; in the packet log every packet's delay through the
  emulator is at least the promotion the truth shows.
- A stall delays, then releases a burst: during the subframes a trace's ``outage`` column
  marks nothing is delivered and the queue grows; afterwards the queued bytes leave at the
  cell's full rate (whole band, full-band TBS per subframe) until the queue is back to the
  flow's own level. The same with the ``poisson`` stall process.

Expected values follow from the conditions (constant MCS, empty cell, no HARQ failures),
computed here with the 36.213 tables, independently of the emulator.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clawbed.emulator.process import EmulatedCell
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.emulator.truth import Direction, PacketEvent, read_packets, read_truth
from clawbed.lte import tbs_bits
from clawbed.traces.io import write_trace
from clawbed.traces.schema import make_trace, new_metadata

pytestmark = pytest.mark.root

SINK_PORT = 9000
N_RB = 50
MCS = 15
CLEAN_HARQ = {"bler": 0.0, "retx_bler": 0.0}
#: Outage pattern of the stall trace: 1000 ms up, 500 ms out, repeating.
UP_MS, OUT_MS = 1000, 500


def _trace(path: Path, seconds: float, outage: np.ndarray | None = None) -> Path:
    rows = round(seconds * 1000)
    columns: dict[str, np.ndarray] = {"mcs": np.full(rows, MCS), "other_rbs": np.zeros(rows)}
    if outage is not None:
        columns["outage"] = np.resize(outage, rows)
    metadata = new_metadata(bandwidth_mhz=10, n_antennas=2, duration_ms=rows, source="synth",
                            provenance={"generator": "tests/test_emulator_rrc_stall.py"})
    write_trace(make_trace(metadata, **columns), path)
    return path


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of True in ``mask`` (end exclusive)."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_a_promotion_holds_a_downlink_flight(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.cbt", 10)
    # The default LTE model with a short tail so that the UE is idle after 1.5 s.
    rrc = {"kind": "lte", "tail_ms": 1000}
    with EmulatedCell(1, tmp_path / "run", ue={"trace": trace}, cell={"rrc": rrc, "harq": CLEAN_HARQ}) as cell:
        with UdpSink([cell.topo.ues[0].name], SINK_PORT) as sink:
            time.sleep(2.5)
            # ~30 packets within ~20 ms: a flight the server sends to an idle UE.
            cell.topo.core.run(send_udp_command(sys.executable, [(str(cell.topo.ues[0].address), SINK_PORT)],
                                                "16mbit", 1300, 0.02), timeout_s=30)
            time.sleep(4.0)
            cell.stop()
            received = sink.counts()
    truth = read_truth(tmp_path / "run" / "truth.cbcol")
    rrc_state = truth.ue(0, "rrc")
    queue = truth.ue(0, "queue_bytes")
    delivered = truth.ue(0, "delivered_packets")
    sent = int(delivered.sum())
    assert sent >= 10 and received[0][0] == sent, (sent, received)
    first_queued = int(np.flatnonzero(queue > 0)[0])
    assert rrc_state[first_queued - 1] == "idle", "the UE was not idle when the flight arrived"
    # Nothing is delivered before the UE is connected again; until then the flight waits.
    connected_at = first_queued + int(np.flatnonzero(rrc_state[first_queued:] == "connected")[0])
    assert delivered[:connected_at].sum() == 0
    assert (queue[first_queued:connected_at] > 0).all()
    promoting = int((rrc_state[first_queued:connected_at] == "promoting").sum())
    paging = int((rrc_state[first_queued:connected_at] == "idle").sum())
    # The measured distribution's bulk (LTE13: p25/p50/p75 319/435/558 ms); paging ≤ 1.28 s.
    assert 100 <= promoting <= 2000, promoting
    assert paging < 1280, paging
    # The whole flight went out once connected (a few subframes at ~14 Mbit/s).
    assert delivered[connected_at:connected_at + 50].sum() == sent
    log = read_packets(tmp_path / "run" / "packets.cbcol")
    down = log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)
    delay_ms = (down["t_actual_us"] - down["t_arrival_us"]) / 1000
    assert len(delay_ms) == sent
    assert delay_ms.min() >= promoting, (delay_ms.min(), promoting)
    print(f"promotion {promoting} ms after {paging} ms paging wait; delivery delays "
          f"{delay_ms.min():.1f}–{delay_ms.max():.1f} ms for {sent} packets")


def _send_one(python: str, address: str, payload_bytes: int) -> list[str]:
    """The argv that sends one UDP datagram of ``payload_bytes`` to ``address``:SINK_PORT."""
    return [python, "-c", "import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                          f"s.sendto(bytes({payload_bytes}), ({address!r}, {SINK_PORT}))"]


#: The umts model's FACH defaults (emulator/policies.json), restated here as the oracle.
FACH_BPS, FACH_THRESHOLD_BYTES, FACH_PROMOTION_MS = 32_000, 512, 1_500
SMALL_PAYLOAD = 200
UDP_IP_BYTES = 28


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_umts_fach_passes_small_packets_and_promotes_for_a_flight(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.cbt", 10)
    # A 1 s DCH tail: the UE is in FACH from about 1 s on (FACH → IDLE only after 12 s more).
    rrc = {"kind": "umts", "dch_tail_ms": 1000}
    with EmulatedCell(1, tmp_path / "run", ue={"trace": trace}, cell={"rrc": rrc, "harq": CLEAN_HARQ}) as cell:
        ue, core = cell.topo.ues[0], cell.topo.core
        with UdpSink([ue.name, core.name], SINK_PORT) as sink:
            time.sleep(2.5)
            core.run(_send_one(sys.executable, str(ue.address), SMALL_PAYLOAD), timeout_s=30)
            time.sleep(0.5)
            ue.run(_send_one(sys.executable, str(cell.topo.server_address), SMALL_PAYLOAD), timeout_s=30)
            time.sleep(0.5)
            # ~30 packets within ~20 ms: a response's first flight, far above the threshold.
            core.run(send_udp_command(sys.executable, [(str(ue.address), SINK_PORT)], "16mbit", 1300, 0.02),
                     timeout_s=30)
            time.sleep(3.0)
            cell.stop()
            received = sink.counts()
    truth = read_truth(tmp_path / "run" / "truth.cbcol")
    rrc_state, t_ms = truth.ue(0, "rrc"), truth["t_ms"]
    delivered = truth.ue(0, "delivered_packets")
    log = read_packets(tmp_path / "run" / "packets.cbcol")

    def state_at(t_us: int) -> str:
        return str(rrc_state[min(int(np.searchsorted(t_ms, t_us // 1000)), len(t_ms) - 1)])

    small_bytes = SMALL_PAYLOAD + UDP_IP_BYTES
    down = log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)
    up = log.select(event=PacketEvent.DELIVER, direction=Direction.UPLINK)
    small_down = np.flatnonzero(down["bytes"] == small_bytes)
    small_up = np.flatnonzero(up["bytes"] == small_bytes)
    assert len(small_down) == 1 and len(small_up) == 1, (down["bytes"], up["bytes"])
    assert received[0][0] >= 11 and received[1][0] == 1, received
    first_promoting = int(t_ms[np.flatnonzero(rrc_state == "promoting")[0]])
    # The small packets: carried in FACH, each delayed by its bytes at the FACH rate (228 B at
    # 4 B/ms = 57 ms) plus air and core delays (the uplink also its SR wait and grant).
    on_air_ms = small_bytes * 8 / FACH_BPS * 1000
    for log_rows, i, slack_ms in ((down, small_down[0], 60), (up, small_up[0], 90)):
        arrival_us, actual_us = int(log_rows["t_arrival_us"][i]), int(log_rows["t_actual_us"][i])
        assert state_at(arrival_us) == "fach" and actual_us // 1000 < first_promoting
        assert on_air_ms <= (actual_us - arrival_us) / 1000 <= on_air_ms + slack_ms, (actual_us - arrival_us, on_air_ms)
    delay_ms = (down["t_actual_us"][small_down[0]] - down["t_arrival_us"][small_down[0]]) / 1000
    up_delay_ms = (up["t_actual_us"][small_up[0]] - up["t_arrival_us"][small_up[0]]) / 1000
    # The flight: FACH → DCH for the promotion, nothing delivered meanwhile, then all of it.
    i_promoting = int(np.flatnonzero(rrc_state == "promoting")[0])
    i_connected = i_promoting + int(np.flatnonzero(rrc_state[i_promoting:] == "connected")[0])
    assert rrc_state[i_promoting - 1] == "fach"
    held_ms = int(t_ms[i_connected] - t_ms[i_promoting])
    assert abs(held_ms - FACH_PROMOTION_MS) <= 1, held_ms
    assert delivered[i_promoting:i_connected].sum() == 0
    flight = down["bytes"] > FACH_THRESHOLD_BYTES
    flight_delay_ms = (down["t_actual_us"][flight] - down["t_arrival_us"][flight]) / 1000
    assert flight.sum() == received[0][0] - 1 >= 10
    assert flight_delay_ms.min() >= FACH_PROMOTION_MS - 5, flight_delay_ms.min()
    print(f"FACH: {small_bytes} B down in {delay_ms:.1f} ms, up in {up_delay_ms:.1f} ms "
          f"(on air {on_air_ms:.0f} ms); flight of {flight.sum()} held {held_ms} ms, "
          f"delays {flight_delay_ms.min():.0f}–{flight_delay_ms.max():.0f} ms")


def _stall_run(out: Path, cell_config: dict[str, Any], trace: Path, seconds: float, rate: str) -> tuple[Any, Any]:
    with EmulatedCell(1, out, ue={"trace": trace}, cell=cell_config) as cell:
        with UdpSink([cell.topo.ues[0].name], SINK_PORT):
            cell.topo.core.run(send_udp_command(sys.executable, [(str(cell.topo.ues[0].address), SINK_PORT)],
                                                rate, 1300, seconds), timeout_s=seconds + 30)
            time.sleep(1.5)
            cell.stop()
    return read_truth(out / "truth.cbcol"), read_packets(out / "packets.cbcol")


def _check_stalls(truth: Any, log: Any, full_tbs_bytes: int, min_stalls: int) -> list[str]:
    stalled = truth.ue(0, "stalled").astype(bool)
    delivered = truth.ue(0, "delivered_packets")
    queue = truth.ue(0, "queue_bytes")
    carried = truth.ue(0, "carried_bytes")
    alloc = truth.ue(0, "alloc_rbs")
    down = log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)
    t_deliver_ms = down["t_actual_us"] / 1000
    notes = []
    checked = 0
    for start, end in _runs(stalled):
        if start < 100 or end >= truth.rows - 300 or delivered[start - 100:start].sum() == 0 \
                or delivered[end + 300:end + 400].sum() == 0:
            continue  # the flow had not started, or ended during the stall or its burst
        # Nothing delivered during the stall; the queue grows.
        assert delivered[start:end].sum() == 0 and carried[start:end].sum() == 0
        assert queue[end - 1] > queue[start - 1]
        # No downlink packet reaches the UE during the stall (air delay < 2 ms).
        inside = ((t_deliver_ms >= start + 2) & (t_deliver_ms < end)).sum()
        assert inside == 0, (start, end, inside)
        # Afterwards: the burst at the cell's full rate until the backlog is gone.
        drain = end + int(np.argmax(queue[end:] < 2 * full_tbs_bytes))
        assert drain > end + 5, "no backlog after the stall"
        # (up to the next stall, if one comes before the backlog is gone)
        upto = min(drain - 1, end + int(np.argmax(stalled[end:])) if stalled[end:].any() else drain - 1)
        assert (alloc[end:upto] == N_RB).all()
        assert (carried[end:upto] == full_tbs_bytes).all()
        burst = int(delivered[end:drain].sum())
        notes.append(f"stall {end - start} ms: queue {queue[start - 1]}→{queue[end - 1]} B, "
                     f"released in {drain - end} ms ({burst} packets)")
        checked += 1
    assert checked >= min_stalls, notes
    return notes


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_a_stall_delays_then_releases_a_burst(tmp_path: Path) -> None:
    outage = np.concatenate([np.zeros(UP_MS, np.uint8), np.ones(OUT_MS, np.uint8)])
    trace = _trace(tmp_path / "t.cbt", 30, outage)
    full_tbs_bytes = tbs_bits(MCS, N_RB) // 8
    truth, log = _stall_run(tmp_path / "run", {"rrc": "off", "harq": CLEAN_HARQ}, trace, 6, "5mbit")
    stalled = truth.ue(0, "stalled").astype(bool)
    # The truth marks exactly the trace's outage subframes.
    np.testing.assert_array_equal(stalled, np.resize(outage, truth.rows).astype(bool))
    for note in _check_stalls(truth, log, full_tbs_bytes, min_stalls=2):
        print(note)


@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_the_stall_process_delays_then_releases_bursts(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.cbt", 30)
    full_tbs_bytes = tbs_bits(MCS, N_RB) // 8
    stall = {"kind": "poisson", "mean_interval_s": 0.6, "min_ms": 100, "max_ms": 400}
    truth, log = _stall_run(tmp_path / "run", {"rrc": "off", "stall": stall, "harq": CLEAN_HARQ}, trace, 6, "5mbit")
    for note in _check_stalls(truth, log, full_tbs_bytes, min_stalls=2):
        print(note)

