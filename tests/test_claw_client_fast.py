"""The compiled CLAW client (claw/client-rs) against the Python reference, report by report.

The same recorded feed, with the same server echoes arriving at the same points, goes
through both (``clawbed.claw.client.fast``: the reference's ``ClientCore`` as its daemon
drives it, and ``clawbed-claw-client replay``): the estimates logs (every subframe: window,
L, N_t, N_a, N_I, N_s, N_f, MCS, W_claw, saturation, bottleneck state, verdict, report seq,
loss events) must be equal byte for byte, the reports' datagrams (HMAC included) equal, the
counters equal. Exact equality, not a tolerance: the compiled client does the reference's
arithmetic in the same order on the same doubles (numbers parsed correctly rounded, as
Python's json does; printing rounds half to even, as Python's format does).
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from clawbed.claw.client.analyzer import Variant
from clawbed.claw.client.core import ClientConfig
from clawbed.claw.client.fakefeed import FakeSubframe
from clawbed.claw.client.fast import (
    BINARY,
    EchoScript,
    FastClientError,
    chosen_impl,
    fast_replay,
    reference_replay,
)
from clawbed.claw.feedback import Feedback, decode_feedback

KEY = bytes(range(40, 72))


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    if not BINARY.is_file():
        pytest.fail(f"{BINARY} not built: cargo build --release --locked -p claw-client")


def synthetic_feed() -> list[bytes]:
    """Six seconds of one UE's feed across the SFN wrap: a load that swings, RSRQ noise,
    measurements every other subframe (the first PDSCH before the first measurement, N_rb
    unknown), two layers for a while, RLC losses and BS overflows, an idle stretch longer
    than the idle timeout, a 200-ms gap in the feed, a late message and two bad lines."""
    rng = random.Random(23)
    lines: list[bytes] = []
    dropped = overflow = 0
    t0 = 10240 - 1500
    for k in range(1, 6000):
        if 4000 <= k < 4200:
            continue  # the feed stops for 200 ms
        t = t0 + k
        if k % 700 == 0:
            dropped += 2
        if k % 900 == 0:
            overflow += 1
        idle = 2500 <= k < 2900
        own = 0 if idle else (8 + (k * 7) % 23 if (k // 50) % 4 else 0)
        sf = FakeSubframe(t_ms=t, total_alloc_rbs=min(50, own + 10 + int(20 * (1 + math.sin(k / 300)))),
                          own_rbs=own, mcs=5 + (k // 100) % 20, layers=2 if 1000 <= k < 1600 else 1,
                          measure=k % 2 == 0, rlc_dropped=dropped, overflow=overflow)
        for message in sf.messages():
            for sub in message.get("Subpackets", []):
                sub["RSRQ"] += rng.uniform(-0.3, 0.3)
            lines.append(json.dumps(message).encode())
        if k == 1234:  # a late measurement of a subframe already closed
            late = FakeSubframe(t_ms=t - 3, total_alloc_rbs=40, measure=True).messages()[1]
            lines.append(json.dumps(late).encode())
        if k == 3100:
            lines.append(b'{"type_id": "LTE_PHY_PDSCH_Stat_Indication", "Records": [{"Frame Num": 1}]}')
            lines.append(b"not json")
    return lines


def compare(lines: list[bytes], config: ClientConfig, flags: list[str], tmp_path: Path) -> dict[str, int]:
    """Both clients over ``lines``; asserts they agree; the reference's counters."""
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    ref = reference_replay(lines, config, KEY, EchoScript(), tmp_path / "reference.csv")
    log, reports, report = fast_replay(ref.merged, ["--key-file", str(key_file), *flags], tmp_path)
    assert len(reports) == len(ref.reports) and reports == ref.reports
    ref_rows, fast_rows = ref.log_text.splitlines(), log.splitlines()
    assert len(fast_rows) == len(ref_rows)
    for i, (a, b) in enumerate(zip(ref_rows, fast_rows)):
        assert b == a, f"estimates row {i} differs"
    assert report["counters"] == ref.counters
    assert report["echoes_rejected"] == ref.echoes_rejected
    return ref.counters


def verdicts_of(log_text: str) -> Counter[str]:
    return Counter(line.split(",")[19] for line in log_text.splitlines()[1:])


