"""Estimator accuracy of the CLAW client per sample trace (``traces/samples/*.cbt``).

For each preset and traffic scenario: a short real run of the emulator (``clawbed-emu``,
cell mode, the preset's trace, default cell settings) — ``bulk``: one TCP bulk flow
(Cubic) from the core namespace to the UE, which takes all it can (a full cell);
``light``: paced UDP at 1.5 Mbit/s, which leaves idle RBs to find — then the client's analyzer offline over the run's diag file
(:mod:`.offline`, the same :class:`~.core.ClientCore` the daemon runs) with T fixed at
100 ms (the window before the first echo), scored against the run's ground truth:

- ``L MAE``: |L − true load| (A_k / N_rb over the same window), the spec's per-sample
  clamp and the client's default window clamp (``claw/DESIGN.md``);
- ``W MAE``: |W_claw − true available capacity| (Σ TBS(channel MCS_k, N_rb − other
  users' RBs_k) / 8 over the window), bytes and relative to the mean true capacity; the
  CQIC variant's W (own RBs only) against the same truth for comparison.

Needs root and the release build of the emulator. Prints a table and writes
``bench-results/claw-estimator.json``::

    python -m clawbed.claw.client.bench [--seconds 6] [--preset busy-cell ...] [--scenario light ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clawbed.claw.client.analyzer import Variant
from clawbed.claw.client.core import ClientConfig
from clawbed.claw.client.offline import replay_file, rows_to_columns, score
from clawbed.paths import REPO_ROOT

SAMPLES = REPO_ROOT / "traces" / "samples"
RESULTS = REPO_ROOT / "bench-results" / "claw-estimator.json"
FLOW_PORT = 5001
SCENARIOS = ("bulk", "light")
#: Rate of the light scenario (IP bit/s): well below every preset's capacity.
LIGHT_RATE = "1500kbit"
WINDOW_MS = 100
#: Each connection's first window is left out of the scores (the window is filling).
SKIP_MS = WINDOW_MS


def _bulk_flow(core_ns: str, ue_ns: str, server: str, seconds: float) -> int:
    """A TCP bulk transfer core → UE for ``seconds``; returns the bytes received."""
    from clawbed.netns import socket_in_namespace

    listener = socket_in_namespace(core_ns)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((server, FLOW_PORT))
    listener.listen(1)
    client = socket_in_namespace(ue_ns)
    client.settimeout(60)
    client.connect((server, FLOW_PORT))
    conn, _ = listener.accept()
    received = [0]

    def recv() -> None:
        try:
            while chunk := client.recv(1 << 20):
                received[0] += len(chunk)
        except OSError:
            pass

    reader = threading.Thread(target=recv, daemon=True)
    reader.start()
    block = bytes(65536)
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            conn.sendall(block)
    except OSError:
        pass
    # Stop at once rather than drain a bloated BS queue: the run's length is what counts.
    for s in (conn, client, listener):
        s.close()
    reader.join(timeout=5)
    return received[0]


def _light_flow(cell: Any, seconds: float) -> int:
    """Paced UDP core → UE at :data:`LIGHT_RATE`; returns the payload bytes received."""
    from clawbed.emulator.traffic import UdpSink, send_udp_command

    ue = cell.topo.ues[0]
    with UdpSink([ue.name], FLOW_PORT) as sink:
        sender = cell.topo.core.popen(send_udp_command(sys.executable, [(str(ue.address), FLOW_PORT)], LIGHT_RATE,
                                                       1400, seconds), name="udp-send")
        sender.popen.wait(timeout=seconds + 60)
        time.sleep(0.3)  # the last packets still in the cell
        return sink.counts()[0][1]


def run_preset(trace: Path, out: Path, seconds: float, scenario: str = "bulk") -> dict[str, Any]:
    """One emulator run on ``trace`` with the scenario's traffic; the client's scores over it."""
    from clawbed.emulator.process import EmulatedCell
    from clawbed.emulator.truth import read_truth

    with EmulatedCell(1, out, ue={"trace": trace}, mode="cell") as cell:
        if scenario == "bulk":
            received = _bulk_flow(cell.topo.core.name, cell.topo.ues[0].name, str(cell.topo.server_address), seconds)
        else:
            received = _light_flow(cell, seconds)
        cell.stop()
    truth = read_truth(out / "truth.cbcol")
    diag = out / "diag-ue0.jsonl"
    result: dict[str, Any] = {"trace": str(trace.relative_to(REPO_ROOT)), "scenario": scenario, "seconds": seconds,
                              "received_bytes": received, "window_ms": WINDOW_MS}
    for label, config in (
        ("claw", ClientConfig(ue_id=0, n_rb=None, clamp="window")),
        ("claw_sample_clamp", ClientConfig(ue_id=0, n_rb=None, clamp="sample")),
        ("cqic", ClientConfig(ue_id=0, n_rb=None, variant=Variant.CQIC)),
    ):
        rows = replay_file(diag, config, window_ms=WINDOW_MS)
        result[label] = score(rows_to_columns(rows), truth, skip_ms=SKIP_MS).as_dict()
    return result


def record_feed(out: Path, preset: str, seconds: float) -> Path:
    """UE 0's diag feed (``diag-ue0.jsonl``) of a real emulator run on sample ``preset`` with
    a Cubic bulk flow to the UE for ``seconds`` (needs root)."""
    from clawbed.emulator.process import EmulatedCell

    with EmulatedCell(1, out, ue={"trace": SAMPLES / f"{preset}.cbt"}, mode="cell") as cell:
        _bulk_flow(cell.topo.core.name, cell.topo.ues[0].name, str(cell.topo.server_address), seconds)
        cell.stop()
    return out / "diag-ue0.jsonl"


def _table(results: list[dict[str, Any]]) -> str:
    head = (f"{'preset':<14} {'traffic':<7} {'rows':>6} {'true L':>7} {'L MAE':>7} {'L MAE*':>7} {'N_f MAE':>8} "
            f"{'true cap KB':>11} {'W MAE KB':>9} {'W MAE %':>8} {'W bias KB':>9} {'CQIC W MAE %':>12}")
    lines = [head, "-" * len(head)]
    for r in results:
        c, s, q = r["claw"], r["claw_sample_clamp"], r["cqic"]
        lines.append(f"{r['preset']:<14} {r['scenario']:<7} {c['rows']:>6} {c['true_load_mean']:>7.3f} {c['load_mae']:>7.4f} "
                     f"{s['load_mae']:>7.4f} {c['n_f_mae_fraction']:>8.4f} {c['true_capacity_mean_bytes'] / 1e3:>11.1f} "
                     f"{c['w_claw_mae_bytes'] / 1e3:>9.1f} {100 * c['w_claw_mae_relative']:>7.1f}% "
                     f"{c['w_claw_bias_bytes'] / 1e3:>9.1f} {100 * q['w_claw_mae_relative']:>11.1f}%")
    lines.append("L MAE* = the spec's per-sample clamp of Eq. 7; N_f MAE as a fraction of N_t; "
                 f"T = {WINDOW_MS} ms; W = W_claw vs the true available capacity per window.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clawbed.claw.client.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0, help="traffic seconds per run (default 6)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="traffic (default: both)")
    parser.add_argument("--preset", action="append", help="preset name(s) (default: every traces/samples/*.cbt)")
    parser.add_argument("--keep", type=Path, help="keep each run's files under this directory")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"results JSON (default {RESULTS.relative_to(REPO_ROOT)})")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root (network namespaces and TUN devices)")
    from clawbed.emulator.process import BINARY
    if not BINARY.is_file():
        parser.error(f"{BINARY} not found: cd {REPO_ROOT} && cargo build --release -j1 -p emulator")
    traces = sorted(SAMPLES.glob("*.cbt"))
    if args.preset:
        wanted = set(args.preset)
        unknown = wanted - {t.stem for t in traces}
        if unknown:
            parser.error(f"unknown preset(s) {sorted(unknown)}; have {[t.stem for t in traces]}")
        traces = [t for t in traces if t.stem in wanted]
    base = args.keep or Path(tempfile.mkdtemp(prefix="claw-bench-"))
    results = []
    try:
        for trace in traces:
            for scenario in args.scenario or SCENARIOS:
                print(f"{trace.stem} / {scenario}: running {args.seconds:g} s ...", file=sys.stderr, flush=True)
                r = run_preset(trace, base / f"{trace.stem}-{scenario}", args.seconds, scenario)
                r["preset"] = trace.stem
                results.append(r)
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    print(_table(results))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "claw-estimator", "created_unix_s": time.time(), "host": platform.node(),
        "window_ms": WINDOW_MS, "skip_ms": SKIP_MS, "results": results}, indent=2) + "\n")
    print(f"written {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
