"""End to end: ``clawbed replay`` with background traffic — wired cross traffic (bulk and
on/off web-like, from Mininet cross hosts) through the wireline bottleneck, other UEs in the
cell — and the flags' errors; nothing left behind."""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pytest

from clawbed.emulator.truth import read_truth
from clawbed.paths import REPO_ROOT
from clawbed.replay.rundir import read_results

TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
PAGE = "set-01"
#: Below the cell's capacity, so the wire is where the page and the cross flow meet.
WIRELINE = "10mbit"


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


def _replay(clawbed_cli: Path, tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(clawbed_cli), "replay", "--trace", str(TRACE), "--page", PAGE, "--loader", "h2",
                           "--schemes", "cubic", "--seed", "1", "--runs-dir", str(tmp_path), "--name", name, *args],
                          capture_output=True, text=True, timeout=300)


def _assert_nothing_left(run_dir: Path) -> None:
    """The run's namespaces and processes (by its ledger) are gone."""
    ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    namespaces = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    for entry in ledger:
        if entry["kind"] == "netns":
            assert entry["name"] not in namespaces, f"namespace {entry['name']} left behind"
        elif entry["kind"] == "process":
            stat = Path(f"/proc/{entry['pid']}/stat")
            assert not stat.exists() or stat.read_text().split()[2] == "Z", f"process {entry} still runs"


@pytest.mark.root
def test_bulk_cross_traffic_crosses_the_bottleneck_and_slows_the_page(clawbed_cli: Path, tmp_path: Path) -> None:
    _needs_root()
    alone = _replay(clawbed_cli, tmp_path, "alone", "--runs", "2", "--wireline-rate", WIRELINE)
    assert alone.returncode == 0, alone.stderr
    crossed = _replay(clawbed_cli, tmp_path, "crossed", "--runs", "2", "--wireline-rate", WIRELINE,
                      "--cross-traffic", "bulk:1")
    assert crossed.returncode == 0, crossed.stderr
    for name in ("alone", "crossed"):
        _assert_nothing_left(tmp_path / name)

    alone_records, crossed_records = read_results(tmp_path / "alone"), read_results(tmp_path / "crossed")
    assert all(r.ok for r in alone_records + crossed_records), [r.error for r in alone_records + crossed_records]
    assert all(r.background_bytes == {} for r in alone_records)
    for r in crossed_records:
        # The iperf3 flow's bytes, counted in the core after the TBF, while the page loaded.
        assert r.background_bytes["cross0-bulk"] > 0, r
    manifest = json.loads((tmp_path / "crossed" / "manifest.json").read_text())
    [bulk] = manifest["background"]
    assert (bulk["kind"], bulk["flows"], bulk["cc"]) == ("bulk", 1, "cubic")
    assert bulk["namespace"].endswith("x0") and bulk["bytes_delivered"] > 0
    # Sharing the bottleneck with a bulk TCP flow halves the page's rate and fills the queue.
    plt_alone = statistics.median(r.plt_ms for r in alone_records)
    plt_crossed = statistics.median(r.plt_ms for r in crossed_records)
    assert plt_crossed > plt_alone, (plt_alone, plt_crossed)


@pytest.mark.root
def test_onoff_cross_traffic_shares_the_bottleneck_through_a_replay(clawbed_cli: Path, tmp_path: Path) -> None:
    _needs_root()
    proc = _replay(clawbed_cli, tmp_path, "onoff", "--runs", "3", "--wireline-rate", WIRELINE,
                   "--cross-traffic", "onoff:4")
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "onoff"
    _assert_nothing_left(run_dir)

    # The page loads completed.
    records = read_results(run_dir)
    assert len(records) == 3 and all(r.ok for r in records), [r.error for r in records]
    assert all(r.bytes_total >= r.page_bytes for r in records)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    [onoff] = manifest["background"]
    assert (onoff["kind"], onoff["flows"], onoff["cc"]) == ("onoff", 4, "cubic")
    assert onoff["namespace"].endswith("x0")
    # Web-like transfers from the Mininet cross host completed (the sink read each to its end)...
    log = run_dir / "background" / "cross0-onoff-transfers.jsonl"
    transfers = [json.loads(line) for line in log.read_text().splitlines()]
    assert transfers and {t["flow"] for t in transfers} <= {0, 1, 2, 3}
    # ... their bytes were counted in the core router, past the gateway's TBF, during the loads
    # and over the run ...
    cross_bytes = onoff["bytes_delivered"]
    during_loads = sum(r.background_bytes["cross0-onoff"] for r in records)
    assert cross_bytes > 0 and during_loads > 0
    # ... and the bottleneck carried them and the pages.
    bottleneck = manifest["wired"]["bottleneck"]
    assert (bottleneck["shaping"]["rate"], bottleneck["shaping"]["qdisc"]) == (WIRELINE, "tbf")
    page_bytes = sum(r.bytes_total for r in records)
    assert bottleneck["sent_bytes"] >= cross_bytes + page_bytes, (bottleneck, cross_bytes, page_bytes)
    print(f"on/off cross traffic: {len(transfers)} transfers, {cross_bytes} B through the bottleneck "
          f"({during_loads} B during the loads); bottleneck sent {bottleneck['sent_bytes']} B, dropped "
          f"{bottleneck['dropped_packets']} packets; PLTs {[round(r.plt_ms) for r in records]} ms")


