"""The emulated cell in closed loop: allocations, RSRQ, loss reports, fairness, 45 UEs.

Each scenario runs the real ``clawbed-emu`` once (module-scoped fixtures) with constant,
hand-checkable conditions and a UDP flow from the core namespace; the tests compare what
the ground truth and the diag feed say with what the model (``emulator-model.md``) requires,
computed here independently of the emulator.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clawbed.emulator import diag
from clawbed.emulator.process import EmulatedCell
from clawbed.emulator.scenarios import constant_trace
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.emulator.truth import Direction, PacketEvent, Truth, read_packets, read_truth
from clawbed.lte import db_to_linear, rsrq_linear, tbs_bits
from clawbed.netns import socket_in_namespace

pytestmark = pytest.mark.root

SINK_PORT = 9000
N_RB = 50
MCS = 15
#: Other users' demand B_k: each value held 7 ms, cycling (covers no, partial and full load).
OTHER_RBS_CYCLE = np.repeat([0, 5, 10, 20, 30, 40, 50], 7)
OTHER_USERS = 2
#: No HARQ failures: every RB decision is the scheduler's alone.
CLEAN_HARQ = {"bler": 0.0, "retx_bler": 0.0}


@dataclass
class Run:
    """One finished emulator run: its output directory, counters, and what was collected live."""

    out: Path
    counters: dict[str, Any]
    truth: Truth
    live: list[dict[str, Any]]
    received: list[tuple[int, int]]


def _run(out: Path, n_ues: int, *, flood_rate: str, seconds: float = 3.0, ue: dict[str, Any] | list[dict[str, Any]],
         live_messages: int = 0, **fields: Any) -> Run:
    """Run the cell with a UDP flow to every UE; optionally read UE 0's live diag feed."""
    live: list[dict[str, Any]] = []
    # These scenarios check the scheduler, RSRQ and loss reports against hand-computed values
    # from the first packet on: without the RRC/DRX model, whose wait for the first DRX
    # on-duration of a flow (up to 40 ms) test_emulator_rrc_stall.py checks.
    fields["cell"] = {"rrc": "off", **fields.get("cell", {})}
    with EmulatedCell(n_ues, out, ue=ue, **fields) as cell:
        with UdpSink([u.name for u in cell.topo.ues], SINK_PORT) as sink:
            targets = [(str(u.address), SINK_PORT) for u in cell.topo.ues]
            sender = cell.topo.core.popen(send_udp_command(sys.executable, targets, flood_rate, 1400, seconds),
                                          name="udp-send", log_path=out / "udp-send.log")
            if live_messages:
                live = asyncio.run(_collect(cell.topo.ues[0].name, cell.emulator.diag_port(0), live_messages))
            sender.popen.wait(timeout=60)
            counters = cell.stop()
            received = sink.counts()
    return Run(out, counters, read_truth(out / "truth.cbcol"), live, received)


async def _collect(ns_name: str, port: int, count: int) -> list[dict[str, Any]]:
    messages = []
    async for message in diag.subscribe(ns_name, port):
        messages.append(message)
        if len(messages) == count:
            break
    return messages


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return constant_trace(tmp_path_factory.mktemp("trace") / "cycle.cbt", mcs=MCS, other_rbs=OTHER_RBS_CYCLE,
                          other_users=OTHER_USERS, seconds=10)


@pytest.fixture(scope="module")
def proportional_fair(tmp_path_factory: pytest.TempPathFactory, trace: Path) -> Run:
    # 20 Mbit/s into a cell whose whole band carries 14.1 Mbit/s at MCS 15: always backlogged.
    return _run(tmp_path_factory.mktemp("pf"), 1, flood_rate="20mbit", ue={"trace": trace}, live_messages=500,
                cell={"scheduler": "proportional-fair", "harq": CLEAN_HARQ, "rsrq": {"noise_db": 0.0}})


@pytest.fixture(scope="module")
def background_first(tmp_path_factory: pytest.TempPathFactory, trace: Path) -> Run:
    return _run(tmp_path_factory.mktemp("bf"), 1, flood_rate="20mbit", ue={"trace": trace},
                cell={"scheduler": "background-first", "harq": CLEAN_HARQ})


def _backlogged(truth: Truth, ue: int = 0) -> np.ndarray:
    """Subframes (from 1) that start with at least two full-band transport blocks queued, so
    the UE's demand is the whole band whatever arrives."""
    full_band_bytes = tbs_bits(MCS, N_RB) // 8
    queue = truth.ue(ue, "queue_bytes")
    k = np.arange(1, truth.rows)
    return k[queue[k - 1] >= 2 * full_band_bytes]


