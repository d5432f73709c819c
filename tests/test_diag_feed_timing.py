"""The diag feed's delivery timing through the real ``clawbed-emu`` (``emulator/DIAG_FEED.md``,
"Feed timing"): a subscriber in the UE namespace times each line it receives against the
subframe it describes.

- ``phone`` (the default): the lines come in packets, as a phone's diag port delivers them
  (``diag.phone``: 21 scheduled subframes fill a packet, a flush tick every 300 ms). An idle
  UE gets one packet per tick, holding ~300 subframes, the oldest ~300 ms old; a UE that is
  scheduled in most subframes gets full packets, each soon after its last subframe.
- ``ideal``: one subframe's lines as it happens.

The messages are the same in both (the file is written as each subframe comes, whatever the
timing). Bounds are generous: nothing here is a speed figure.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clawbed.emulator.process import BINARY, EmulatedCell
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.netns import socket_in_namespace
from clawbed.paths import REPO_ROOT

pytestmark = pytest.mark.root

BUSY_CELL = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
SINK_PORT = 9000
#: Seconds read with the UE idle, then with a UDP flow that keeps it scheduled.
IDLE_S = 2.5
BUSY_S = 2.5
#: A receive gap longer than this starts a new delivery, ms (the phone's packets come >= 21 ms
#: apart when full and 300 ms apart when idle).
GAP_MS = 8.0
RECORDS_PER_PACKET = 21
FLUSH_PERIOD_MS = 300


@dataclass
class Line:
    received_s: float
    message: dict[str, Any]


@dataclass
class FeedReader:
    """Reads a UE's JSON feed in a thread; each line with the time its last byte came."""

    ns: str
    port: int
    lines: list[Line] = field(default_factory=list)
    _chunks: list[tuple[float, bytes]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.sock = socket_in_namespace(self.ns, socket.AF_INET, socket.SOCK_STREAM)
        self.sock.connect(("127.0.0.1", self.port))
        self.sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Only receive here (parsing ~4,000 lines/s in this thread would make it the lag).
        while not self._stop.is_set():
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                break
            self._chunks.append((time.time(), chunk))

    def close(self) -> list[Line]:
        self._thread.join(timeout=5)  # until EOF (the emulator stopped), or give up
        self._stop.set()
        self._thread.join()
        self.sock.close()
        rest = b""
        for now, chunk in self._chunks:
            *complete, rest = (rest + chunk).split(b"\n")
            self.lines.extend(Line(now, json.loads(c)) for c in complete)
        return self.lines


@dataclass
class Figures:
    """One phase's PDSCH lines: their age at receipt and how they came in deliveries."""

    subframes: int
    age_ms: np.ndarray
    #: Per delivery (lines separated by less than GAP_MS): subframes, scheduled subframes.
    delivery_subframes: list[int]
    delivery_scheduled: list[int]

    def __str__(self) -> str:
        p = np.percentile(self.age_ms, [10, 50, 90, 100])
        return (f"{self.subframes} subframes in {len(self.delivery_subframes)} deliveries "
                f"(median {np.median(self.delivery_subframes):.0f} subframes, "
                f"{np.median(self.delivery_scheduled):.0f} scheduled); age at receipt p10/p50/p90/max "
                f"{p[0]:.1f}/{p[1]:.1f}/{p[2]:.1f}/{p[3]:.1f} ms")


def figures(lines: list[Line], t0: float, t1: float) -> Figures:
    """The PDSCH lines of subframes stamped in [t0, t1)."""
    pdsch = [ln for ln in lines if ln.message["type_id"] == "LTE_PHY_PDSCH_Stat_Indication"
             and t0 <= ln.message["timestamp"] < t1]
    assert pdsch, "no PDSCH line in the phase"
    age = np.array([(ln.received_s - ln.message["timestamp"]) * 1000 for ln in pdsch])
    sizes: list[int] = []
    scheduled: list[int] = []
    last = None
    for ln in pdsch:
        if last is None or (ln.received_s - last) * 1000 > GAP_MS:
            sizes.append(0)
            scheduled.append(0)
        last = ln.received_s
        sizes[-1] += 1
        rec = ln.message["Records"][0]
        scheduled[-1] += int(bool(rec["Transport Blocks"]) and rec["Num RBs"] > 0)
    return Figures(len(pdsch), age, sizes, scheduled)


@dataclass
class Run:
    idle: Figures
    busy: Figures | None
    counters: dict[str, Any]
    out: Path
    lines: list[Line]


def run_feed(tmp: Path, timing: str, busy: bool) -> Run:
    if not BINARY.is_file():
        pytest.skip(f"{BINARY} not built (cargo build --release -p emulator)")
    with EmulatedCell(1, tmp, ue={"trace": BUSY_CELL}, diag={"feed_timing": timing}) as cell:
        ue = cell.topo.ues[0]
        reader = FeedReader(ue.name, cell.emulator.diag_port(0))
        try:
            time.sleep(0.5)  # the first delivery may hold subframes from before the connection
            t0 = time.time()
            time.sleep(IDLE_S)
            t1 = time.time()
            if busy:
                with UdpSink([ue.name], SINK_PORT):
                    # 8 Mbit/s: above what the busy cell leaves the UE most of the time: it is
                    # scheduled in most subframes.
                    sender = cell.topo.core.popen(
                        send_udp_command(sys.executable, [(str(ue.address), SINK_PORT)], "8mbit", 1400, BUSY_S + 0.5),
                        name="udp-send", log_path=tmp / "udp-send.log")
                    sender.popen.wait(timeout=BUSY_S + 60)
                t2 = time.time()
            time.sleep(0.8)  # the last tick's packet
            counters = cell.stop()  # the feed ends: the reader sees EOF
        finally:
            lines = reader.close()
    idle = figures(lines, t0, t1)
    # The flow's first 0.5 s fills the queue; its last 0.3 s may end in a tick's packet.
    busy_figures = figures(lines, t1 + 0.5, t2 - 0.3) if busy else None
    return Run(idle, busy_figures, counters, tmp, lines)


@pytest.fixture(scope="module")
def phone(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_feed(tmp_path_factory.mktemp("feed-phone"), "phone", busy=True)


@pytest.fixture(scope="module")
def ideal(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_feed(tmp_path_factory.mktemp("feed-ideal"), "ideal", busy=False)


def test_an_idle_ue_gets_a_packet_per_flush_tick(phone: Run) -> None:
    f = phone.idle
    print(f"phone, idle UE: {f}")
    assert phone.counters["diag"]["feed_timing"] == "phone"
    assert phone.counters["engine"]["diag_batches_dropped"] == 0
    # ~IDLE_S / 0.3 s packets of ~300 subframes; the oldest line of each ~300 ms old.
    assert len(f.delivery_subframes) <= IDLE_S * 1000 / FLUSH_PERIOD_MS + 3
    assert np.median(f.delivery_subframes) >= 0.6 * FLUSH_PERIOD_MS
    assert f.age_ms.max() >= 0.7 * FLUSH_PERIOD_MS
    assert 0.2 * FLUSH_PERIOD_MS <= np.median(f.age_ms) <= FLUSH_PERIOD_MS
    assert max(f.delivery_scheduled) == 0, "the UE had no traffic"


def test_a_scheduled_ue_gets_full_packets_soon(phone: Run) -> None:
    f = phone.busy
    assert f is not None
    print(f"phone, scheduled UE: {f}")
    # Scheduled in most subframes: packets of 21 scheduled subframes, each delivered as it
    # fills, so the lines are far younger than the idle UE's.
    assert np.mean(f.delivery_scheduled) > 5
    full = sum(1 for s in f.delivery_scheduled if s == RECORDS_PER_PACKET)
    assert full >= 0.3 * len(f.delivery_scheduled)
    # A delivery holds at most 21 scheduled subframes (two may merge in one read if the
    # reader was late: tolerated now and then).
    assert sum(1 for s in f.delivery_scheduled if s > RECORDS_PER_PACKET) <= 0.2 * len(f.delivery_scheduled)
    assert np.median(f.age_ms) < 0.5 * np.median(phone.idle.age_ms)


def test_the_ideal_feed_delivers_each_subframe_as_it_happens(ideal: Run) -> None:
    f = ideal.idle
    print(f"ideal: {f}")
    assert ideal.counters["diag"]["feed_timing"] == "ideal"
    # Nothing held: lines are young (a loaded machine delays some by tens of ms), where half
    # of the phone's idle UE's lines are older than half a flush period.
    assert np.median(f.age_ms) < 20
    assert (f.age_ms > 0.5 * FLUSH_PERIOD_MS).mean() < 0.05


def test_both_timings_carry_the_same_messages_as_the_file(phone: Run) -> None:
    # The file is written as each subframe comes; the live feed carried the same lines
    # (the phone's only later): every PDSCH line received is in the file.
    file_lines = {json.loads(b)["timestamp"] for b in (phone.out / "diag-ue0.jsonl").read_bytes().splitlines()
                  if b.startswith(b'{"type_id":"LTE_PHY_PDSCH_Stat_Indication"')}
    assert phone.idle.subframes > 0.9 * IDLE_S * 1000
    assert len(file_lines) >= phone.idle.subframes


def test_the_last_packet_goes_out_when_the_emulator_stops(phone: Run) -> None:
    # The subframes held when the emulator stopped are delivered as the next tick would have.
    last_file = json.loads((phone.out / "diag-ue0.jsonl").read_bytes().splitlines()[-1])["timestamp"]
    assert phone.lines[-1].message["timestamp"] == last_file