@pytest.mark.root
def test_other_ues_receive_data_during_the_load(clawbed_cli: Path, tmp_path: Path) -> None:
    _needs_root()
    proc = _replay(clawbed_cli, tmp_path, "others", "--runs", "1", "--other-ues", "2:cubic")
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "others"
    _assert_nothing_left(run_dir)
    [record] = read_results(run_dir)
    assert record.ok, record.error
    assert record.background_bytes["ue1-bulk"] > 0 and record.background_bytes["ue2-bulk"] > 0

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [b["ue"] for b in manifest["background"]] == [1, 2]
    origin_unix_s = int(manifest["emulator"]["ready"]["origin_unix_ns"]) / 1e9
    truth = read_truth(run_dir / "emulator" / "truth.cbcol")
    t_unix = origin_unix_s + truth["t_ms"].astype(np.float64) / 1000
    during = (t_unix >= record.t_start_unix_s) & (t_unix <= record.t_end_unix_s)
    assert truth.n_ues == 3
    for ue in (1, 2):
        assert truth.ue(ue, "delivered_bytes")[during].sum() > 0, f"UE {ue} received nothing during the load"


def _core_ccs_while(proc: subprocess.Popen[str], run_dir: Path) -> set[str]:
    """Every ``claw_…``/``cqic_…`` CC that ``ss -ti`` shows on a socket of the run's core
    namespace while ``proc`` (its replay) runs."""
    seen: set[str] = set()
    core = None
    while proc.poll() is None:
        if core is None:
            try:
                core = f"cb{json.loads((run_dir / 'manifest.json').read_text())['run_id']}core"
            except (OSError, ValueError, KeyError):
                continue
        shown = subprocess.run(["ip", "netns", "exec", core, "ss", "-tinH"], capture_output=True, text=True)
        seen |= set(re.findall(r"\b((?:claw|cqic)_[a-z0-9_]+)\b", shown.stdout))
    return seen


@pytest.mark.root
def test_another_ue_runs_claw_beside_the_replays_claw(clawbed_cli: Path, tmp_path: Path) -> None:
    _needs_root()
    run_dir = tmp_path / "claw-beside-claw"
    argv = [str(clawbed_cli), "replay", "--trace", str(TRACE), "--page", PAGE, "--loader", "h2", "--schemes", "claw",
            "--seed", "1", "--runs-dir", str(tmp_path), "--name", run_dir.name, "--runs", "2",
            "--other-ues", "1:claw"]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        ccs = _core_ccs_while(proc, run_dir)
        _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    _assert_nothing_left(run_dir)

    records = read_results(run_dir)
    assert all(r.ok for r in records), [r.error for r in records]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    [other] = manifest["background"]
    run_id = manifest["run_id"]
    # Each instance's CC under its own name, both on sockets of the core at once.
    assert {r.cc for r in records} == {f"claw_{run_id}"}
    assert other["cc"] == f"claw_{run_id}_u1" and other["scheme"] == "claw" and other["bytes_delivered"] > 0
    assert ccs == {f"claw_{run_id}", f"claw_{run_id}_u1"}, ccs
    assert all(r.background_bytes["ue1-bulk"] > 0 for r in records)
    # The other UE's client estimated from its diag feed, and its feedback reached its agent.
    instance_dir = run_dir / "background" / "ue1-claw"
    estimates = (instance_dir / "claw-client-ue1.csv").read_text().splitlines()
    agent = json.loads((instance_dir / "claw-agent.json").read_text())
    assert len(estimates) > 10 and agent["accepted"] > 0 and agent["rejected_total"] == 0, agent
    # Nothing of either instance is left: CCs, their bpffs, the ACK-flag reader.
    assert not {c for c in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
                if run_id in c}
    assert f"cb{run_id}" not in Path("/proc/mounts").read_text()
    struct_ops = subprocess.run(["bpftool", "struct_ops", "list"], capture_output=True, text=True).stdout
    assert run_id not in struct_ops, struct_ops
    print(f"claw beside claw: CCs {sorted(ccs)}; other UE {other['bytes_delivered']} B, {len(estimates) - 1} "
          f"estimate rows, agent accepted {agent['accepted']}; PLTs {[round(r.plt_ms) for r in records]} ms")


@pytest.mark.parametrize("args,message", [
    (["--cross-traffic", "bulk:1"], "--cross-traffic shares the wireline bottleneck: give --wireline-rate"),
    (["--wireline-rate", WIRELINE, "--cross-traffic", "flood:2"], "--cross-traffic 'flood:2': give bulk:N"),
    (["--wireline-rate", WIRELINE, "--cross-traffic", "bulk:0"], "flows must be 1..64"),
    (["--other-ues", "two"], "--other-ues 'two': give N or N:scheme"),
    (["--other-ues", "64"], "--other-ues '64': N must be 1..63"),
    (["--other-ues", "2:westwood"], "--other-ues: unknown scheme 'westwood'"),
])
def test_bad_background_flags_are_refused_before_anything_is_made(clawbed_cli: Path, tmp_path: Path,
                                                                   args: list[str], message: str) -> None:
    proc = subprocess.run([str(clawbed_cli), "replay", "--page", PAGE, "--runs-dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir()), "nothing is created for a refused run"