def _other_rbs(truth: Truth) -> np.ndarray:
    """B_k of every row, from the trace (independently of what the truth reports)."""
    return np.resize(OTHER_RBS_CYCLE, truth.rows)


def test_background_first_gives_the_rest_of_the_band(background_first: Run) -> None:
    truth = background_first.truth
    k = _backlogged(truth)
    assert len(k) > 2000, "the flow did not keep the UE backlogged"
    assert (truth.ue(0, "demand_rbs")[k] == N_RB).all()
    expected = N_RB - _other_rbs(truth)[k]
    got = truth.ue(0, "alloc_rbs")[k]
    wrong = np.flatnonzero(got != expected)
    assert wrong.size == 0, f"{wrong.size} subframes differ, e.g. t={k[wrong[:5]]}: got {got[wrong[:5]]}, want {expected[wrong[:5]]}"
    assert (truth["other_alloc_rbs"][k] == _other_rbs(truth)[k]).all()


def test_proportional_fair_gives_at_least_the_fair_share(proportional_fair: Run) -> None:
    """Backlogged, the UE gets what the other users leave, but never less than its share of
    the band among the active users (N_rb / (other users + 1), ⌊·⌋ or ⌈·⌉: the remainder RB
    rotates); the band is fully used."""
    truth = proportional_fair.truth
    k = _backlogged(truth)
    assert len(k) > 2000, "the flow did not keep the UE backlogged"
    b = _other_rbs(truth)[k]
    share = N_RB / (OTHER_USERS + 1)
    lo = np.maximum(N_RB - b, np.floor(share))
    hi = np.maximum(N_RB - b, np.ceil(share))
    got = truth.ue(0, "alloc_rbs")[k]
    wrong = np.flatnonzero((got < lo) | (got > hi))
    assert wrong.size == 0, f"{wrong.size} subframes outside the fair share, e.g. B={b[wrong[:5]]}: got {got[wrong[:5]]}"
    assert (truth["other_alloc_rbs"][k] + got == N_RB).all()
    # Both outcomes occur: the other users' full demand fits sometimes, and sometimes not.
    assert (got == N_RB - b).any() and (got > N_RB - b).any()


def _diag_file_messages(run: Run, type_id: str) -> list[dict[str, Any]]:
    return list(diag.of_type(diag.read_diag_file(run.out / "diag-ue0.jsonl"), type_id))


def test_diag_rsrq_is_eq6_of_the_true_allocation(proportional_fair: Run) -> None:
    """With no measurement noise, the reported RSRQ is Eq. 6 of the subframe's total
    allocation A_k = other users' RBs + the UE's, up to the phones' 0.0625 dB quantisation."""
    run = proportional_fair
    assert run.counters["engine"]["diag_batches_dropped"] == 0
    truth = run.truth
    messages = _diag_file_messages(run, diag.SERV_CELL_MEASUREMENT)
    t = diag.subframe_times_ms(messages)
    assert len(t) == truth.rows and (t == truth["t_ms"]).all()
    reported_db = np.array([m["Subpackets"][0]["RSRQ"] for m in messages])
    total = truth["other_alloc_rbs"].astype(np.int64) + truth.ue(0, "alloc_rbs")
    assert (total == truth["total_alloc_rbs"]).all()
    eq6_db = 10 * np.log10(rsrq_linear(total / N_RB, 2))
    error = np.abs(reported_db - eq6_db)
    assert error.max() <= 0.0625 / 2 + 1e-9, f"RSRQ differs from Eq. 6 by up to {error.max():.4f} dB"
    # The RSRQ spans the load range this run covered, so the check above was not vacuous.
    assert db_to_linear(reported_db).max() > 1.5 * db_to_linear(reported_db).min()


def test_diag_pdsch_reports_the_true_allocation(proportional_fair: Run) -> None:
    """PDSCH statistics: own RBs S_k, MCS and TB size (bytes) of every scheduled subframe."""
    truth = proportional_fair.truth
    messages = _diag_file_messages(proportional_fair, diag.PDSCH_STAT)
    assert (diag.subframe_times_ms(messages) == truth["t_ms"]).all()
    records = [m["Records"][0] for m in messages]
    assert [r["Num RBs"] for r in records] == truth.ue(0, "alloc_rbs").tolist()
    scheduled = [(i, r["Transport Blocks"][0]) for i, r in enumerate(records) if r["Num RBs"] > 0]
    assert scheduled
    assert all(tb["MCS"] == MCS and tb["Modulation Type"] == "16QAM" for _, tb in scheduled)
    tbs = truth.ue(0, "tbs_bits")
    assert all(tb["TB Size"] * 8 == tbs[i] for i, tb in scheduled)


