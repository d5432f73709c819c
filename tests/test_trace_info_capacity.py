"""``clawbed trace info`` on a Mahimahi import: the capacity it reports is the recorded one.

A Mahimahi trace records one link, no cell; the import trims each subframe's TBS down to the
recorded bits with ``other_rbs`` (and gives N_rb to a ms without delivery opportunities).
Those RBs are no capacity and no other users, so "the full cell" is the recorded rate.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clawbed.traces.importers import import_mahimahi
from clawbed.traces.io import write_trace
from clawbed.traces.schema import make_trace, new_metadata
from clawbed.traces.stats import capacities_mbps, summarize

CLAWBED = Path(sys.executable).parent / "clawbed"


def constant_mahimahi(path: Path, packets_per_ms: int, duration_ms: int) -> Path:
    """A Mahimahi trace of ``packets_per_ms`` opportunities in each ms 0..duration-1:
    exactly packets_per_ms × 12 Mbit/s."""
    path.write_text("".join(f"{t}\n" * packets_per_ms for t in range(duration_ms)))
    return path


def test_constant_48_mbit_trace_reports_48(tmp_path: Path) -> None:
    source = constant_mahimahi(tmp_path / "c48.down", 4, 5000)  # 4 × 12000 bits per ms = 48 Mbit/s
    trace = import_mahimahi(source, bandwidth_mhz=20, n_antennas=2)
    cbt = tmp_path / "c48.cbt"
    write_trace(trace, cbt)
    run = subprocess.run([CLAWBED, "trace", "info", "--json", cbt], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    s = json.loads(run.stdout)
    for key in ("capacity_alone_mbps", "capacity_full_cell_mbps"):
        # The import's cumulative bits stay within one TBS step (≤ 4904 bits) of the recorded
        # ones: over 5 s that is ≤ 0.001 Mbit/s on the mean.
        assert s[key]["mean"] == pytest.approx(48.0, abs=0.002), (key, s[key])
        assert s[key]["p50"] == pytest.approx(48.0, abs=0.05), (key, s[key])
    # No other users: the trim RBs are not reported as their load.
    assert s["other_users"] is False and s["other_load_pct"] is None
    table = subprocess.run([CLAWBED, "trace", "info", cbt], capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    full_row = next(line for line in table.stdout.splitlines() if "full cell" in line)
    assert full_row.split()[-4] == "48.0", full_row  # the mean column
    assert "no other users" in table.stdout


def test_mahimahi_trace_with_empty_ms_has_no_full_cell_beyond_the_record(tmp_path: Path) -> None:
    # 12 Mbit/s on every other ms, nothing in between: 6 Mbit/s over the trace. The empty ms
    # get other_rbs = N_rb, which as "full cell" capacity counted a whole cell each.
    source = tmp_path / "half.down"
    source.write_text("".join(f"{t}\n" for t in range(0, 4000, 2)))
    trace = import_mahimahi(source, bandwidth_mhz=20, n_antennas=2)
    alone, full = capacities_mbps(trace)
    assert np.array_equal(alone, full)
    assert summarize(trace)["capacity_full_cell_mbps"]["mean"] == pytest.approx(6.0, abs=0.01)


def test_a_cell_trace_keeps_its_full_cell() -> None:
    # The same columns from a source that records a cell: other_rbs are other users.
    n = 1000
    meta = new_metadata(bandwidth_mhz=20, n_antennas=1, duration_ms=n, source="synth", provenance={})
    trace = make_trace(meta, mcs=np.full(n, 20), other_rbs=np.full(n, 50))
    alone, full = capacities_mbps(trace)
    assert (full > 1.9 * alone).all()
    s = summarize(trace)
    assert s["other_users"] is True and s["other_load_pct"]["mean"] == pytest.approx(50.0)
