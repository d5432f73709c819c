"""End to end: ``clawbed replay`` with background traffic — wired cross traffic (bulk and
on/off web-like, from Mininet cross hosts) through the wireline bottleneck, other UEs in the
cell — and the flags' errors; nothing left behind."""

from __future__ import annotations

import json
import os
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
    assert all(r["ok"] for r in alone_records + crossed_records), [r["error"] for r in alone_records + crossed_records]
    assert all(r["background_bytes"] == {} for r in alone_records)
    for r in crossed_records:
        # The iperf3 flow's bytes, counted in the core after the TBF, while the page loaded.
        assert r["background_bytes"]["cross0-bulk"] > 0, r
    manifest = json.loads((tmp_path / "crossed" / "manifest.json").read_text())
    [bulk] = manifest["background"]
    assert (bulk["kind"], bulk["flows"], bulk["cc"]) == ("bulk", 1, "cubic")
    assert bulk["namespace"].endswith("x0") and bulk["bytes_delivered"] > 0
    # Sharing the bottleneck with a bulk TCP flow halves the page's rate and fills the queue.
    plt_alone = statistics.median(r["plt_ms"] for r in alone_records)
    plt_crossed = statistics.median(r["plt_ms"] for r in crossed_records)
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
    assert len(records) == 3 and all(r["ok"] for r in records), [r["error"] for r in records]
    assert all(r["bytes_total"] >= r["page_bytes"] for r in records)
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
    during_loads = sum(r["background_bytes"]["cross0-onoff"] for r in records)
    assert cross_bytes > 0 and during_loads > 0
    # ... and the bottleneck carried them and the pages.
    bottleneck = manifest["wired"]["bottleneck"]
    assert (bottleneck["shaping"]["rate"], bottleneck["shaping"]["qdisc"]) == (WIRELINE, "tbf")
    page_bytes = sum(r["bytes_total"] for r in records)
    assert bottleneck["sent_bytes"] >= cross_bytes + page_bytes, (bottleneck, cross_bytes, page_bytes)
    print(f"on/off cross traffic: {len(transfers)} transfers, {cross_bytes} B through the bottleneck "
          f"({during_loads} B during the loads); bottleneck sent {bottleneck['sent_bytes']} B, dropped "
          f"{bottleneck['dropped_packets']} packets; PLTs {[round(r['plt_ms']) for r in records]} ms")


@pytest.mark.root
def test_other_ues_receive_data_during_the_load(clawbed_cli: Path, tmp_path: Path) -> None:
    _needs_root()
    proc = _replay(clawbed_cli, tmp_path, "others", "--runs", "1", "--other-ues", "2:cubic")
    assert proc.returncode == 0, proc.stderr
    run_dir = tmp_path / "others"
    _assert_nothing_left(run_dir)
    [record] = read_results(run_dir)
    assert record["ok"], record["error"]
    assert record["background_bytes"]["ue1-bulk"] > 0 and record["background_bytes"]["ue2-bulk"] > 0

    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [b["ue"] for b in manifest["background"]] == [1, 2]
    origin_unix_s = int(manifest["emulator"]["ready"]["origin_unix_ns"]) / 1e9
    truth = read_truth(run_dir / "emulator" / "truth.cbcol")
    t_unix = origin_unix_s + truth["t_ms"].astype(np.float64) / 1000
    during = (t_unix >= record["t_start_unix_s"]) & (t_unix <= record["t_end_unix_s"])
    assert truth.n_ues == 3
    for ue in (1, 2):
        assert truth.ue(ue, "delivered_bytes")[during].sum() > 0, f"UE {ue} received nothing during the load"


@pytest.mark.parametrize("args,message", [
    (["--cross-traffic", "bulk:1"], "--cross-traffic shares the wireline bottleneck: give --wireline-rate"),
    (["--wireline-rate", WIRELINE, "--cross-traffic", "flood:2"], "--cross-traffic 'flood:2': give bulk:N"),
    (["--wireline-rate", WIRELINE, "--cross-traffic", "bulk:0"], "flows must be 1..64"),
    (["--other-ues", "two"], "--other-ues 'two': give N or N:scheme"),
    (["--other-ues", "9"], "--other-ues '9': N must be 1..8"),
    (["--other-ues", "2:vegas"], "--other-ues: unknown scheme 'vegas'"),
    (["--other-ues", "2:claw"], "--other-ues: scheme 'claw' needs its own client and agent"),
])
def test_bad_background_flags_are_refused_before_anything_is_made(clawbed_cli: Path, tmp_path: Path,
                                                                   args: list[str], message: str) -> None:
    proc = subprocess.run([str(clawbed_cli), "replay", "--page", PAGE, "--runs-dir", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not any(tmp_path.iterdir()), "nothing is created for a refused run"