@pytest.mark.parametrize("label,config,flags", [
    ("claw", ClientConfig(ue_id=3, first_seq=0xFFFFFFF0, idle_timeout_ms=300),
     ["--ue-id", "3", "--first-seq", str(0xFFFFFFF0), "--idle-timeout-ms", "300"]),
    ("cqic", ClientConfig(ue_id=3, variant=Variant.CQIC, idle_timeout_ms=300),
     ["--ue-id", "3", "--first-seq", "1", "--variant", "cqic", "--idle-timeout-ms", "300"]),
    ("nodetect-sample-1ms", ClientConfig(ue_id=0, n_rb=50, bottleneck_detector=False, clamp="sample",
                                         feedback_period_ms=1, idle_timeout_ms=300),
     ["--ue-id", "0", "--first-seq", "1", "--n-rb", "50", "--no-bottleneck-detector", "--clamp", "sample",
      "--period-ms", "1", "--idle-timeout-ms", "300"]),
])
def test_fast_client_equals_reference_on_a_synthetic_feed(tmp_path: Path, label: str, config: ClientConfig,
                                                           flags: list[str]) -> None:
    counters = compare(synthetic_feed(), config, flags, tmp_path)
    # The feed exercised what it is for.
    assert counters["wireless_events"] >= 5 and counters["overflow_events"] >= 4
    assert counters["bad_messages"] == 2 and counters["feedback"] > 40
    assert counters["echoes"] > 0 and counters["echoes_other_ue"] > 0
    if label == "claw":
        assert counters["verdicts"] > 0 and counters["checks_without_evidence"] > 0


def test_fast_client_with_a_log_period(tmp_path: Path) -> None:
    """--log-period-ms 10: one row per period plus every row with a verdict, report or event."""
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    lines = synthetic_feed()
    config = ClientConfig(ue_id=1, first_seq=5, idle_timeout_ms=300)
    ref = reference_replay(lines, config, KEY, EchoScript(), tmp_path / "reference.csv", log_period_ms=10)
    log, reports, _ = fast_replay(ref.merged, ["--key-file", str(key_file), "--ue-id", "1", "--first-seq", "5",
                                               "--idle-timeout-ms", "300", "--log-period-ms", "10"], tmp_path)
    assert log == ref.log_text and reports == ref.reports
    assert 500 < len(log.splitlines()) < 1500


@pytest.mark.root
def test_fast_client_equals_reference_on_an_emulator_feed(tmp_path: Path) -> None:
    """A real feed: clawbed-emu's busy-cell preset with a Cubic bulk flow to the UE, 3 s."""
    from clawbed.claw.client.bench import record_feed
    from clawbed.emulator.process import BINARY as EMU

    if not EMU.is_file():
        pytest.fail(f"{EMU} not built: cargo build --release --locked -p emulator")
    feed = record_feed(tmp_path / "run", "busy-cell", 3.0)
    lines = feed.read_bytes().splitlines()
    assert len(lines) > 10_000
    counters = compare(lines, ClientConfig(ue_id=0, first_seq=77), ["--ue-id", "0", "--first-seq", "77"],
                       tmp_path)
    log = (tmp_path / "reference.csv").read_text()
    verdicts = verdicts_of(log)
    print(f"emulator feed: {len(lines)} messages, {counters['subframes']} subframes, {counters['feedback']} reports, "
          f"{counters['verdicts']} verdicts {dict(verdicts)}: equal")
    assert counters["feedback"] > 20 and counters["verdicts"] > 0


