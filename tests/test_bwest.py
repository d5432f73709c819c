"""Passive bandwidth estimation from a server-side capture (``traces/bwest.py``, LTE13 §6.1–6.2,
fidelity row LTE-6) and ``clawbed analyze bandwidth``.

- the pcap reader and the tick inference on a synthetic capture (no kernel);
- the real data plane (root): a bulk Cubic download from the core namespace to the UE while
  the project's own AF_PACKET reader (``replay/capture.py``) captures the server's device;
  then ``clawbed analyze bandwidth`` on the directory scores the estimate against the
  emulator's ground truth, on a constant-rate cell (10 Mbit/s, the lab check's rate) and on
  the busy-cell trace. Pass: mean absolute error at 1.0 s windows within the paper's reported
  accuracy (LTE13 §6.2: 7.9 %; the row's criterion ≤ 8 %), samples for the flow.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest
from bulkflow import bulk_download

from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT
from clawbed.traces import bwest

BUSY_CELL = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"


def _pcap(path: Path, packets: list[tuple[float, bytes]]) -> None:
    with path.open("wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 128, 101))
        for t, data in packets:
            sec = int(t)
            f.write(struct.pack("<IIII", sec, int(round((t - sec) * 1e6)), len(data), len(data)))
            f.write(data)


def _tcp(src: str, dst: str, sport: int, dport: int, seq: int, ack: int, flags: int, payload: int,
         tsval: int | None) -> bytes:
    opts = b"\x01\x01\x08\x0a" + struct.pack("!II", tsval, 0) if tsval is not None else b""
    doff = (20 + len(opts)) // 4
    tcp = struct.pack("!HHIIHHHH", sport, dport, seq, ack, (doff << 12) | flags, 1000, 0, 0) + opts
    total = 20 + len(tcp) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 6, 0, socket.inet_aton(src), socket.inet_aton(dst))
    return ip + tcp


def test_a_synthetic_capture_gives_the_rate_the_ue_received(tmp_path: Path) -> None:
    """The server sends 64 KB bursts at line rate every 60 ms; the UE (1 ms ticks) receives at
    8 Mbit/s and ACKs every two segments: the estimate is 8 Mbit/s (in IP bytes)."""
    mss, rate = 1448, 8e6 / 8  # bytes/s of IP packets (1500 B per segment)
    packets: list[tuple[float, bytes]] = []
    seq, acked, ue_t = 0, 0, 0.0
    t = 100.0
    for _burst in range(120):  # 7.2 s (> δ_G)
        n = 44
        for _ in range(n):
            packets.append((t, _tcp("10.0.0.1", "10.0.1.2", 443, 5000, seq, 1, 0x10, mss, 5)))
            seq += mss
        ue_t = max(ue_t, t + 0.025)
        for _k in range(n // 2):
            ue_t += 2 * 1500 / rate
            acked += 2 * mss
            packets.append((ue_t + 0.02, _tcp("10.0.1.2", "10.0.0.1", 5000, 443, 1, acked, 0x10, 0,
                                              int(ue_t * 1000))))
        t += 0.1
    packets.sort(key=lambda p: p[0])
    path = tmp_path / "synthetic.pcap"
    _pcap(path, packets)
    est = bwest.estimate(path)
    (flow,) = est.flows
    assert flow.tick_s == pytest.approx(0.001, rel=0.01)
    _, windows = est.windows(1.0)
    assert len(flow.samples) >= 100
    assert windows[1:-1] == pytest.approx(8e6, rel=0.03)


def test_bad_inputs_name_the_file_and_the_setting(tmp_path: Path) -> None:
    (tmp_path / "x.pcap").write_bytes(b"\x0a\x0d\x0d\x0a" + b"\0" * 40)
    with pytest.raises(InputError, match=r"x.pcap: not a pcap file .*pcapng is not read"):
        bwest.estimate(tmp_path / "x.pcap")
    with pytest.raises(InputError, match="C -1"):
        bwest.estimate(tmp_path / "x.pcap", c_bps=-1)


def test_analyze_bandwidth_errors_are_one_line(clawbed_cli: Path, tmp_path: Path) -> None:
    proc = subprocess.run([str(clawbed_cli), "analyze", "bandwidth", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "no server.pcap" in proc.stderr, proc.stderr
    proc = subprocess.run([str(clawbed_cli), "analyze", "bandwidth", str(tmp_path), "--c-mbit", "0"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--c-mbit 0: must be positive" in proc.stderr, proc.stderr


# --- the real data plane --------------------------------------------------------------------------

BULK_S = 25.0
PORT = 5321
#: The paper's lab check: mean error 7.9 % at 1.0 s windows; the row's criterion ≤ 8 %. Measured
#: 2026-11-28: 0.07 % on the constant-rate cell, 3.4 % on the busy cell (signed +1.0 %). Before
#: samples ran between the UE ticks that acknowledged a burst's edges, the busy cell gave
#: 12.5-15.6 %, biased low: its HARQ-released batches put each edge inside one large ACK step,
#: which the sample left out.
MAX_MEAN_ABS_ERROR_1S = {"rate-10mbit": 0.08, "busy-cell": 0.08}


def bulk_with_capture(out: Path, ue: dict, **fields: object) -> None:
    """A Cubic bulk download to the UE for BULK_S while the server's device is captured into
    ``out/server.pcap``; the emulator's truth lands in ``out``."""
    from clawbed.emulator.process import EmulatedCell
    from clawbed.replay.capture import ServerCapture

    out.mkdir(parents=True)
    with EmulatedCell(1, out, ue=ue, **fields) as cell:
        core, ue_node = cell.topo.core, cell.topo.ues[0]
        core.ns.sysctl("net.ipv4.tcp_congestion_control", "cubic")
        ue_node.ns.sysctl("net.ipv4.tcp_rmem", "4096 131072 8388608")
        cap = ServerCapture(cell.res, core.ns, core.tun, out / "server.pcap")
        with bulk_download(core.name, ue_node.name, str(core.address), PORT):
            time.sleep(BULK_S)
        counts = cap.stop()
        (out / "capture-counts.json").write_text(json.dumps(counts))
        cell.stop()