def test_live_diag_feed_matches_its_file(proportional_fair: Run) -> None:
    """The TCP feed in the UE's namespace sends the same messages as the file, in order, each
    shaped like a MobileInsight decoded message."""
    live = proportional_fair.live
    assert len(live) == 500
    assert {m["type_id"] for m in live} == {diag.PDSCH_STAT, diag.SERV_CELL_MEASUREMENT, diag.MAC_DL_TRANSPORT_BLOCK,
                                            diag.RLC_DL_STATS, diag.PDCP_DL_STATS}
    in_file = list(diag.read_diag_file(proportional_fair.out / "diag-ue0.jsonl"))
    first = in_file.index(live[0])
    assert in_file[first:first + len(live)] == live
    assert all(isinstance(m["timestamp"], float) for m in live)


@pytest.fixture(scope="module")
def lossy(tmp_path_factory: pytest.TempPathFactory, trace: Path) -> Run:
    # A small BS buffer (overflow drops) and a bad channel that RLC does not recover (losses).
    return _run(tmp_path_factory.mktemp("lossy"), 1, flood_rate="20mbit",
                ue={"trace": trace, "cell": {"queue_limit_bytes": 60_000}},
                cell={"harq": {"bler": 0.3, "retx_bler": 0.7, "max_tx": 2}, "rlc": {"max_retx": 0}})


def test_overflow_and_rlc_loss_counts_agree(lossy: Run) -> None:
    """Overflow drops and RLC losses: the diag feed's cumulative counters, the ground truth,
    the packet log and the emulator's counters all count the same packets, subframe by
    subframe."""
    truth = lossy.truth
    overflow = truth.ue(0, "overflow_drops").astype(np.int64)
    rlc = truth.ue(0, "rlc_loss_drops").astype(np.int64)
    assert overflow.sum() > 0 and rlc.sum() > 0, "the scenario produced no drops of one kind"

    messages = list(diag.read_diag_file(lossy.out / "diag-ue0.jsonl"))
    rlc_stats = [m["RB Stats"][0] for m in diag.of_type(messages, diag.RLC_DL_STATS)]
    pdcp_stats = list(diag.of_type(messages, diag.PDCP_DL_STATS))
    assert len(rlc_stats) == len(pdcp_stats) == truth.rows
    assert [s["Num Dropped PDU"] for s in rlc_stats] == np.cumsum(rlc).tolist()
    assert [s["RLC PDCP Q Full Count"] for s in rlc_stats] == np.cumsum(overflow).tolist()
    assert [s["Num Offload Q Full Count"] for s in pdcp_stats] == np.cumsum(overflow).tolist()

    down = lossy.counters["engine"]["ues"][0]["downlink"]
    assert down["dropped_overflow"]["packets"] == overflow.sum()
    assert down["dropped_rlc"]["packets"] == rlc.sum()
    log = read_packets(lossy.out / "packets.cbcol")
    assert len(log.select(event=PacketEvent.DROP_OVERFLOW)["ue"]) == overflow.sum()
    assert len(log.select(event=PacketEvent.DROP_RLC)["ue"]) == rlc.sum()
    assert int(log.select(event=PacketEvent.DROP_RLC)["bytes"].sum()) == truth.ue(0, "rlc_loss_drop_bytes").sum()


def jain(x: np.ndarray) -> float:
    """Jain's fairness index of the allocations ``x``: 1 when all are equal."""
    x = x.astype(np.float64)
    return float(x.sum() ** 2 / (len(x) * (x ** 2).sum()))