@pytest.mark.parametrize("impl", ["default", "reference"])
def test_the_cli_runs_either_client_live(tmp_path: Path, impl: str) -> None:
    """``python -m clawbed.claw.client`` (the fast client by default, or the reference) on a
    feed served on loopback: its estimates and its reports (but their seq, which starts from
    the clock) are the reference's offline over the same feed."""
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    lines = synthetic_feed()[:5000]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    agent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    agent.bind(("127.0.0.1", 0))
    log = tmp_path / "fast.csv"
    env = {k: v for k, v in os.environ.items() if k != "CLAWBED_CLAW_CLIENT"}
    argv = [sys.executable, "-m", "clawbed.claw.client", "--ue-id", "4", "--server",
            f"127.0.0.1:{agent.getsockname()[1]}", "--key-file", str(key_file), "--diag-port",
            str(server.getsockname()[1]), "--idle-timeout-ms", "300", "--log", str(log)]
    if impl != "default":
        argv += ["--client-impl", impl]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    received = []
    try:
        server.settimeout(20)
        conn, _ = server.accept()
        server.close()
        conn.sendall(b"".join(line + b"\n" for line in lines))
        conn.close()  # the feed ends: the client tries to reconnect for 1 s, then reports
        out, err = proc.communicate(timeout=30)
        agent.settimeout(0.5)
        while True:
            try:
                received.append(agent.recv(1024))
            except TimeoutError:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()
        agent.close()
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1].removeprefix("claw-client "))
    assert report["ended_by"] == "feed-closed" and report["feedback_send_errors"] == 0
    # Nobody answered the reports: the reference is the one whose server never echoes.
    silent = reference_replay(lines, ClientConfig(ue_id=4, idle_timeout_ms=300), KEY, _Silent(),
                              tmp_path / "silent.csv")
    got = [decode_feedback(d, KEY) for d in received]
    want = [decode_feedback(bytes.fromhex(h), KEY) for h in silent.reports]

    def fields(f: Feedback) -> tuple[object, ...]:
        return (f.ue_id, f.diag_time_ms, f.w_claw_bytes, f.load, f.n_f_rbs, f.n_t_rbs, f.window_ms, f.saturated,
                f.wireline)

    assert report["counters"]["feedback"] == len(got) == len(want) > 10
    assert [fields(f) for f in got] == [fields(f) for f in want]
    assert [f.seq for f in got] == [(got[0].seq + i) & 0xFFFFFFFF for i in range(len(got))]
    assert seq_from_zero(log.read_text()) == seq_from_zero(silent.log_text)
    assert report["counters"] == silent.counters


def seq_from_zero(log_text: str) -> list[list[str]]:
    """The log's rows with each report's seq counted from the first (it starts from the clock)."""
    rows = [line.split(",") for line in log_text.splitlines()]
    first: int | None = None
    for row in rows[1:]:
        if row[20]:
            first = int(row[20]) if first is None else first
            row[20] = str((int(row[20]) - first) & 0xFFFFFFFF)
    return rows


class _Silent(EchoScript):
    """A server that never answers."""

    def echoes(self, report: object, start_ms: int, key: bytes) -> list[tuple[int, bytes]]:
        return []


