"""The client's logic around the analyzer (feedback schedule, echoes, loss events, detector
and saturation windows, the estimates log) and the asyncio daemon itself, on loopback: a
fake diag feed (JSON lines over TCP) and a fake server agent (UDP) in this process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from clawbed import lte
from clawbed.claw.client.analyzer import Variant
from clawbed.claw.client.core import ClientConfig, ClientCore, Step
from clawbed.claw.client.daemon import DaemonConfig, run_daemon
from clawbed.claw.client.detector import Bottleneck
from clawbed.claw.client.estimates import COLUMNS, EstimateLog, read_estimates
from clawbed.claw.client.fakefeed import FakeFeedServer, FakeSubframe, messages_of
from clawbed.claw.client.feed import LossKind
from clawbed.claw.feedback import Echo, decode_feedback

KEY = b"k" * 32


def run_core(core: ClientCore, subframes: list[FakeSubframe]) -> Step:
    """Every message of ``subframes`` through ``core`` (then the feed ends); all outputs concatenated."""
    total = Step()
    for step in [core.on_message(m) for m in messages_of(subframes)] + [core.finish()]:
        total.rows += step.rows
        total.feedback += step.feedback
        total.events += step.events
    return total


def busy(start: int, stop: int, **kwargs: object) -> list[FakeSubframe]:
    """A UE scheduled in every subframe: downloading."""
    base = dict(total_alloc_rbs=30, own_rbs=5, mcs=15)
    base.update(kwargs)
    return [FakeSubframe(t, **base) for t in range(start, stop)]  # type: ignore[arg-type]


def connected(start: int, stop: int) -> list[FakeSubframe]:
    """A connected UE that is not downloading: scheduled in one subframe of ten (as for a
    ping or the agent's echoes), so the detector's checks follow the feedback period."""
    sfs = busy(start, stop)
    for sf in sfs:
        sf.own_rbs = 5 if sf.t_ms % 10 == 0 else 0
    return sfs


# -- feedback schedule --------------------------------------------------------------------------

def test_feedback_every_100_ms_of_diag_time_by_default() -> None:
    core = ClientCore(ClientConfig(ue_id=3))
    out = run_core(core, connected(0, 1000))
    times = [f.diag_time_ms for f in out.feedback]
    assert times == list(range(0, 1000, 100))
    assert [f.seq for f in out.feedback] == list(range(1, 11))
    assert len(out.rows) == 1000


def test_feedback_every_subframe_when_asked() -> None:
    core = ClientCore(ClientConfig(ue_id=3, feedback_period_ms=1))
    out = run_core(core, busy(0, 300))
    assert [f.diag_time_ms for f in out.feedback] == list(range(300))


def test_feedback_carries_the_estimate_and_authenticates() -> None:
    core = ClientCore(ClientConfig(ue_id=7, first_seq=41))
    out = run_core(core, busy(0, 250, total_alloc_rbs=20, own_rbs=10, mcs=12))
    # A download: besides every period, the detector's checks send reports (every T / 2).
    times = [f.diag_time_ms for f in out.feedback]
    assert times == [0, 50, 100, 150, 200]
    fb = decode_feedback(out.feedback[times.index(200)].encode(KEY), KEY)
    row = next(r for r in out.rows if r.feedback_seq == fb.seq)
    e = row.estimate
    assert e is not None
    assert (fb.ue_id, fb.seq, fb.diag_time_ms) == (7, 45, 200)
    assert fb.w_claw_bytes == e.w_claw_bytes == 100 * lte.tbs_bits(12, 40) // 8
    assert fb.load == pytest.approx(0.4, abs=1e-6)
    assert (fb.n_f_rbs, fb.n_t_rbs, fb.window_ms) == (4000, 5000, 100)
    assert not fb.saturated and not fb.wireline


def test_no_feedback_before_the_first_downlink_subframe_nor_while_idle() -> None:
    core = ClientCore(ClientConfig(ue_id=1, idle_timeout_ms=500))
    out = run_core(core, busy(0, 400, own_rbs=0))
    assert out.feedback == [] and not any(r.active for r in out.rows)
    out = run_core(core, busy(400, 401) + busy(401, 1500, own_rbs=0))
    times = [f.diag_time_ms for f in out.feedback]
    assert times == [400, 500, 600, 700, 800]           # idle from 900 (500 ms unscheduled)
    assert not out.rows[-1].active
    out = run_core(core, connected(1500, 1700))
    assert [f.diag_time_ms for f in out.feedback] == [1500, 1600]


def test_n_rb_from_the_first_measurement() -> None:
    core = ClientCore(ClientConfig(ue_id=1, n_rb=None))
    run_core(core, busy(0, 10, n_rb=25, total_alloc_rbs=10))
    assert core.analyzer is not None and core.analyzer.cell.n_rb == 25


# -- echoes -------------------------------------------------------------------------------------

def test_echo_sets_the_window_and_other_ues_echoes_are_ignored() -> None:
    core = ClientCore(ClientConfig(ue_id=1))
    run_core(core, busy(0, 300))
    assert not core.on_echo(Echo(ue_id=2, seq=1, srtt_us=40_000, cwnd_packets=10, cwnd_limited=False))
    assert core.window_ms == 100
    assert core.on_echo(Echo(ue_id=1, seq=1, srtt_us=63_700, cwnd_packets=10, cwnd_limited=False))
    out = run_core(core, busy(300, 500))
    assert core.window_ms == 64
    assert out.feedback[-1].window_ms == 64 and out.feedback[-1].n_t_rbs == 64 * 50
    assert out.rows[-1].estimate.samples == 64  # type: ignore[union-attr]


# -- loss events --------------------------------------------------------------------------------

def test_loss_counters_become_events_once_per_increase() -> None:
    core = ClientCore(ClientConfig(ue_id=1))
    sfs = busy(0, 50)
    for sf in sfs[10:]:
        sf.rlc_dropped = 1
    for sf in sfs[20:]:
        sf.rlc_dropped, sf.overflow = 3, 2   # RLC +2; overflow +2 in both RLC and PDCP messages
    out = run_core(core, sfs)
    assert [(e.kind, e.count, e.t_ms) for e in out.events] == [
        (LossKind.WIRELESS, 1, 10), (LossKind.WIRELESS, 2, 20), (LossKind.OVERFLOW, 2, 20)]
    flagged = [r for r in out.rows if r.events]
    assert [r.t_ms for r in flagged] == [10, 20]


def test_a_counter_reset_is_a_new_baseline() -> None:
    core = ClientCore(ClientConfig(ue_id=1))
    sfs = busy(0, 30)
    for sf in sfs[:10]:
        sf.rlc_dropped = 5
    for sf in sfs[20:]:
        sf.rlc_dropped = 1
    out = run_core(core, sfs)
    assert [(e.kind, e.count) for e in out.events] == [(LossKind.WIRELESS, 1)]


# -- detector / saturation windows --------------------------------------------------------------

def drive(core: ClientCore, subframes: list[FakeSubframe], *, limited: bool, srtt_us: int = 100_000,
          chunk_ms: int = 50) -> Step:
    """Feed ``subframes`` in chunks of ``chunk_ms``; after each chunk the server echoes every
    report of it (as an agent would, about one chunk later), with cwnd-limited ``limited``."""
    total = Step()
    for i in range(0, len(subframes), chunk_ms):
        out = run_core(core, subframes[i:i + chunk_ms])
        total.rows += out.rows
        total.feedback += out.feedback
        for fb in out.feedback:
            core.on_echo(Echo(ue_id=core.config.ue_id, seq=fb.seq, srtt_us=srtt_us, cwnd_packets=10,
                              cwnd_limited=limited))
    return total


def test_wireline_after_three_windows_limited_and_unused() -> None:
    core = ClientCore(ClientConfig(ue_id=1, server="10.64.0.1:7070"))
    # An idle cell, the UE using 1 RB per subframe although it could use all 50, the server
    # limited by W_claw throughout. Once the server reports a flow (the first echo, at 50),
    # checks run in two chains half a window apart (a report every 50 ms), and a verdict
    # counts only when its window does not overlap the last counted one: one per window.
    out = drive(core, busy(0, 1200, total_alloc_rbs=1, own_rbs=1), limited=True)
    assert [f.diag_time_ms for f in out.feedback][:4] == [0, 50, 100, 150]
    verdicts = [(r.t_ms, r.verdict) for r in out.rows if r.verdict is not None]
    assert verdicts[:3] == [(100, Bottleneck.WIRELINE), (200, Bottleneck.WIRELINE), (300, Bottleneck.WIRELINE)]
    assert core.counters.checks_overlapping >= 10   # the other chain's windows
    switched = next(r.t_ms for r in out.rows if r.bottleneck is Bottleneck.WIRELINE)
    assert switched == 300
    assert any(f.wireline for f in out.feedback if f.diag_time_ms >= switched)
    assert not any(f.wireline for f in out.feedback if f.diag_time_ms < switched)


def test_without_the_detector_a_wireline_bottleneck_is_never_reported_but_saturation_is() -> None:
    """CLAW with its detector off (scheme claw-nodetect, the paper's Fig 14 baseline): the same
    wireline evidence as above makes no verdict and no wireline flag; hybrid mode stays."""
    core = ClientCore(ClientConfig(ue_id=1, server="10.64.0.1:7070", bottleneck_detector=False))
    out = drive(core, busy(0, 1200, total_alloc_rbs=1, own_rbs=1), limited=True)
    assert out.feedback and not any(f.wireline for f in out.feedback)
    assert [r.verdict for r in out.rows if r.verdict is not None] == []
    assert core.detector_state == (Bottleneck.CELLULAR, False)
    saturating = ClientCore(ClientConfig(ue_id=1, bottleneck_detector=False))
    out = run_core(saturating, busy(0, 1000, total_alloc_rbs=50, own_rbs=2))
    assert out.feedback[-1].saturated


def test_cellular_when_the_flow_uses_what_was_available() -> None:
    core = ClientCore(ClientConfig(ue_id=1, server="s"))
    out = drive(core, busy(0, 1200, total_alloc_rbs=50, own_rbs=50), limited=True)
    assert [r.verdict for r in out.rows if r.verdict is not None] == [Bottleneck.CELLULAR] * 11
    assert not any(f.wireline for f in out.feedback)
    assert core.detector_state == (Bottleneck.CELLULAR, False)


def test_u_counts_the_updates_window_when_t_changes_before_the_verdict() -> None:
    """The idle-cell oddity: T fell from 100 ms to 60 ms (the first echo) while a check was
    pending, and U was read off the 60 ms estimate but compared with N_f of the 100 ms
    update: 3000 < 0.8 · 5000 RBs, "wireline", although the UE used every RB."""
    core = ClientCore(ClientConfig(ue_id=1, server="s"))
    out = drive(core, busy(0, 1000, total_alloc_rbs=50, own_rbs=50), limited=True, srtt_us=60_000)
    assert out.feedback[0].window_ms == 100 and out.feedback[-1].window_ms == 60
    verdicts = [r.verdict for r in out.rows if r.verdict is not None]
    assert len(verdicts) >= 8 and set(verdicts) == {Bottleneck.CELLULAR}
    assert core.detector_state == (Bottleneck.CELLULAR, False)


def test_no_verdict_unless_the_server_was_limited_by_w_claw() -> None:
    """The echo says not limited by CLAW's window (an initial window, an app-limited flow,
    W_cubic below W_claw in wireline mode): the window says nothing about the bottleneck,
    so it neither makes nor breaks a run of verdicts, nor counts towards alternation."""
    core = ClientCore(ClientConfig(ue_id=1, server="s"))
    idle_unused = dict(total_alloc_rbs=1, own_rbs=1)
    out = drive(core, busy(0, 1000, **idle_unused), limited=False)
    assert [r.verdict for r in out.rows if r.verdict is not None] == []
    assert core.counters.checks_without_evidence >= 8 and core.counters.verdicts == 0
    assert core.detector_state == (Bottleneck.CELLULAR, False)
    # Wireline once the server offers W_claw and the UE still gets 1 RB ...
    drive(core, busy(1000, 1400, **idle_unused), limited=True)
    assert core.detector_state == (Bottleneck.WIRELINE, False)
    # ... and it stays so while the server runs a W_cubic below W_claw (no verdicts).
    drive(core, busy(1400, 3000, **idle_unused), limited=False)
    assert core.detector_state == (Bottleneck.WIRELINE, False)
    assert all(f.wireline for f in run_core(core, busy(3000, 3200, **idle_unused)).feedback)


def test_n_f_is_the_one_in_force_at_the_server_while_it_sent_the_data() -> None:
    """A fresh connection's first report comes from a window of one subframe in which other
    users filled the cell and the UE got 1 RB (L = 1, N_I = 0): N_f = 100 RBs (1 RB a
    subframe over the 100 ms window), a small W_claw. The data of the next window left the
    server under that W_claw, so the UE's 5 RBs per subframe then are all it could get, not
    a sign of a wireline bottleneck; once the big N_f of the second report is the one in
    force, 5 RBs of 50 are."""
    core = ClientCore(ClientConfig(ue_id=1, server="s"))
    first = busy(0, 1, total_alloc_rbs=50, own_rbs=1)
    out = drive(core, first + busy(1, 500, total_alloc_rbs=5, own_rbs=5), limited=True)
    assert out.feedback[0].n_f_rbs == 100 and out.feedback[1].n_f_rbs > 4000
    verdicts = [(r.t_ms, r.verdict) for r in out.rows if r.verdict is not None]
    assert verdicts[:3] == [(100, Bottleneck.CELLULAR), (200, Bottleneck.CELLULAR), (300, Bottleneck.WIRELINE)]


def test_a_window_carried_on_fewer_rbs_than_estimated_is_not_wireline() -> None:
    """The idle-cell oddity: W_claw was estimated on one layer (the UE filled the cell),
    then the UE got two-layer subframes and carried the same bytes on half the RBs: U is
    0.5·N_f, but the UE received all the server offered, so the verdict is cellular."""
    core = ClientCore(ClientConfig(ue_id=1, server="s"))
    out = drive(core, busy(0, 100, total_alloc_rbs=50, own_rbs=50)
                + busy(100, 400, total_alloc_rbs=25, own_rbs=25, layers=2), limited=True)
    assert out.feedback[-1].w_claw_bytes > 2 * 0.9 * out.feedback[0].w_claw_bytes   # one, then two layers
    assert [(r.t_ms, r.verdict) for r in out.rows if r.verdict is not None] == [
        (100, Bottleneck.CELLULAR), (200, Bottleneck.CELLULAR), (300, Bottleneck.CELLULAR)]


def test_only_the_echo_of_the_updates_report_counts_and_a_missing_one_drops_the_check() -> None:
    core = ClientCore(ClientConfig(ue_id=1, server="s"))
    for start in range(0, 1000, 50):
        out = run_core(core, busy(start, start + 50, total_alloc_rbs=1, own_rbs=1))
        for fb in out.feedback:  # echoes that answer no report of this client
            core.on_echo(Echo(ue_id=1, seq=fb.seq + 1000, srtt_us=100_000, cwnd_packets=10, cwnd_limited=True))
    assert core.counters.verdicts == 0 and core.counters.checks_unanswered >= 4
    assert core.detector_state == (Bottleneck.CELLULAR, False)


def test_saturated_after_two_full_windows_and_never_for_cqic() -> None:
    for variant, expect in ((Variant.CLAW, True), (Variant.CQIC, False)):
        core = ClientCore(ClientConfig(ue_id=1, variant=variant))
        out = run_core(core, busy(0, 1000, total_alloc_rbs=50, own_rbs=2))
        first = next((r.t_ms for r in out.rows if r.saturated), None)
        if expect:
            assert first == 200                      # windows end at 100 and 200
            assert out.feedback[-1].saturated
        else:
            assert first is None and not out.feedback[-1].saturated and not out.feedback[-1].wireline
        out = run_core(core, busy(1000, 1200, total_alloc_rbs=10, own_rbs=2))
        assert not out.rows[-1].saturated


# -- estimates log ------------------------------------------------------------------------------

def test_estimates_log_written_and_read_back(tmp_path: Path) -> None:
    core = ClientCore(ClientConfig(ue_id=1))
    sfs = connected(0, 400)
    sfs[150].rlc_dropped = 1
    for sf in sfs[151:]:
        sf.rlc_dropped = 1
    out = run_core(core, sfs)
    path = tmp_path / "claw-estimates.csv"
    with EstimateLog(path) as log:
        for row in out.rows:
            log.write(row)
    cols = read_estimates(path)
    assert set(cols) == set(COLUMNS)
    assert len(cols["t_ms"]) == 400
    assert np.array_equal(cols["t_ms"], np.arange(400))
    last = out.rows[-1].estimate
    assert last is not None
    assert cols["load"][-1] == pytest.approx(last.load, abs=1e-6)
    assert cols["w_claw_bytes"][-1] == last.w_claw_bytes
    assert cols["n_f_rbs"][-1] == pytest.approx(last.n_f_rbs, abs=1e-3)
    assert list(cols["events"][cols["events"] != ""]) == ["rlc-loss:1"]
    assert np.count_nonzero(~np.isnan(cols["feedback_seq"])) == 4
    # Per window instead of per subframe: one row per 100 ms plus the notable ones.
    with EstimateLog(tmp_path / "w.csv", period_ms=100) as log:
        for row in out.rows:
            log.write(row)
    assert len(read_estimates(tmp_path / "w.csv")["t_ms"]) == 5  # 0,100,200,300 + the event at 150
    # An interrupted writer's partial last line is skipped.
    with path.open("a") as f:
        f.write("400,1.0,1,10")
    assert len(read_estimates(path)["t_ms"]) == 400


# -- the daemon on loopback ---------------------------------------------------------------------

class Agent(asyncio.DatagramProtocol):
    """A fake server agent: decodes reports, answers each with a fixed srtt."""

    def __init__(self, srtt_us: int) -> None:
        self.srtt_us = srtt_us
        self.reports: list = []
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        fb = decode_feedback(data, KEY)
        self.reports.append(fb)
        assert self.transport is not None
        self.transport.sendto(Echo(fb.ue_id, fb.seq, self.srtt_us, 20, False).encode(KEY), addr)
        self.transport.sendto(b"junk", addr)                       # counted, not fatal
        self.transport.sendto(Echo(fb.ue_id, fb.seq, 1, 1, True).encode(b"x" * 32), addr)  # bad MAC


class Marks:
    def __init__(self) -> None:
        self.events: list[tuple[LossKind, int]] = []
        self.windows: list[int] = []

    def note_event(self, kind: LossKind, at_monotonic_ns: int) -> None:
        self.events.append((kind, at_monotonic_ns))

    def set_window_ms(self, window_ms: int) -> None:
        self.windows.append(window_ms)


def test_daemon_end_to_end_on_loopback(tmp_path: Path) -> None:
    sfs = busy(0, 2000)
    for sf in sfs[1500:]:
        sf.overflow = 1

    async def scenario() -> tuple:
        loop = asyncio.get_running_loop()
        agent = Agent(srtt_us=80_000)
        transport, _ = await loop.create_datagram_endpoint(lambda: agent, local_addr=("127.0.0.1", 0))
        port = transport.get_extra_info("sockname")[1]
        marks = Marks()
        try:
            # Paced (200 messages per 5 ms): echoes arrive while the feed still runs.
            async with FakeFeedServer(messages_of(sfs), per_batch=200, pause_s=0.005) as feed:
                config = DaemonConfig(client=ClientConfig(ue_id=4, server="agent"), server=("127.0.0.1", port),
                                      key=KEY, diag_port=feed.port, log_path=tmp_path / "est.csv")
                report = await asyncio.wait_for(run_daemon(config, marker=marks), timeout=60)
        finally:
            transport.close()
        return agent, report, marks

    agent, report, marks = asyncio.run(scenario())
    assert report.ended_by == "feed-closed"
    assert report.counters["subframes"] == 2000
    times = [f.diag_time_ms for f in agent.reports]
    assert len(agent.reports) == report.feedback_sent >= 15
    # The server reports a flow (a window of 20): the bottleneck detector's two chains of
    # checks send a report each per window T (100, then 80 ms), more than one per period.
    assert all(c - a >= 80 for a, c in zip(times, times[2:]))
    assert len(times) > 2000 // 100
    assert [f.seq for f in agent.reports] == sorted({f.seq for f in agent.reports})
    assert report.counters["echoes"] >= 10
    assert report.echoes_rejected.get("malformed", 0) >= 10 and report.echoes_rejected.get("bad-mac", 0) >= 10
    assert report.window_ms == 80
    assert agent.reports[-1].window_ms == 80
    assert marks.windows[0] == 100 and marks.windows[-1] == 80
    assert [k for k, _ in marks.events] == [LossKind.OVERFLOW]
    cols = read_estimates(tmp_path / "est.csv")
    assert len(cols["t_ms"]) == report.log_rows == 2000


def test_cli_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """The command, as a process: feed that never ends, SIGTERM, exit 0 with its report."""
    key_file = tmp_path / "key"
    key_file.write_bytes(os.urandom(32))
    log = tmp_path / "est.csv"
    lines = [(json.dumps(m) + "\n").encode() for m in messages_of(busy(0, 200))]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    agent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    agent.bind(("127.0.0.1", 0))
    agent.settimeout(20)
    argv = [sys.executable, "-m", "clawbed.claw.client", "--ue-id", "9", "--server",
            f"127.0.0.1:{agent.getsockname()[1]}", "--key-file", str(key_file), "--diag-port",
            str(server.getsockname()[1]), "--n-rb", "50", "--log", str(log)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        server.settimeout(20)
        conn, _ = server.accept()
        conn.sendall(b"".join(lines))                # 200 subframes, then the feed goes quiet
        data, _ = agent.recvfrom(1024)               # the daemon runs: its first report
        assert decode_feedback(data, key_file.read_bytes()).ue_id == 9
        deadline = time.monotonic() + 20
        while (not log.exists() or log.stat().st_size < 2000) and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()
        agent.close()
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1].removeprefix("claw-client "))
    assert report["ended_by"] == "signal"
    assert report["counters"]["subframes"] == 200
    assert len(read_estimates(log)["t_ms"]) == 200   # flushed on the way out


def test_cli_errors_are_clear(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "clawbed.claw.client", *args], capture_output=True, text=True)

    short = tmp_path / "short"
    short.write_bytes(b"abc")
    r = run("--ue-id", "1", "--server", "127.0.0.1:7000", "--key-file", str(short))
    assert r.returncode == 2 and "at least 16" in r.stderr
    r = run("--ue-id", "1", "--server", "nowhere", "--key-file", str(short))
    assert r.returncode == 2 and "HOST:PORT" in r.stderr
    r = run("--ue-id", "70000", "--server", "127.0.0.1:7000", "--key-file", str(short))
    assert r.returncode == 2 and "0..65535" in r.stderr
    key = tmp_path / "key"
    key.write_bytes(b"k" * 32)
    r = run("--ue-id", "1", "--server", "127.0.0.1:7000", "--key-file", str(key), "--period-ms", "0")
    assert r.returncode == 2 and "--period-ms" in r.stderr
    r = run("--ue-id", "1", "--server", "127.0.0.1:7000", "--key-file", str(key), "--mark-dev", "tun0")
    assert r.returncode == 2 and "--mark-dev needs" in r.stderr
    # No feed listening: a one-line error, exit 1.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    r = run("--ue-id", "1", "--server", "127.0.0.1:7000", "--key-file", str(key), "--diag-port", str(free),
            "--connect-timeout-s", "0.2")
    assert r.returncode == 1 and "connection refused" in r.stderr and "Traceback" not in r.stderr


def test_daemon_reconnects_when_the_feed_drops_it() -> None:
    """First connection: subframes 0..499, then closed (as the emulator drops a slow reader);
    second: 800..1299 (the feed went on meanwhile); third: closed at once (feed ended)."""
    parts = [messages_of(connected(0, 500)), messages_of(connected(800, 1300))]
    connections = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        if len(connections) <= len(parts):
            writer.write(b"".join((json.dumps(m) + "\n").encode() for m in parts[len(connections) - 1]))
            await writer.drain()
        writer.close()

    async def scenario() -> tuple:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        agent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        agent.bind(("127.0.0.1", 0))
        try:
            config = DaemonConfig(client=ClientConfig(ue_id=1), server=("127.0.0.1", agent.getsockname()[1]), key=KEY,
                                  diag_port=server.sockets[0].getsockname()[1])
            return await asyncio.wait_for(run_daemon(config), timeout=60)
        finally:
            server.close()
            agent.close()

    report = asyncio.run(scenario())
    assert report.feed_reconnects == 1
    assert report.ended_by == "feed-closed"
    assert report.counters["subframes"] == 1000
    assert report.feedback_sent == 10              # 0..400 and 800..1200, every 100 ms
