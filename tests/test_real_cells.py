"""REAL-1's measurement (traces/dynamics.py) and judgement (orchestrator/fidelity/realcells.py),
on traces whose figures are known by construction."""

from __future__ import annotations

import math
from pathlib import Path

from clawbed.orchestrator.fidelity.harness import constant_trace
from clawbed.orchestrator.fidelity.realcells import judge
from clawbed.traces.dynamics import JUDGED, dynamics
from clawbed.traces.io import read_trace


def test_a_constant_cell_has_no_variability_and_no_drops(tmp_path: Path) -> None:
    path, _ = constant_trace(tmp_path / "c.cbt", 10e6, 20)
    d = dynamics(read_trace(path))
    assert d["cv_10ms"] < 1e-9 and d["cv_1000ms"] < 1e-9 and d["drops_per_min"] == 0
    assert math.isnan(d["acf_100ms"])  # no variation, no correlation to speak of
    assert math.isnan(d["other_on_ms_mean"])


def test_other_users_stepping_in_are_drops_of_their_length(tmp_path: Path) -> None:
    # Other users take the whole (5 MHz, 25-RB) cell for 1 s of every 4: a 1 s drop, 15 a minute.
    path, _ = constant_trace(tmp_path / "s.cbt", 10e6, 60, other_steps=[0, 0, 0, 25] * 15, step_ms=1000)
    d = dynamics(read_trace(path))
    assert d["drops_per_min"] == 15 and d["drop_ms_mean"] == 1000 and d["drop_depth"] == 1.0
    assert d["other_on_ms_mean"] == 1000 and d["other_off_ms_mean"] == 3000
    assert d["acf_100ms"] > 0.8


def test_only_a_preset_smoother_than_every_real_cell_fails() -> None:
    real = {"a": dict.fromkeys(JUDGED, 0.5), "b": dict.fromkeys(JUDGED, 1.0)}
    checks = judge(real, {"rough": dict.fromkeys(JUDGED, 3.0), "mid": dict.fromkeys(JUDGED, 0.7)})
    assert all(c.ok for c in checks) and "rougher than every real cell: rough" in checks[0].cause
    checks = judge(real, {"smooth": {**dict.fromkeys(JUDGED, 0.7), "cv_100ms": 0.1}})
    failed = [c for c in checks if c.ok is False]
    assert [c.name for c in failed] == ["cv_100ms"] and "smooth" in failed[0].cause
