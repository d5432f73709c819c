"""The diag feed costs only what a file or a subscriber asks for (``emulator/PERFORMANCE.md``),
through the real ``clawbed-emu``: three UEs of one busy cell, the ``.mi2log`` file off.

- UE 0 writes its JSON file and has no subscriber: lines are made, no mi2log message is
  encoded (``diag.mi2log[0].encoded_messages`` is 0);
- UE 1 has neither file nor subscriber: nothing is made for it at all;
- UE 2 has no file; subscribers join its JSON and mi2log ports late, and read to the end:
  the mi2log stream is whole frames from its first byte, and from the first subframe both
  subscribers have it, frame for frame the Python codec's encoding of the JSON lines (the
  feed started for the late subscriber is as correct as one watched from the start); the
  encoder's count is the messages the subscriber got.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from clawbed.emulator.process import BINARY, EmulatedCell
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.netns import socket_in_namespace
from clawbed.paths import REPO_ROOT
from clawbed.traces.diaglog.emufeed import Mi2logStream, encode_feed_message

pytestmark = pytest.mark.root

BUSY_CELL = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
SINK_PORT = 9000
#: Seconds before the late subscribers connect, and while they read.
BEFORE_S = 1.5
READ_S = 2.0


class ToEof:
    """Reads a TCP port in a UE namespace in a thread until the emulator closes it."""

    def __init__(self, ns: str, port: int) -> None:
        self.sock = socket_in_namespace(ns, socket.AF_INET, socket.SOCK_STREAM)
        self.sock.connect(("127.0.0.1", port))
        self.sock.settimeout(0.05)
        self.data = bytearray()
        self.eof = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                self.eof = True
                return
            self.data += chunk

    def close(self) -> bytes:
        self._thread.join(timeout=10)  # until EOF, or give up
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return bytes(self.data)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if not BINARY.is_file():
        pytest.skip(f"{BINARY} not built (cargo build --release -p emulator)")
    out = tmp_path_factory.mktemp("diag-lazy")
    ues = [{"trace": BUSY_CELL}, {"trace": BUSY_CELL, "diag_file": False, "trace_offset_ms": 1000},
           {"trace": BUSY_CELL, "diag_file": False, "trace_offset_ms": 2000}]
    with EmulatedCell(3, out, ue=ues, diag={"mi2log": {"file": False}}) as cell:
        ue = cell.topo.ues[2]
        ready = cell.emulator.ready["ues"][2]
        with UdpSink([ue.name], SINK_PORT):
            # UE 2 scheduled in most subframes: transport blocks, MAC samples, counters moving.
            sender = cell.topo.core.popen(
                send_udp_command(sys.executable, [(str(ue.address), SINK_PORT)], "4mbit", 1400, BEFORE_S + READ_S),
                name="udp-send", log_path=out / "udp-send.log")
            time.sleep(BEFORE_S)
            mi2log = ToEof(ue.name, ready["mi2log_port"])
            time.sleep(0.05)
            lines = ToEof(ue.name, ready["diag_port"])
            try:
                sender.popen.wait(timeout=READ_S + 60)
                counters = cell.stop()  # the feeds end: the readers see EOF
            finally:
                mi2log_bytes, json_bytes = mi2log.close(), lines.close()
    return {"out": out, "counters": counters, "mi2log": mi2log_bytes, "json": json_bytes,
            "eof": (mi2log.eof, lines.eof)}


def test_without_a_taker_nothing_is_encoded(run: dict[str, Any]) -> None:
    diag = run["counters"]["diag"]
    mi2log = diag["mi2log"]
    assert [m["encoded_messages"] for m in mi2log[:2]] == [0, 0]
    assert [m["bytes"] for m in mi2log[:2]] == [0, 0]
    assert not (Path(run["out"]) / "diag-ue0.mi2log").exists()
    # UE 0's JSON file is written (about 5 lines per subframe); UE 1 gets nothing made.
    assert diag["lines"][0] > 4 * 1000 * BEFORE_S
    assert diag["lines"][1] == 0
    assert not (Path(run["out"]) / "diag-ue1.jsonl").exists()


def _frames(data: bytes) -> list[bytes]:
    """``data`` cut after each flag byte (escaped contents hold none)."""
    parts = data.split(b"\x7e")
    assert parts[-1] == b"", "the stream ends inside a frame"
    return [p + b"\x7e" for p in parts[:-1]]


def test_a_late_subscriber_gets_the_feed_whole(run: dict[str, Any]) -> None:
    assert run["eof"] == (True, True), "the readers did not see the feeds end"
    data: bytes = run["mi2log"]
    stream = Mi2logStream()
    decoded = stream.feed(data)
    assert stream.defects == [] and stream.pending_bytes == 0
    assert len(decoded) > 4 * 1000 * READ_S * 0.5
    mi2log = run["counters"]["diag"]["mi2log"][2]
    assert mi2log["encoded_messages"] == len(decoded), "every message encoded reached the subscriber"
    assert mi2log["bytes"] == len(data)
    assert run["counters"]["diag"]["lines"][2] > 0

    # From the first subframe both subscribers have, the mi2log frames are the encoding of
    # the JSON lines, one for one, to the end.
    frames = _frames(data)
    encoded = [encode_feed_message(json.loads(line)) for line in run["json"].splitlines()]
    if encoded[0] in frames:
        frames = frames[frames.index(encoded[0]):]
    else:
        encoded = encoded[encoded.index(frames[0]):]
    assert len(frames) == len(encoded) > 4 * 1000 * READ_S * 0.5
    for i, (got, want) in enumerate(zip(frames, encoded)):
        assert got == want, f"frame {i}: {got.hex()} != {want.hex()}"
    print(f"late subscriber: {len(decoded)} messages, {len(data)} bytes; "
          f"UE 0 lines {run['counters']['diag']['lines'][0]}, encoded {[m['encoded_messages'] for m in run['counters']['diag']['mi2log']]}")
