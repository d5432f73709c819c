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

Then the client's cost (``cost``, written to ``bench-results/claw-client.json``):

- **clients per core at the 1 ms feed**: a real feed is recorded (busy-cell, a Cubic bulk
  flow to the UE), then played at real rate (one subframe's lines per ms, the compiled
  ``serve-feed``) to N compiled clients and a few reference (Python) clients, each its own
  process with its own feed connection, feedback socket and estimates log (every
  subframe), as in a run, its reports answered as the server agent would (so its
  bottleneck detector judges windows); each client's CPU (``/proc/PID/stat``) over the
  playing time.
  Clients per core = 100 % / the mean client's percent of a core;
- **CLAW's per-load set-up**: on an emulated cell, the ``claw`` scheme set up (sysctls,
  bpffs, ACK-flag reader, congestion control, key, agent until ready), its client started
  until ready (the UE's ACK marker loaded, the feedback socket open, the feed connected: it
  says so itself), and torn down, once per load, nothing carried from one to the next; with
  the fast and the reference client. The headline, set-up, is what precedes a load (server +
  clients); teardown is printed beside it.

``--only accuracy,cost,setup`` picks parts (default all).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import struct
import subprocess
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
from clawbed.claw.feedback import FEEDBACK_BYTES, Echo
from clawbed.paths import REPO_ROOT

SAMPLES = REPO_ROOT / "traces" / "samples"
RESULTS = REPO_ROOT / "bench-results" / "claw-estimator.json"
COST_RESULTS = REPO_ROOT / "bench-results" / "claw-client.json"
PARTS = ("accuracy", "cost", "setup")
#: The feed the cost is measured on (its busiest sample trace, a bulk flow: ~5 messages/ms).
COST_PRESET = "busy-cell"
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


