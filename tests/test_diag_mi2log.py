"""The emulator's diag feed in the phone's format (``emulator/DIAG_FEED.md``), through the real
``clawbed-emu``: one busy-cell run with a UDP flow, its feed written as JSON lines and as a
``.mi2log``, read live on the mi2log TCP port and on the pseudo-terminal.

- cross-language: the Rust writer's ``.mi2log`` is byte for byte what the Python codec
  (``traces/diaglog/emufeed.py``) makes of the run's JSON lines;
- the live byte stream (TCP, pty) is the file's bytes from a frame boundary on;
- the CLAW client's estimates from the byte stream equal those from the JSON feed;
- round trip: ``.mi2log`` → ``trace import --from mobileinsight`` gives back the emulator's
  diag records and ground truth per subframe (UE RBs, MCS, TBS, CRC failures, RSRQ).

``MI2LOG_RUN_S`` sets the run's length (default 6 s; the 60 s run of the acceptance is
``MI2LOG_RUN_S=60``).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from clawbed.claw.client.core import ClientConfig
from clawbed.claw.client.feed import mi2log_messages
from clawbed.claw.client.offline import replay
from clawbed.emulator.process import EmulatedCell
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.emulator.truth import Truth, read_truth
from clawbed.netns import socket_in_namespace
from clawbed.traces.diaglog import channelfit, read_log
from clawbed.traces.diaglog.emufeed import Mi2logStream, encode_feed_message
from clawbed.traces.diaglog.importer import import_mobileinsight

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[1]
BUSY_CELL = REPO / "traces" / "samples" / "busy-cell.cbt"
RUN_S = float(os.environ.get("MI2LOG_RUN_S", "6"))
SINK_PORT = 9000
LIVE_TCP_BYTES = 400_000
PTY_READ_S = 1.0


@dataclass
class Run:
    out: Path
    counters: dict[str, Any]
    truth: Truth
    ready_ue: dict[str, Any]
    tcp_bytes: bytes
    pty_bytes: bytes
    json_lines: list[bytes]


async def _read_tcp(ns: str, port: int, limit: int) -> bytes:
    loop = asyncio.get_running_loop()
    sock = socket_in_namespace(ns, socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    data = bytearray()
    try:
        while len(data) < limit:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=10)
            if not chunk:
                break
            data += chunk
    finally:
        writer.close()
    return bytes(data)


def _read_pty(path: str, seconds: float) -> bytes:
    import termios
    import tty
    fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        tty.setraw(fd, termios.TCSANOW)
        data = bytearray()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                data += os.read(fd, 65536)
            except BlockingIOError:
                time.sleep(0.005)
        return bytes(data)
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("mi2log")
    with EmulatedCell(1, out, ue={"trace": BUSY_CELL}, diag={"mi2log": {"pty": True}}) as cell:
        ready_ue = cell.emulator.ready["ues"][0]
        with UdpSink([u.name for u in cell.topo.ues], SINK_PORT):
            targets = [(str(u.address), SINK_PORT) for u in cell.topo.ues]
            # 8 Mbit/s: above what the busy cell leaves the UE most of the time (backlogged
            # stretches, full TBs) and below it elsewhere (idle and partly used subframes).
            sender = cell.topo.core.popen(send_udp_command(sys.executable, targets, "8mbit", 1400, RUN_S),
                                          name="udp-send", log_path=out / "udp-send.log")
            time.sleep(0.5)
            tcp = asyncio.run(_read_tcp(cell.topo.ues[0].name, ready_ue["mi2log_port"], LIVE_TCP_BYTES))
            pty = _read_pty(ready_ue["mi2log_pty"], PTY_READ_S)
            sender.popen.wait(timeout=RUN_S + 60)
            counters = cell.stop()
    lines = (out / "diag-ue0.jsonl").read_bytes().splitlines()
    return Run(out, counters, read_truth(out / "truth.cbcol"), ready_ue, tcp, pty, lines)


def test_ready_line_names_the_mi2log_port_and_pty(run: Run) -> None:
    assert run.ready_ue["mi2log_port"] == run.ready_ue["diag_port"] + 1
    assert run.ready_ue["mi2log_pty"].startswith("/dev/pts/")
    assert os.readlink(run.out / "diag-ue0.pty") == run.ready_ue["mi2log_pty"]
    assert run.counters["engine"]["diag_batches_dropped"] == 0
    assert run.counters["diag"]["mi2log"][0]["bytes"] == (run.out / "diag-ue0.mi2log").stat().st_size


def test_rust_mi2log_is_the_python_encoding_of_the_json_feed(run: Run) -> None:
    """Cross-language: every frame the emulator wrote equals the Python codec's encoding of
    the JSON line of the same message, and the files hold the same messages in order."""
    mi2log = (run.out / "diag-ue0.mi2log").read_bytes()
    python = io.BytesIO()
    for line in run.json_lines:
        python.write(encode_feed_message(json.loads(line)))
    expected = python.getvalue()
    if mi2log != expected:
        # Name the first message that differs.
        pos = 0
        for i, line in enumerate(run.json_lines):
            frame = encode_feed_message(json.loads(line))
            got = mi2log[pos:pos + len(frame)]
            assert got == frame, f"message {i} ({line[:100]!r}): Rust {got.hex()} != Python {frame.hex()}"
            pos += len(frame)
        assert len(mi2log) == pos, f"{len(mi2log) - pos} bytes after the last message"
    assert len(run.json_lines) > 4 * RUN_S * 1000
    _figures(run, json_bytes=sum(len(line) + 1 for line in run.json_lines), mi2log_bytes=len(mi2log),
             messages=len(run.json_lines))


def test_the_file_decodes_without_a_defect_into_the_json_messages(run: Run) -> None:
    log = read_log(run.out / "diag-ue0.mi2log")
    assert log.defects == []
    assert log.stats.decoded == {"0xB173 v24": run.truth.rows, "0xB193 v1/22": run.truth.rows,
                                 "0xB063 v1/4": run.truth.rows, "0xB087 v1/3": run.truth.rows,
                                 "0xB0A4 v1/2": run.truth.rows}
    messages = [json.loads(line) for line in run.json_lines]
    assert [p.message["type_id"] for p in log.packets] == [m["type_id"] for m in messages]
    for p, m in zip(log.packets, messages):
        assert abs(p.message["timestamp"] - m["timestamp"]) < 1e-6


def _frames_start(data: bytes, whole: bytes) -> int:
    """Where ``data`` (which starts at a frame boundary) lies in ``whole``."""
    first_frame = data[:data.index(b"\x7e") + 1]
    at = whole.find(data[:4096])
    assert at >= 0, "the live bytes are not a slice of the file"
    assert at == 0 or whole[at - 1] == 0x7E, "the live stream did not start at a frame boundary"
    assert whole[at:at + len(first_frame)] == first_frame
    return at


def test_live_tcp_stream_is_the_file_from_a_frame_boundary(run: Run) -> None:
    whole = (run.out / "diag-ue0.mi2log").read_bytes()
    data = run.tcp_bytes
    assert len(data) >= LIVE_TCP_BYTES
    at = _frames_start(data, whole)
    assert whole[at:at + len(data)] == data
    stream = Mi2logStream()
    messages = stream.feed(data)
    assert stream.defects == [] and len(messages) > 1000


def test_pty_stream_is_the_file_from_a_frame_boundary(run: Run) -> None:
    whole = (run.out / "diag-ue0.mi2log").read_bytes()
    data = run.pty_bytes
    # About 1 MB/s of feed: a second's read holds several hundred subframes.
    assert len(data) > 200_000, f"only {len(data)} bytes from the pty in {PTY_READ_S} s"
    at = _frames_start(data, whole)
    assert whole[at:at + len(data)] == data
    stream = Mi2logStream()
    assert stream.defects == [] and len(stream.feed(data)) > 1000


def test_client_estimates_from_the_byte_stream_equal_those_from_the_json_feed(run: Run) -> None:
    config = ClientConfig(ue_id=0, n_antennas=2, feedback_period_ms=10)
    from_json = replay((json.loads(line) for line in run.json_lines), config, window_ms=60)
    from_bytes = replay(mi2log_messages((run.out / "diag-ue0.mi2log").read_bytes()), config, window_ms=60)
    assert len(from_json) == len(from_bytes) > 0.9 * run.truth.rows
    active = events = 0
    for a, b in zip(from_json, from_bytes):
        da, db = asdict(a), asdict(b)
        # Unix times went through diag ticks and back: equal to well under a microsecond.
        times_a = [da.pop("unix_s")] + [e.pop("unix_s") for e in da["events"]]
        times_b = [db.pop("unix_s")] + [e.pop("unix_s") for e in db["events"]]
        assert da == db
        assert all((x is None) == (y is None) and (x is None or abs(x - y) < 1e-6) for x, y in zip(times_a, times_b))
        active += a.estimate is not None
        events += len(a.events)
    assert active > 0.5 * len(from_json)
    _figures(run, client_rows=len(from_json), client_rows_with_estimate=active, client_loss_events=events)


def _figures(run: Run, **figures: Any) -> None:
    """Adds figures to ``mi2log-figures.json`` in the run's directory (for the record)."""
    path = run.out / "mi2log-figures.json"
    old = json.loads(path.read_text()) if path.exists() else {"run_s": RUN_S, "subframes": run.truth.rows}
    path.write_text(json.dumps({**old, **figures}, indent=1))