def test_client_choice_and_its_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLAWBED_CLAW_CLIENT", raising=False)
    assert chosen_impl(None) == "fast" and chosen_impl("reference") == "reference"
    monkeypatch.setenv("CLAWBED_CLAW_CLIENT", "reference")
    assert chosen_impl(None) == "reference"
    monkeypatch.setenv("CLAWBED_CLAW_CLIENT", "rust")
    with pytest.raises(FastClientError, match="CLAWBED_CLAW_CLIENT 'rust': must be one of fast, reference"):
        chosen_impl(None)
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    base = [sys.executable, "-m", "clawbed.claw.client", "--ue-id", "1", "--server", "127.0.0.1:9",
            "--key-file", str(key_file), "--connect-timeout-s", "0.2", "--diag-port", "1"]
    r = subprocess.run(base + ["--client-impl", "rust"], capture_output=True, text=True)
    assert r.returncode == 2 and "--client-impl: invalid choice: 'rust'" in r.stderr
    # The fast client's own errors name what it was doing.
    r = subprocess.run(base + ["--client-impl", "fast"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "diag feed 127.0.0.1:1: connection refused for 0.2 s" in r.stderr
    r = subprocess.run(base + ["--client-impl", "fast", "--feed", "mi2log"], capture_output=True, text=True,
                       timeout=30)
    assert "--feed mi2log is decoded by the reference client only: running it" in r.stderr
    assert "mi2log feed 127.0.0.1:2: connection refused" in r.stderr
    r = subprocess.run([str(BINARY), "replay", "--input", str(tmp_path / "missing.jsonl"), "--ue-id", "1",
                        "--key-file", str(key_file)], capture_output=True, text=True)
    assert r.returncode == 1 and "missing.jsonl" in r.stderr


def test_fast_client_skips_bad_lines_naming_their_offset(tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    good = [json.dumps(m).encode() for m in FakeSubframe(t_ms=5, total_alloc_rbs=10, own_rbs=5).messages()]
    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(b"\n".join(good[:2] + [b'{"type_id": 3,', b'{"type_id":"LTE_PHY_PDSCH_Stat_Indication"}']
                                + good[2:]) + b"\n")
    r = subprocess.run([str(BINARY), "replay", "--input", str(feed), "--ue-id", "1", "--key-file", str(key_file)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    offset = len(good[0]) + len(good[1]) + 2
    assert f"feed byte {offset}: not a JSON line (expected a key at byte 14)" in r.stderr
    assert "no field \"Records\"" in r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1].removeprefix("claw-client "))
    assert report["counters"]["bad_messages"] == 2 and report["counters"]["subframes"] == 1


def test_the_command_lines_light_limits_match_their_sources() -> None:
    """cli.py checks the command line before importing the client (numpy and all): its
    limits are copies, held equal here."""
    from clawbed import lte
    from clawbed.claw.client import analyzer, core, limits
    from clawbed.emulator.config import DEFAULT_DIAG_PORT

    assert limits.CELL_SIZES_RB == tuple(sorted(lte.VALID_N_RB))
    assert limits.VARIANTS == tuple(v.value for v in analyzer.Variant) and limits.VARIANTS[0] == "claw"
    assert limits.DEFAULT_DIAG_PORT == DEFAULT_DIAG_PORT
    assert core.MAX_FEEDBACK_PERIOD_MS == limits.MAX_FEEDBACK_PERIOD_MS == analyzer.MAX_WINDOW_MS
    done = subprocess.run([sys.executable, "-c", "import sys, clawbed.claw.client.cli, clawbed.claw.client.marking; "
                           "print('numpy' in sys.modules)"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_cost_bench_plays_a_feed_to_each_client(tmp_path: Path) -> None:
    """``make bench``'s clients-per-core machinery on a short feed: every client, each its own
    process and connection, takes the whole feed at the 1 ms pace, its reports answered (no
    figure is judged here: speed belongs to the bench)."""
    from clawbed.claw.client.bench import client_cost

    feed = tmp_path / "feed.jsonl"
    feed.write_bytes(b"".join(line + b"\n" for line in synthetic_feed()[:5000]))  # ~1 s of subframes
    result = client_cost(feed, tmp_path / "cost", 2, 1)
    assert result["subframes"] > 900 and result["seconds"] > 0.5
    assert result["fast"]["clients"] == 2 and result["reference"]["clients"] == 1
    assert result["fast"]["cpu_percent_mean"] >= 0 and result["serve"]["subframes"] == result["subframes"]
    logs = sorted((tmp_path / "cost").glob("client-*.csv"))
    assert len(logs) == 3
    # Every client closed the same subframes; the echoes (answered live, so at moments of
    # their own) set each one's window T and fed each one's detector.
    rows = [[line.split(",") for line in log.read_text().splitlines()[1:]] for log in logs]
    assert [r[0] for r in rows[0]] == [r[0] for r in rows[1]] == [r[0] for r in rows[2]]
    assert all(any(r[3] == "60" for r in client) for client in rows)
    assert result["echoes_sent"] > 0 and result["verdicts"] > 0


def test_the_fast_client_ends_with_its_launcher(tmp_path: Path) -> None:
    """--exit-with-parent (the launcher that owns the UE's marker passes it): the launcher
    killed outright, the client still ends cleanly, with its report."""
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = [str(BINARY), "run", "--ue-id", "2", "--server", "127.0.0.1:9", "--key-file", str(key_file),
              "--diag-port", str(server.getsockname()[1]), "--exit-with-parent"]
    launcher = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time\n"
                                 "child = subprocess.Popen(sys.argv[1:])\nprint(child.pid, flush=True)\ntime.sleep(60)",
                                 *client], stdout=subprocess.PIPE, text=True)
    try:
        assert launcher.stdout is not None
        child_pid = int(launcher.stdout.readline())
        server.settimeout(20)
        conn, _ = server.accept()  # the client runs
        launcher.kill()
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 10
        ended = False
        while not ended and time.monotonic() < deadline:
            try:
                ended = Path(f"/proc/{child_pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
            except FileNotFoundError:
                ended = True
            time.sleep(0.05)
        if not ended:
            os.kill(child_pid, signal.SIGKILL)
        assert ended, "the client outlived its launcher"
        out = launcher.stdout.read()
    finally:
        if launcher.poll() is None:
            launcher.kill()
        server.close()
    assert '"ended_by": "signal"' in out, out
    conn.close()
