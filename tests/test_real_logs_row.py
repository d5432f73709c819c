"""Fidelity row REAL-2 (orchestrator/fidelity/reallogs.py): skipped with the reason without the
shared logs; its MCS criterion; the bandwidth rule; and its throughput part on the real
emulator over a synthetic phone log (tests/gaplog.py), so it runs without the shared folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from gaplog import synthetic_log
from rich.console import Console

from clawbed.orchestrator.fidelity import reallogs
from clawbed.orchestrator.fidelity.definitions import load_rows
from clawbed.orchestrator.fidelity.harness import RowContext
from clawbed.orchestrator.fidelity.results import SKIPPED, Outcome


def _ctx(tmp_path: Path, **params: object) -> RowContext:
    row = load_rows()["REAL-2"]
    return RowContext(row=row, params={**row.parameters(True), **params}, out=tmp_path, quick=True,
                      run_id_prefix="f", store_path=None, sweep="t", console=Console(stderr=True), outcome=Outcome())


def test_skipped_with_the_reason_without_the_shared_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAWBED_SHARED", str(tmp_path / "nowhere"))
    out = reallogs.real_logs_channel(_ctx(tmp_path)).judge()
    assert out.status == SKIPPED and "nowhere" in out.reason and "shared data folder" in out.reason
    (tmp_path / "shared" / "data" / "real-logs").mkdir(parents=True)
    monkeypatch.setenv("CLAWBED_SHARED", str(tmp_path / "shared"))
    out = reallogs.real_logs_channel(_ctx(tmp_path)).judge()
    assert out.status == SKIPPED and "no .mi2log or .qmdl file" in out.reason


def _channel(mae: float, bias: float, floor: float, const: float) -> dict:
    return {"fit": {"predictor": "snr_db"},
            "error_held_out": {"blocks": 100, "seconds": 5, "mae_mcs": mae, "bias_mcs": bias, "within_2_mcs": 0.5,
                               "second_median_mae_mcs": floor, "median_mae_mcs": const, "hold_mae_mcs": 4.0}}


def test_mcs_criterion() -> None:
    checks, fig = reallogs.mcs_checks("log", _channel(2.0, -0.5, 1.9, 2.2))
    assert [c.ok for c in checks] == [True, True, True] and fig["evaluated"]
    checks, _ = reallogs.mcs_checks("log", _channel(4.5, 1.5, 2.0, 4.0))  # past a CQI step, biased, uninformative
    assert [c.ok for c in checks] == [False, False, False]
    checks, fig = reallogs.mcs_checks("log", {"fit": None, "no_fit_reason": "no 0xB193"})
    assert [c.ok for c in checks] == [None] and "no 0xB193" in checks[0].note and not fig["evaluated"]


def test_bandwidth_is_the_smallest_holding_the_largest_allocation(tmp_path: Path) -> None:
    trace, notes = reallogs.import_log(synthetic_log(tmp_path / "gap.mi2log"))
    assert notes["bandwidth_mhz"] == 5 and trace.n_rb == 25  # its blocks take 25 RBs at most
    assert trace.metadata["provenance"]["channel"]["fit"]["predictor"] == "snr_db"


@pytest.mark.root
def test_throughput_part_runs_the_emulator_over_the_logs_segment(tmp_path: Path) -> None:
    trace, _ = reallogs.import_log(synthetic_log(tmp_path / "gap.mi2log"))
    ctx = _ctx(tmp_path, segment_s=3)
    checks, fig = reallogs.throughput(ctx, "gap", trace, ctx.params)
    # The emulator played the segment cut from the import: its channel MCS, row for row.
    assert fig["evaluated"] and fig["segment_s"] == [0, 3] and fig["truth_mcs_agrees_share"] >= 0.95, fig
    assert len(fig["seconds"]) == 3 and all(s["emulated_mbps"] > 0 for s in fig["seconds"])
    # The phone's rate per second is its own blocks' bits: every other subframe, 25 RBs at MCS 10.
    assert fig["seconds"][1]["phone_mbps"] == pytest.approx(500 * 4008 / 1e6, rel=0.05)
    lower = checks[0]
    assert lower.ok is not None and "Mbit/s" in lower.value
    # The phone was scheduled in half of the subframes: saturated, so the two-sided part is judged.
    assert checks[1].ok is not None and fig["saturated"]["seconds"] == 3
