"""`--trace` takes every input form (traces/inputs.py): a .cbt/.csv as it is, a phone log or a
Mahimahi trace imported on the fly and cached by content and importer."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from clawbed.errors import InputError
from clawbed.traces import inputs
from clawbed.traces.io import read_trace


def _mahimahi(path: Path, per_ms: int = 1, ms: int = 2000) -> Path:
    """A constant Mahimahi trace: ``per_ms`` 1500-byte opportunities every millisecond (12 Mbit/s each)."""
    path.write_text("".join(f"{t}\n" * per_ms for t in range(1, ms + 1)))
    return path


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CLAWBED_STATE", str(tmp_path / "state"))
    return tmp_path / "state"


def test_a_mahimahi_trace_is_imported_once_and_cached(tmp_path: Path, state: Path) -> None:
    down = _mahimahi(tmp_path / "const.down", per_ms=2)
    notes: list[str] = []
    first = inputs.as_trace(down, notes.append)
    assert first.suffix == ".cbt" and first.is_file() and "imported" in notes[-1]
    assert state in first.parents, "the cache is under the state folder"
    trace = read_trace(first)
    assert 2000 <= trace.duration_ms <= 2001  # Mahimahi times are 1-based
    again = inputs.as_trace(down, notes.append)
    assert again == first and "using its import" in notes[-1]
    _mahimahi(down, per_ms=1)  # another recording under the same name is imported anew
    assert inputs.as_trace(down) != first


def test_traces_pass_through_and_unknown_kinds_are_refused(tmp_path: Path, state: Path) -> None:
    cbt = Path(__file__).parents[1] / "traces" / "samples" / "idle-cell.cbt"
    assert inputs.as_trace(cbt) == cbt
    odd = tmp_path / "capture.pcap"
    odd.write_bytes(b"\0")
    with pytest.raises(InputError, match=r"capture.pcap: not a PHY trace .* trace import --from"):
        inputs.as_trace(odd)
    with pytest.raises(InputError, match="no such file"):
        inputs.as_trace(tmp_path / "missing.down")


@pytest.mark.root
def test_replay_runs_over_a_mahimahi_trace_given_to_trace(tmp_path: Path, clawbed_cli: Path) -> None:
    down = _mahimahi(tmp_path / "twelve.down", per_ms=1, ms=10_000)
    proc = subprocess.run([str(clawbed_cli), "replay", "--trace", str(down), "--page", "set-01", "--schemes",
                           "cubic", "--runs", "1", "--loader", "h2", "--runs-dir", str(tmp_path), "--name", "mm"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, CLAWBED_STATE=str(tmp_path / "state")))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "twelve.down: imported" in proc.stderr
    manifest = json.loads((tmp_path / "mm" / "manifest.json").read_text())
    assert manifest["trace"]["imported_from"] == str(down.resolve())


def test_a_mahimahi_import_under_proportional_fair_is_warned_about(tmp_path: Path, state: Path) -> None:
    from clawbed.replay.run import Replay, ReplayConfig, ReplayEvent

    down = _mahimahi(tmp_path / "const.down")
    heard: list[ReplayEvent] = []
    Replay(ReplayConfig(trace=down, page="set-01", schemes=["cubic"], runs=1, output_root=tmp_path, name="pf"),
           heard.append)
    assert any(e.kind == "warning" and "--scheduler background-first" in (e.message or "") for e in heard)
    heard.clear()
    Replay(ReplayConfig(trace=down, page="set-01", schemes=["cubic"], runs=1, output_root=tmp_path, name="bf",
                        scheduler="background-first"), heard.append)
    assert not any(e.kind == "warning" for e in heard)


def test_a_phone_log_gets_the_bandwidth_its_allocations_need(tmp_path: Path, state: Path) -> None:
    """A diag log does not carry the cell's bandwidth: the Pixel XL log's largest allocation is
    47 RBs, so it is a 10 MHz cell (the importer's 20 MHz default would double the UE's room)."""
    from clawbed.paths import shared_data

    log = shared_data("real-logs/hackathon2018_PixelXL_2018-08-25.mi2log")
    if log is None:
        pytest.skip("needs the third-party recordings (CLAWBED_SHARED or ../shared beside the repository)")
    notes: list[str] = []
    trace = read_trace(inputs.as_trace(log, notes.append))
    assert trace.metadata["cell"]["n_rb"] == 50 and "largest allocation (47 RBs)" in notes[0]
