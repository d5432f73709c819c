"""Observability end to end, with the real things: an InfluxDB started by
``clawbed.dashboards.influxdb``, a real replay (``clawbed replay``: emulator, nginx, the CLAW
scheme with its client and CC, the TCP sampler) and a plain emulator run with a UDP flow,
ingested; then every variable's and every panel's query of the generated dashboards, with
the variables substituted, must return data. And InfluxDB killed in the middle of an ingest:
the rest is spooled, written on the next write, and the counts match.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clawbed.dashboards.influxdb import InfluxServer, ServerInfo, query
from clawbed.dashboards.ingest import IngestReport, ingest_run
from clawbed.dashboards.metrics import MetricsWriter, Point, spool_files
from clawbed.dashboards.verify import run_time_range_ms, verify
from clawbed.emulator.process import BINARY, EmulatedCell
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.paths import REPO_ROOT

pytestmark = pytest.mark.root

TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
REPLAY_NAME = "obs-live"
SINK_PORT = 9000


def _free_port() -> int:
    """A loopback port for HTTP whose RPC neighbour (port + 2) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 2))
                return port
            except OSError:
                continue


@dataclass
class Live:
    tmp: Path
    server: InfluxServer
    info: ServerInfo
    replay_dir: Path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    if not BINARY.is_file():
        pytest.fail(f"{BINARY} not built (cd /work/main && cargo build --release -j1 -p emulator)")
    tmp = tmp_path_factory.mktemp("obs")
    state = pytest.MonkeyPatch()
    state.setenv("CLAWBED_STATE", str(tmp / "state"))  # the server's files and the spool registry
    server = InfluxServer(port=_free_port())
    info = server.ensure()
    try:
        yield Live(tmp, server, info, _replay(tmp / "runs"))
    finally:
        server.stop()
        state.undo()


def _replay(runs_dir: Path) -> Path:
    """A replay of one claw and one cubic load, as `clawbed replay` runs it (the command
    object of replay/cli.py)."""
    name = REPLAY_NAME
    proc = subprocess.run(
        [sys.executable, "-c", "from clawbed.replay.cli import replay; replay()",
         "--trace", str(TRACE), "--page", "set-01", "--schemes", "claw,cubic", "--runs", "1", "--loader", "h2",
         "--name", name, "--runs-dir", str(runs_dir)],
        capture_output=True, text=True, timeout=600)
    results = runs_dir / name / "results.jsonl"
    records = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    assert proc.returncode == 0 and records and all(r["ok"] for r in records), proc.stdout[-3000:] + proc.stderr[-3000:]
    return runs_dir / name


def _rows(url: str, measurement: str, run: str) -> int:
    """Points of ``measurement`` of ``run`` (SELECT * gives one row per point)."""
    series = query(url, f'SELECT * FROM "{measurement}" WHERE "run" = \'{run}\'')
    return sum(len(s["values"]) for s in series)


def test_every_panel_and_variable_returns_data_after_a_replay(live: Live) -> None:
    with MetricsWriter(live.info.url, live.replay_dir / "metrics-spool") as writer:
        report = ingest_run(live.replay_dir, writer)
    assert writer.spooled == 0 and writer.written == report.total
    for measurement in ("cell", "ue", "diag", "claw", "tcp", "plt"):
        assert report.points.get(measurement), f"no {measurement} points: {report.points}"
        assert _rows(live.info.url, measurement, live.replay_dir.name) == report.points[measurement]
    start_ms, end_ms = run_time_range_ms(live.info.url, [live.replay_dir.name])
    result = verify(live.info.url, start_ms, end_ms, runs=[live.replay_dir.name])
    assert len(result.checked) >= 40
    assert not result.empty, "\n".join(f"{c.dashboard}: {c.what}: {c.query} {c.error or ''}" for c in result.empty)


class _KillingWriter(MetricsWriter):
    """Kills the server (SIGKILL) right after its second batch was accepted."""

    victim: int = 0
    batches: int = 0

    def _post(self, body: bytes) -> None:
        super()._post(body)
        self.batches += 1
        if self.batches == 2:
            os.kill(self.victim, signal.SIGKILL)
            os.waitpid(self.victim, 0)  # our child: reap it, so its PID no longer reads as influxd


def test_influxdb_killed_mid_ingest_loses_nothing(live: Live) -> None:
    # A plain emulator run: the cell on the busy trace, a UDP flood to the UE.
    out = live.tmp / "emu-run"
    with EmulatedCell(1, out, ue={"trace": TRACE}, mode="cell") as cell:
        with UdpSink([u.name for u in cell.topo.ues], SINK_PORT):
            sender = cell.topo.core.popen(send_udp_command(sys.executable, [(str(cell.topo.ues[0].address),
                                                                              SINK_PORT)], "20mbit", 1400, 4.0),
                                          name="udp-send", log_path=out / "udp-send.log")
            sender.popen.wait(timeout=60)
        cell.stop()

    writer = _KillingWriter(live.info.url, out / "metrics-spool", batch_points=500, timeout_s=2.0)
    writer.victim = live.info.pid
    report: IngestReport = ingest_run(out, writer, scheme="udp")
    assert writer.batches == 2 and writer.written == 1000
    assert writer.spooled == report.total - 1000 > 0
    assert spool_files(out / "metrics-spool")
    assert live.server.running() is None

    # The server comes back; the next write of anyone sends what was spooled.
    info = live.server.ensure()
    with MetricsWriter(info.url, live.tmp / "other-spool") as next_writer:
        next_writer.add(Point("probe", {"run": "probe"}, {"x": 1.0}, 1))
    assert spool_files(out / "metrics-spool") == []
    for measurement, n in report.points.items():
        assert _rows(info.url, measurement, out.name) == n, measurement
    assert set(report.points) == {"cell", "ue", "diag"}
