"""End to end: ``clawbed replay`` over a real emulated cell, nginx, the CLAW agents and the
loaders; nothing may be left behind (namespaces, links, processes, BPF struct_ops)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from clawbed.paths import REPO_ROOT
from clawbed.replay.pages import get_page
from clawbed.replay.rundir import read_csv, read_results, read_zstd_lines

pytestmark = pytest.mark.root

TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
#: The smallest page of the set: 100 KiB, 8 objects.
PAGE = "set-01"


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, BPF)")


def _struct_ops_ids() -> set[int]:
    out = subprocess.run(["bpftool", "-j", "struct_ops", "list"], capture_output=True, text=True).stdout
    return {int(m["id"]) for m in json.loads(out or "[]")}


def _assert_nothing_left(run_dir: Path, struct_ops_before: set[int]) -> None:
    """Every namespace, link and process of the run's ledger is gone, and no struct_ops of its."""
    ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    namespaces = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for entry in ledger:
        if entry["kind"] == "netns":
            assert entry["name"] not in namespaces, f"namespace {entry['name']} left behind"
        elif entry["kind"] == "link":
            assert f" {entry['name']}@" not in links and f" {entry['name']}:" not in links
        elif entry["kind"] == "process":
            assert not Path(f"/proc/{entry['pid']}").exists() or \
                Path(f"/proc/{entry['pid']}/stat").read_text().split()[2] == "Z", f"process {entry} still runs"
        elif entry["kind"] == "struct_ops":
            assert int(entry["map_id"]) not in _struct_ops_ids(), f"struct_ops {entry} still registered"
    assert not (_struct_ops_ids() - struct_ops_before) & {int(e["map_id"]) for e in ledger
                                                           if e["kind"] == "struct_ops"}
    mounts = Path("/proc/mounts").read_text()
    assert str(run_dir) not in mounts, "a bpffs of the run is still mounted"


def _replay(clawbed_cli: Path, tmp_path: Path, name: str, *args: str,
            timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(clawbed_cli), "replay", "--trace", str(TRACE), "--page", PAGE,
                           "--runs-dir", str(tmp_path), "--name", name, *args],
                          capture_output=True, text=True, timeout=timeout_s)