def test_round_trip_through_the_importer_gives_the_records_and_the_truth(run: Run) -> None:
    """emulator → .mi2log → ``trace import --from mobileinsight``: per subframe the UE's RBs,
    TBS, CRC failures, MCS and RSRQ equal the emulator's diag records and ground truth."""
    truth = run.truth
    trace = import_mobileinsight(run.out / "diag-ue0.mi2log", bandwidth_mhz=10.0, n_antennas=2)
    c = trace.columns
    n = truth.rows
    assert trace.duration_ms == n
    assert trace.metadata["start_sfn"] == truth.start_sfn
    alloc = truth.ue(0, "alloc_rbs").astype(np.int64)
    tbs = truth.ue(0, "tbs_bits").astype(np.int64)
    assert (c["own_rbs"] == alloc).all()
    assert (c["own_tbs_bits"] == tbs).all()
    crc = truth.ue(0, "crc_pass")
    retx = truth.ue(0, "harq_retx").astype(bool)
    failed_first = np.array([v is not None and v == 0 for v in crc.tolist()]) & ~retx if crc.dtype == object \
        else (np.nan_to_num(crc.astype(np.float64), nan=1.0) == 0) & ~retx
    assert (c["harq_fail"].astype(bool) == failed_first).all()
    assert failed_first.any() and (alloc > 0).sum() > 0.05 * n
    # MCS of every scheduled subframe with a link-adapted block (new transmission, ≥ 1,000
    # bits) is its block's (the diag record's), marked measured; the other subframes' MCS is
    # inferred from the diag feed's measurements (channelfit) and marked so.
    records = [json.loads(line) for line in run.json_lines if line.startswith(b'{"type_id":"LTE_PHY_PDSCH')]
    block_mcs = np.array([r["Records"][0]["Transport Blocks"][0]["MCS"] if r["Records"][0]["Transport Blocks"]
                          else -1 for r in records])
    scheduled = block_mcs >= 0
    measured = scheduled & (block_mcs <= 28) & (tbs >= channelfit.MIN_FIT_TBS_BITS)
    assert ((c["mcs_source"] == channelfit.MEASURED) == measured).all()
    assert (c["mcs"][measured] == block_mcs[measured]).all()
    assert (c["mcs_source"][~measured] == channelfit.INFERRED).all()
    # A first transmission's MCS is the channel's (the truth's); where inferred, it follows the
    # truth's channel to within a CQI step on average.
    first = measured & ~retx
    assert (c["mcs"][first] == truth.ue(0, "mcs")[first]).all()
    inferred_error = float(np.abs(c["mcs"][~measured].astype(np.int64) - truth.ue(0, "mcs")[~measured]).mean())
    assert inferred_error <= 2.0, inferred_error
    # RSRQ: the reported value (quantised to 1/16 dB by the cell too), every subframe.
    reported = np.array([json.loads(line)["Subpackets"][0]["RSRQ"] for line in run.json_lines
                         if line.startswith(b'{"type_id":"LTE_PHY_Serv')])
    assert np.array_equal(c["rsrq_db"].astype(np.float64), np.clip(reported, -30.0, 33.9375))
    other = truth["other_alloc_rbs"].astype(np.int64)
    _figures(run, scheduled_subframes=int((alloc > 0).sum()), first_tx_crc_failures=int(failed_first.sum()),
             retransmissions=int(retx.sum()), tbs_bits_total=int(tbs.sum()),
             other_rbs_estimate_mean_abs_error=float(np.abs(c["other_rbs"] - other).mean()),
             other_rbs_truth_mean=float(other.mean()), other_rbs_estimate_mean=float(c["other_rbs"].mean()),
             inferred_mcs_mean_abs_error=inferred_error)