def _cpu_s(pid: int) -> float | None:
    """User + system CPU time of process ``pid`` so far, s (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client_cost(feed: Path, work: Path, n_fast: int, n_reference: int, fast_flags: Sequence[str] = ()) -> dict[str, Any]:
    """``n_fast`` compiled and ``n_reference`` Python clients fed ``feed`` at real rate on
    loopback (see the module docstring); each client's percent of a core while it played."""
    from clawbed.claw.client.fast import binary

    exe = binary()
    work.mkdir(parents=True, exist_ok=True)
    key = work / "key"
    key.write_bytes(os.urandom(32))
    # The reports' destination answers each as the server agent would (srtt 60 ms, a flow
    # held back at CLAW's window), so every client's detector judges windows too.
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    sink.settimeout(0.2)
    server = f"127.0.0.1:{sink.getsockname()[1]}"
    answering = threading.Event()
    answering.set()
    echoed = [0]

    def answer() -> None:
        secret = key.read_bytes()
        while answering.is_set():
            try:
                data, peer = sink.recvfrom(256)
            except TimeoutError:
                continue
            except OSError:
                return
            if len(data) == FEEDBACK_BYTES:
                ue_id, seq = struct.unpack_from("!HI", data, 2)
                sink.sendto(Echo(ue_id, seq, 60_000, 20, True).encode(secret), peer)
                echoed[0] += 1

    responder = threading.Thread(target=answer, name="echo", daemon=True)
    responder.start()
    port = _free_port()
    serve = subprocess.Popen([str(exe), "serve-feed", "--input", str(feed), "--port", str(port), "--clients",
                              str(n_fast + n_reference), "--accept-timeout-s", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    clients: list[tuple[str, subprocess.Popen[str]]] = []
    try:
        assert serve.stdout is not None
        serving = serve.stdout.readline()
        if not serving.startswith("serving"):
            raise RuntimeError(f"serve-feed did not start: {serving}{serve.stderr.read() if serve.stderr else ''}")
        subframes = int(serving.split()[1])
        common = ["--key-file", str(key), "--server", server, "--diag-port", str(port)]
        for i in range(n_fast + n_reference):
            log = ["--log", str(work / f"client-{i}.csv")]
            if i < n_fast:
                argv = [str(exe), "run", "--ue-id", str(i), *common, *log, *fast_flags]
            else:
                argv = [sys.executable, "-m", "clawbed.claw.client", "--client-impl", "reference", "--ue-id", str(i),
                        *common, *log]
            clients.append(("fast" if i < n_fast else "reference",
                            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        playing = serve.stdout.readline()  # every client connected: the feed starts now
        if not playing.startswith("playing"):
            raise RuntimeError(f"serve-feed: {playing}{serve.stderr.read() if serve.stderr else ''}")
        start = {p.pid: _cpu_s(p.pid) for _, p in clients}
        t0 = time.monotonic()
        # The last subframe is written ~subframes ms from now; the clients take it at once.
        played = serve.stdout.readline()
        end = {p.pid: _cpu_s(p.pid) for _, p in clients}
        seconds = time.monotonic() - t0
        serve.wait(timeout=60)
        reports = []
        for _, p in clients:
            out, err = p.communicate(timeout=60)
            lines = [line for line in out.splitlines() if line.startswith("claw-client {")]
            if p.returncode != 0 or not lines:
                raise RuntimeError(f"a client exited {p.returncode}: {err.strip()[-500:]}")
            reports.append(json.loads(lines[-1].removeprefix("claw-client ")))
    finally:
        for _, p in clients:
            if p.poll() is None:
                p.kill()
                p.wait()
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        answering.clear()
        responder.join(timeout=5)
        sink.close()
    if not all(r["counters"]["echoes"] > 0 for r in reports):
        raise RuntimeError("a client got no echo: the detector did not run")
    result: dict[str, Any] = {"feed": str(feed.name), "subframes": subframes, "seconds": round(seconds, 3),
                              "echoes_sent": echoed[0],
                              "verdicts": sum(r["counters"]["verdicts"] for r in reports),
                              "serve": json.loads(played.removeprefix("claw-client ")) if played.startswith(
                                  "claw-client {") else played.strip()}
    for kind in ("fast", "reference"):
        percents = []
        for (k, p), report in zip(clients, reports):
            c0, c1 = start[p.pid], end[p.pid]
            if k != kind or c0 is None or c1 is None:
                continue
            percents.append(100.0 * (c1 - c0) / seconds)
            if report["counters"]["subframes"] < 0.99 * subframes:
                raise RuntimeError(f"a {kind} client closed {report['counters']['subframes']} of {subframes} "
                                   f"subframes: it fell behind the feed")
        if percents:
            mean = sum(percents) / len(percents)
            result[kind] = {"clients": len(percents), "cpu_percent_mean": round(mean, 3),
                            "cpu_percent_max": round(max(percents), 3),
                            "clients_per_core": round(100.0 / mean, 1) if mean > 0 else None}
    return result


def setup_time(out: Path, loads: int, impl: str) -> dict[str, Any]:
    """CLAW's per-load set-up on a one-UE emulated cell with client ``impl`` (see the module
    docstring): seconds per phase, each load from scratch."""
    phases: dict[str, list[float]] = {"setup_s": [], "server_s": [], "client_s": [], "teardown_s": [], "total_s": []}
    previous = os.environ.get("CLAWBED_CLAW_CLIENT")
    os.environ["CLAWBED_CLAW_CLIENT"] = impl  # the scheme's clients inherit it
    try:
        return _setup_loads(out, loads, impl, phases)
    finally:
        if previous is None:
            os.environ.pop("CLAWBED_CLAW_CLIENT", None)
        else:
            os.environ["CLAWBED_CLAW_CLIENT"] = previous


def _setup_loads(out: Path, loads: int, impl: str, phases: dict[str, list[float]]) -> dict[str, Any]:
    from clawbed.claw.schemes import SchemeContext, UeEndpoint, get_scheme
    from clawbed.emulator.process import EmulatedCell

    with EmulatedCell(1, out, ue={"trace": SAMPLES / f"{COST_PRESET}.cbt"}, mode="cell") as cell:
        topo = cell.topo
        ues = [UeEndpoint(ns=u.ns, address=str(u.address), index=u.index, device=u.tun,
                          diag_port=cell.emulator.diag_port(u.index)) for u in topo.ues]
        for i in range(loads):
            sub = out / f"load-{i}"
            sub.mkdir()
            ctx = SchemeContext(resources=cell.res, run_dir=sub, server_ns=topo.core.ns,
                                server_address=str(topo.core.address), server_device=topo.core.tun, ues=ues)
            scheme = get_scheme("claw")()
            t0 = time.monotonic()
            scheme.setup(ctx)
            t1 = time.monotonic()
            scheme.start_clients(ctx)
            t2 = time.monotonic()
            scheme.teardown()
            t3 = time.monotonic()
            for key, value in (("setup_s", t2 - t0), ("server_s", t1 - t0), ("client_s", t2 - t1),
                               ("teardown_s", t3 - t2), ("total_s", t3 - t0)):
                phases[key].append(value)
    return {"client": impl, "loads": loads,
            **{key: {"median": round(sorted(v)[len(v) // 2], 3), "max": round(max(v), 3)} for key, v in phases.items()}}


def _cost_table(cost: dict[str, Any] | None, setup: list[dict[str, Any]]) -> str:
    lines = []
    if cost:
        lines.append(f"CLAW client cost at the 1 ms feed ({cost['feed']}, {cost['subframes']} subframes played in "
                     f"{cost['seconds']} s, each client its own process, feed, feedback socket and log; "
                     f"{cost['echoes_sent']} reports answered, {cost['verdicts']} detector verdicts):")
        for kind in ("fast", "reference"):
            if kind in cost:
                c = cost[kind]
                lines.append(f"  {kind:<9} {c['clients']:>4} clients: {c['cpu_percent_mean']:.2f} % of a core each "
                             f"(max {c['cpu_percent_max']:.2f}) -> {c['clients_per_core']} clients per core")
    for r in setup:
        # The headline is what precedes a load (server + clients until ready); teardown follows it.
        lines.append(f"CLAW per-load set-up, {r['client']} client, {r['loads']} loads: set-up {r['setup_s']['median']:.3f} s "
                     f"median (max {r['setup_s']['max']:.3f}; server {r['server_s']['median']:.3f} + clients "
                     f"{r['client_s']['median']:.3f}), teardown {r['teardown_s']['median']:.3f} s "
                     f"(max {r['teardown_s']['max']:.3f})")
    return "\n".join(lines)


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
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to run: {', '.join(PARTS)} (default all)")
    parser.add_argument("--seconds", type=float, default=6.0, help="accuracy: traffic seconds per run (default 6)")
    parser.add_argument("--scenario", action="append", choices=SCENARIOS, help="accuracy: traffic (default: both)")
    parser.add_argument("--preset", action="append", help="accuracy: preset name(s) (default: every traces/samples/*.cbt)")
    parser.add_argument("--clients", type=int, default=100,
                        help="cost: compiled clients fed at once (default 100, the target per core)")
    parser.add_argument("--reference-clients", type=int, default=2,
                        help="cost: Python reference clients beside them, for comparison (default 2)")
    parser.add_argument("--cost-seconds", type=float, default=10.0, help="cost: seconds of feed played (default 10)")
    parser.add_argument("--feed", type=Path, help="cost: play this recorded diag-ue<N>.jsonl instead of recording one")
    parser.add_argument("--setup-loads", type=int, default=10, help="setup: loads per client (default 10)")
    parser.add_argument("--keep", type=Path, help="keep each run's files under this directory")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"accuracy results JSON (default {RESULTS.relative_to(REPO_ROOT)})")
    parser.add_argument("--cost-out", type=Path, default=COST_RESULTS,
                        help=f"cost and set-up results JSON (default {COST_RESULTS.relative_to(REPO_ROOT)})")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if parts - set(PARTS):
        parser.error(f"--only {args.only}: unknown part(s) {sorted(parts - set(PARTS))}; known: {', '.join(PARTS)}")
    if args.clients < 0 or args.reference_clients < 0 or args.clients + args.reference_clients < 1:
        parser.error("--clients and --reference-clients: at least one client, none negative")
    if args.setup_loads < 1 or args.cost_seconds <= 0:
        parser.error("--setup-loads must be at least 1 and --cost-seconds above 0")
    if args.feed is not None and not args.feed.is_file():
        parser.error(f"--feed {args.feed}: no such file")
    needs_root = bool(parts & {"accuracy", "setup"}) or ("cost" in parts and args.feed is None)
    if needs_root and os.geteuid() != 0:
        parser.error("needs root (network namespaces and TUN devices); the cost part alone runs unprivileged with --feed")
    from clawbed.emulator.process import BINARY
    if needs_root and not BINARY.is_file():
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
    cost: dict[str, Any] | None = None
    setups: list[dict[str, Any]] = []
    try:
        if "accuracy" in parts:
            for trace in traces:
                for scenario in args.scenario or SCENARIOS:
                    print(f"{trace.stem} / {scenario}: running {args.seconds:g} s ...", file=sys.stderr, flush=True)
                    r = run_preset(trace, base / f"{trace.stem}-{scenario}", args.seconds, scenario)
                    r["preset"] = trace.stem
                    results.append(r)
        if "cost" in parts:
            feed = args.feed
            if feed is None:
                print(f"cost: recording {args.cost_seconds:g} s of a {COST_PRESET} feed ...", file=sys.stderr, flush=True)
                feed = record_feed(base / "cost-feed", COST_PRESET, args.cost_seconds + 1.0)
            print(f"cost: {args.clients} compiled and {args.reference_clients} reference clients at the 1 ms feed ...",
                  file=sys.stderr, flush=True)
            cost = client_cost(feed, base / "cost", args.clients, args.reference_clients)
        if "setup" in parts:
            for impl in ("fast", "reference"):
                print(f"setup: {args.setup_loads} loads of CLAW with the {impl} client ...", file=sys.stderr, flush=True)
                setups.append(setup_time(base / f"setup-{impl}", args.setup_loads, impl))
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)
    if results:
        print(_table(results))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({
            "benchmark": "claw-estimator", "created_unix_s": time.time(), "host": platform.node(),
            "window_ms": WINDOW_MS, "skip_ms": SKIP_MS, "results": results}, indent=2) + "\n")
        print(f"written {args.out}", file=sys.stderr)
    if cost is not None or setups:
        print(_cost_table(cost, setups))
        args.cost_out.parent.mkdir(parents=True, exist_ok=True)
        args.cost_out.write_text(json.dumps({
            "benchmark": "claw-client", "created_unix_s": time.time(), "host": platform.node(),
            "cpus": os.cpu_count(), "load_average": os.getloadavg()[0], "cost": cost, "setup": setups}, indent=2) + "\n")
        print(f"written {args.cost_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