def test_round_robin_is_fair_among_equal_backlogged_ues(tmp_path: Path) -> None:
    """Four UEs on the same channel, each offered more than a quarter of the cell: round-robin
    scheduling gives them equal delivered bytes (Jain ≥ 0.99) while all are backlogged."""
    trace = constant_trace(tmp_path / "flat.cbt", mcs=MCS, seconds=10)
    run = _run(tmp_path / "run", 4, flood_rate="6mbit", ue={"trace": trace},
               cell={"scheduler": "round-robin", "harq": CLEAN_HARQ})
    truth = run.truth
    queues = truth.per_ue("queue_bytes")
    k = np.arange(1, truth.rows)
    all_backlogged = k[(queues[k - 1] > 0).all(axis=1)]
    assert len(all_backlogged) > 1500
    delivered = truth.per_ue("delivered_bytes")[all_backlogged].sum(axis=0)
    assert jain(delivered) >= 0.99, f"delivered bytes per UE {delivered.tolist()}"
    # Round-robin in time: a UE with more than the band's worth queued takes the whole band
    # when its turn comes.
    deep = k[(queues[k - 1] >= 2 * tbs_bits(MCS, N_RB) // 8).all(axis=1)]
    assert len(deep) > 1000
    alloc = truth.per_ue("alloc_rbs")[deep]
    assert ((alloc > 0).sum(axis=1) == 1).all() and (alloc.sum(axis=1) == N_RB).all()
    assert all(packets > 0 for packets, _ in run.received)


def test_a_45_ue_cell_runs(tmp_path: Path) -> None:
    """45 UEs: each namespace receives its downlink flow and gets its uplink datagrams to the
    server, and every UE is in the ground truth and the counters."""
    n = 45
    trace = constant_trace(tmp_path / "flat.cbt", mcs=MCS, seconds=10)
    out = tmp_path / "run"
    with EmulatedCell(n, out, ue={"trace": trace}, cell={"harq": CLEAN_HARQ}) as cell:
        with UdpSink([u.name for u in cell.topo.ues], SINK_PORT) as ue_sinks, \
                UdpSink([cell.topo.core.name], SINK_PORT) as server_sink:
            # 45 × 200 kbit/s = 9 Mbit/s: within the cell's 14 Mbit/s.
            targets = [(str(u.address), SINK_PORT) for u in cell.topo.ues]
            sender = cell.topo.core.popen(send_udp_command(sys.executable, targets, "200kbit", 500, 2.0),
                                          name="udp-send", log_path=out / "udp-send.log")
            uplink = [socket_in_namespace(u.name, socket.AF_INET, socket.SOCK_DGRAM) for u in cell.topo.ues]
            try:
                for _ in range(5):
                    for sock in uplink:
                        sock.sendto(b"up", (str(cell.topo.server_address), SINK_PORT))
                    time.sleep(0.05)
            finally:
                for sock in uplink:
                    sock.close()
            sender.popen.wait(timeout=60)
            time.sleep(0.5)
            counters = cell.stop()
            received = ue_sinks.counts()
            senders = server_sink.senders()
    idle = [i for i, (p, _) in enumerate(received) if p == 0]
    assert not idle, f"UEs without downlink traffic: {idle}"
    assert set(senders) == {str(u.address) for u in cell.topo.ues}
    truth = read_truth(out / "truth.cbcol")
    assert truth.n_ues == n
    assert (truth.per_ue("delivered_bytes").sum(axis=0) > 0).all()
    assert len(counters["engine"]["ues"]) == n
    assert all(ue["uplink"]["delivered"]["packets"] >= 5 for ue in counters["engine"]["ues"])
    log = read_packets(out / "packets.cbcol")
    assert set(log.select(direction=Direction.UPLINK)["ue"].tolist()) == set(range(n))


def test_seek_replays_a_stretch_of_the_trace(tmp_path: Path) -> None:
    """``Emulator.seek`` (SIGHUP): from the next subframe on, the other users' demand is the
    trace's from the given trace time, while run time runs on; a bad seek file is refused
    with the emulator's reason and changes nothing."""
    # The MCS and the other users' demand encode the trace row (mod 1400).
    rows = np.arange(5000)
    trace = constant_trace(tmp_path / "rows.cbt", mcs=1 + (rows // 50) % 28, other_rbs=rows % 50, seconds=5)
    with EmulatedCell(1, tmp_path / "run", ue={"trace": trace}) as cell:
        time.sleep(0.3)
        cell.emulator.seek(1234)
        time.sleep(0.3)
        cell.emulator.seek(0)
        time.sleep(0.3)
        (cell.output_dir / "seek").write_text("soon\n")  # what seek() would never write
        cell.emulator._signal(signal.SIGHUP)
        deadline = time.monotonic() + 2
        while not (cell.output_dir / "seek.rejected").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (cell.output_dir / "seek.rejected").exists()
        time.sleep(0.1)
        counters = cell.stop()
    assert counters["engine"]["seeks"] == 2 and counters["engine"]["seeks_rejected"] == 1
    truth = read_truth(tmp_path / "run" / "truth.cbcol")
    t_ms = truth["t_ms"]
    # Each subframe's MCS and demand say which trace row it played; a seek shows as a jump
    # in rows while t_ms advances by one.
    played = (truth.ue(0, "mcs").astype(int) - 1) * 50 + truth["other_demand_rbs"].astype(int)
    jumps = np.nonzero(np.diff(played) % 1400 != 1)[0] + 1
    assert len(jumps) == 2, f"rows jumped at t_ms {t_ms[jumps].tolist()}"
    first, second = jumps
    assert played[first] == 1234 and played[second] == 0
    assert (np.diff(t_ms) == 1).all()
    assert "is not a trace time" in (tmp_path / "run" / "emulator.log").read_text()