@pytest.mark.parametrize("loader,schemes,runs", [("h2", "claw,cubic", 2), ("browser", "claw,cubic", 1)])
def test_replay_measures_every_load_and_leaves_nothing(clawbed_cli: Path, tmp_path: Path, loader: str,
                                                       schemes: str, runs: int) -> None:
    _needs_root()
    before = _struct_ops_ids()
    proc = _replay(clawbed_cli, tmp_path, f"e2e-{loader}", "--schemes", schemes, "--runs", str(runs),
                   "--loader", loader)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run_dir = tmp_path / f"e2e-{loader}"
    _assert_nothing_left(run_dir, before)

    page_bytes = get_page(PAGE, 1).total_bytes
    records = read_results(run_dir)
    order = [r.scheme for r in records]
    assert order == schemes.split(",") * runs  # interleaved: A B A B
    for r in records:
        assert r.ok, r.error
        assert r.plt_ms > 0 and r.protocol == "h2" and r.bytes_total == page_bytes == r.page_bytes
        load_dir = run_dir / r.load_dir
        tcp = read_csv(load_dir / "tcp.csv")
        assert tcp["flow"] and {int(float(c)) for c in tcp["cwnd_pkts"]} and r.flows >= 1
        # claw's CC is registered per run (claw_<run id>); the record says which it was.
        assert r.cc == r.scheme or r.cc.startswith(f"{r.scheme}_")
        assert set(tcp["cc"]) == {r.cc}, "the server's flows ran the scheme's CC"
        truth = read_csv(load_dir / "truth.csv")
        assert len(truth["t_unix_s"]) > 100
        assert r.t_start_unix_s <= float(truth["t_unix_s"][0]) <= float(truth["t_unix_s"][-1]) <= r.t_end_unix_s
        assert sum(float(b) for b in truth["delivered_bytes"]) >= page_bytes
        diag = read_zstd_lines(load_dir / "diag.jsonl.zst")
        assert diag and all(r.t_start_unix_s <= json.loads(m)["timestamp"] <= r.t_end_unix_s for m in diag)
        if r.scheme == "claw":
            tcp_w_claw = [w for w in tcp["w_claw_bytes"] if w]
            assert tcp_w_claw, "W_claw sampled from the CC's map"
            estimates = read_csv(load_dir / "estimates.csv")
            assert estimates["load"] and all(r.t_start_unix_s <= float(t) <= r.t_end_unix_s
                                             for t in estimates["unix_s"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["loads_ok"] == len(records)
    assert len(manifest["trace"]["sha256"]) == 64 and manifest["versions"]["kernel"]
    assert all(manifest["versions"][k] for k in ("clawbed", "nginx", "chromium", "rustc", "clawbed_emu"))
    assert (run_dir / "report.html").is_file() and (run_dir / "plotly.min.js").is_file()
    assert "PLT per scheme" in proc.stdout and "report:" in proc.stderr


@pytest.mark.parametrize("trace", ["idle-cell.cbt", "high-sinr.cbt"])
def test_the_shortest_replay_keeps_its_result(clawbed_cli: Path, tmp_path: Path, trace: str) -> None:
    """One load of the smallest page on a good cell ends within the emulator's first truth
    chunk (1 s): its result and table must still come out, with no traceback."""
    _needs_root()
    proc = subprocess.run([str(clawbed_cli), "replay", "--trace", str(REPO_ROOT / "traces" / "samples" / trace),
                           "--page", PAGE, "--schemes", "cubic", "--runs", "1", "--loader", "h2",
                           "--runs-dir", str(tmp_path), "--name", "shortest"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "PLT per scheme" in proc.stdout
    run_dir = tmp_path / "shortest"
    rows = read_csv(run_dir / "results.csv")
    assert rows["ok"] == ["True"] and float(rows["plt_ms"][0]) > 0
    (record,) = read_results(run_dir)
    assert record.series_error is None
    truth = read_csv(run_dir / record.load_dir / "truth.csv")
    assert truth["t_unix_s"], "the load's truth came from what the emulator had written"


def test_ctrl_c_mid_run_keeps_finished_loads_and_leaves_nothing(clawbed_cli: Path, tmp_path: Path) -> None:
    _needs_root()
    before = _struct_ops_ids()
    run_dir = tmp_path / "interrupted"
    proc = subprocess.Popen([str(clawbed_cli), "replay", "--trace", str(TRACE), "--page", PAGE, "--schemes",
                             "claw,cubic", "--runs", "20", "--loader", "h2", "--runs-dir", str(tmp_path),
                             "--name", "interrupted"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = run_dir / "results.jsonl"
    deadline = time.monotonic() + 300
    # Interrupt during the third load (two finished, one in flight).
    while not (results.exists() and len(results.read_text().splitlines()) >= 2):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no two loads finished within 300 s"
        time.sleep(0.1)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "finished load(s) kept" in err
    _assert_nothing_left(run_dir, before)
    records = read_results(run_dir)
    assert 2 <= len(records) < 40 and all(r.ok for r in records[:2])
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    assert (run_dir / "report.html").is_file()


@pytest.mark.parametrize("args,message", [
    (["--schemes", "claw,westwood"], "unknown scheme 'westwood'"),
    (["--runs", "0"], "--runs 0: must be at least 1"),
    (["--trace", "/nonexistent/trace.cbt"], "--trace /nonexistent/trace.cbt: no such file"),
    (["--page", "no-such-page"], "unknown page 'no-such-page'"),
    (["--loader", "curl"], "'--loader'"),
    (["--bs-buffer", "lots"], "Invalid value for '--bs-buffer': 'lots' is not a size"),
    (["--wireline-rate", "20mbps"], "--wireline-rate"),
])
def test_bad_arguments_are_refused_before_anything_is_made(clawbed_cli: Path, tmp_path: Path, args: list[str],
                                                            message: str) -> None:
    proc = subprocess.run([str(clawbed_cli), "replay", "--page", PAGE, "--runs-dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir()), "nothing is created for a refused run"


def test_loads_of_a_round_meet_the_same_stretch_of_the_trace(clawbed_cli: Path, tmp_path: Path) -> None:
    """With the default ``--align-trace``, each load starts where its round does (the rounds
    spread over the trace): the first subframes of a round's loads played the same trace
    rows, and the next round's others. The trace's MCS and other users' demand encode its row."""
    _needs_root()
    import numpy as np

    from clawbed.emulator.scenarios import constant_trace

    rows = np.arange(20_000)
    trace = constant_trace(tmp_path / "rows.cbt", mcs=10 + (rows // 40) % 19, other_rbs=rows % 40, seconds=20)
    proc = subprocess.run([str(clawbed_cli), "replay", "--trace", str(trace), "--page", PAGE, "--runs-dir",
                           str(tmp_path), "--name", "aligned", "--schemes", "claw,cubic", "--runs", "2",
                           "--loader", "h2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    records = read_results(tmp_path / "aligned")
    assert [(r.round, r.trace_ms) for r in records] == [(0, 0), (0, 0), (1, 10_000), (1, 10_000)]
    for r in records:
        truth = read_csv(tmp_path / "aligned" / r.load_dir / "truth.csv")
        first_row = (int(truth["mcs"][0]) - 10) * 40 + int(truth["other_demand_rbs"][0])
        # The loader starts right after the seek took effect: within a few subframes of it.
        assert 0 <= first_row - r.trace_ms % 760 <= 50, (r, first_row)