def _analyze(clawbed_cli: Path, run: Path) -> list[dict]:
    proc = subprocess.run([str(clawbed_cli), "analyze", "bandwidth", str(run), "--json"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = subprocess.run([str(clawbed_cli), "analyze", "bandwidth", str(run)], capture_output=True, text=True,
                          timeout=300).stdout
    print(text)
    return json.loads(proc.stdout)


@pytest.mark.root
@pytest.mark.parametrize("cell", ["rate-10mbit", "busy-cell"])
def test_the_estimate_is_within_the_papers_accuracy(clawbed_cli: Path, tmp_path: Path, cell: str) -> None:
    run = tmp_path / cell
    if cell == "busy-cell":
        bulk_with_capture(run, {"trace": BUSY_CELL})
    else:
        bulk_with_capture(run, {"rate": "10mbit"}, mode="rate")
    counts = json.loads((run / "capture-counts.json").read_text())
    assert counts["drops"] == 0 and counts["written"] > 1000, counts
    one_s, tenth = _analyze(clawbed_cli, run)
    summary = {k: v for k, v in one_s.items() if k != "rows"}
    print(cell, json.dumps(summary), "0.1 s:", tenth["mean_abs_error"])
    assert one_s["flows"] == 1 and one_s["flows_with_samples"] == 1, summary
    assert one_s["tick_s"][0] == pytest.approx(0.001, rel=0.01), summary  # Linux: a 1 ms TSval clock
    assert one_s["windows_scored"] >= 0.6 * BULK_S, summary
    assert one_s["mean_abs_error"] <= MAX_MEAN_ABS_ERROR_1S[cell], summary
    # Finer windows are less accurate (the paper: "higher with 0.1 s"). On the constant cell
    # both are about 1 % and may swap by a few hundredths of a percent (measured 0.926 vs
    # 0.931 %): within half a percentage point counts as not better.
    assert tenth["mean_abs_error"] >= one_s["mean_abs_error"] - 0.005, (summary, tenth["mean_abs_error"])
