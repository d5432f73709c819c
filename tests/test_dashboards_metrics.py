"""Line protocol (escaping, field types) and the spool: batches written while the server is
dead are kept on disk, and written (and deleted) once a server answers."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from clawbed.dashboards import metrics
from clawbed.dashboards.metrics import MetricsWriter, Point, flush_spools, format_field, registered_spools, spool_files


@pytest.fixture(autouse=True)
def own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spool registry lives under the state folder: a test's own."""
    monkeypatch.setenv("CLAWBED_STATE", str(tmp_path / "state"))


def test_escaping_of_names_tags_and_strings() -> None:
    p = Point("cell load,x", {"run": "a b,c=d", "empty": "", "scheme": "claw"},
              {"w claw=": 1.5, "mode": 'say "hi" \\ there', "ok": True, "n": 3}, 1_700_000_000_000_000_001)
    assert p.to_line() == ('cell\\ load\\,x,run=a\\ b\\,c\\=d,scheme=claw '
                           'w\\ claw\\==1.5,mode="say \\"hi\\" \\\\ there",ok=true,n=3i 1700000000000000001')


def test_fields_that_cannot_be_carried() -> None:
    assert format_field(float("nan")) is None and format_field(float("inf")) is None
    assert Point("m", {}, {"x": float("nan")}, 1).to_line() is None
    assert Point("m", {}, {"x": float("nan"), "y": 2.0}, 1).to_line() == "m y=2.0 1"
    with pytest.raises(ValueError, match="line break"):
        Point("m", {"run": "a\nb"}, {"x": 1.0}, 1).to_line()
    with pytest.raises(TypeError):
        format_field(None)  # type: ignore[arg-type]


def _dead_url() -> str:
    """A loopback port with nothing listening (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class _Collector(http.server.BaseHTTPRequestHandler):
    """A stand-in /write endpoint: keeps every body, answers 204 like InfluxDB."""

    bodies: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        length = int(self.headers["Content-Length"])
        type(self).bodies.append(self.rfile.read(length))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    _Collector.bodies = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Collector.bodies
    server.shutdown()
    server.server_close()


def _points(n: int) -> list[Point]:
    return [Point("tcp", {"run": "r1", "flow": "10.0.0.1:443"}, {"cwnd_bytes": float(i)}, 1_000 + i) for i in range(n)]


def test_dead_server_spools_then_flush_writes_everything(tmp_path: Path,
                                                         collector: tuple[str, list[bytes]]) -> None:
    spool = tmp_path / "run" / "metrics-spool"
    with MetricsWriter(_dead_url(), spool, batch_points=100, timeout_s=1.0) as writer:
        writer.add_all(_points(250))
    assert writer.spooled == 250 and writer.written == 0
    files = spool_files(spool)
    assert len(files) == 3 and registered_spools() == [spool]
    expected = b"".join(f.read_bytes() for f in files)

    # Still dead: nothing is lost, nothing is deleted.
    report = flush_spools(_dead_url(), timeout_s=1.0)
    assert report.files == 0 and report.left == 3 and len(spool_files(spool)) == 3

    url, bodies = collector
    report = flush_spools(url)
    assert (report.files, report.points, report.left) == (3, 250, 0)
    assert b"".join(bodies) == expected and spool_files(spool) == []
    assert expected.decode().splitlines()[0] == 'tcp,flow=10.0.0.1:443,run=r1 cwnd_bytes=0.0 1000'


def test_next_successful_write_flushes_the_spool(tmp_path: Path, collector: tuple[str, list[bytes]]) -> None:
    spool = tmp_path / "run" / "metrics-spool"
    with MetricsWriter(None, spool, batch_points=50) as offline:
        offline.add_all(_points(120))
    assert len(spool_files(spool)) == 3
    url, bodies = collector
    with MetricsWriter(url, tmp_path / "other" / "metrics-spool") as writer:
        writer.add_all(_points(10))
    assert writer.written == 10 and spool_files(spool) == []
    assert sum(b.count(b"\n") for b in bodies) == 130


def test_a_dead_server_costs_one_timeout_not_one_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    attempts = []
    monkeypatch.setattr(MetricsWriter, "_post", lambda self, body: attempts.append(body) or metrics.write_lines(
        _dead_url(), body, timeout_s=0.5))
    with MetricsWriter("http://127.0.0.1:9", tmp_path / "spool", batch_points=10) as writer:
        writer.add_all(_points(100))
    assert len(attempts) == 1 and writer.spooled == 100
