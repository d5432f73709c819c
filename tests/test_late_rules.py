"""Late-load rules (replay/lateness.py): slips found in the truth's lateness column, the stall a
load's data met, and the strict and evidence rules on made-up loads; a bad --late-rule refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clawbed.errors import InputError
from clawbed.replay import lateness
from clawbed.replay.lateness import LATE_RULES, Lateness, Slip, find_slips, judge
from clawbed.replay.records import LoadRecord
from clawbed.replay.run import ReplayConfig, describe_lateness

SAMPLES = Path(__file__).resolve().parents[1] / "traces" / "samples"


def test_subframes_run_in_one_wake_up_are_one_slip() -> None:
    # Subframes 3, 4 and 5 ran together 5.5 ms in (2.5, 1.5 and 0.5 ms late); subframe 8 ran
    # 0.3 ms late (below the floor); 9 alone 0.7 ms late.
    t = np.arange(10, dtype=float)
    late_us = np.array([20, 30, 25, 2500, 1500, 500, 40, 20, 300, 700], dtype=float)
    busy = np.ones(10, dtype=bool)
    slips = find_slips(t, late_us, busy)
    assert slips == [Slip(t_ms=3.0, late_ms=2.5, subframes=3, busy=True, ran_ms=5.5),
                     Slip(t_ms=9.0, late_ms=0.7, subframes=1, busy=True, ran_ms=9.7)]
    assert slips[0].span_ms() == (3.0, 5.5)
    assert lateness.stall_ms(slips) == pytest.approx(3.2)


def test_an_idle_batch_is_no_slip_unless_it_overran_the_batch() -> None:
    # Ten idle subframes run in one batch 10 ms in (as designed), then a batch that overran by 3 ms.
    t = np.arange(20, dtype=float)
    late_us = np.concatenate([np.arange(10_000, 0, -1000), np.arange(13_000, 3_000, -1000)]).astype(float)
    busy = np.zeros(20, dtype=bool)
    slips = find_slips(t, late_us, busy)
    assert slips == [Slip(t_ms=10.0, late_ms=3.0, subframes=10, busy=False, ran_ms=23.0)]
    assert slips[0].span_ms() == (20.0, 23.0)  # the 10 ms batch was on purpose: the slip is beyond it
    assert lateness.stall_ms(slips) == 0.0  # the cell held no data: nothing was held back


def _lateness(slips: list[float], delivery_max_ms: float = 0.1) -> Lateness:
    found = [Slip(t_ms=100.0 * i, late_ms=v, subframes=1, busy=True) for i, v in enumerate(slips)]
    worst = max(slips, default=0.05)
    return Lateness(worst, worst, delivery_max_ms, delivery_max_ms, stall_ms=lateness.stall_ms(found), slips=found)


@pytest.mark.parametrize(("slips", "strict", "evidence"), [
    ([], True, True),
    ([0.9], True, True),
    ([1.3], False, True),          # one slip of 1.3 ms: the strict rule reruns it, the evidence keeps it
    ([1.9, 1.9], False, True),     # 3.8 ms in all
    ([1.2] * 5, False, False),     # 6 ms in all: beyond the stall bound
    ([3.5], False, True),          # one slip of 3.5 ms: within the single-slip bound (4 ms)
    ([4.5], False, False),         # one slip beyond the single-slip bound
    ([20.0], False, False),
])
def test_the_rules_on_made_up_loads(slips: list[float], strict: bool, evidence: bool) -> None:
    for rule, expected in (("strict", strict), ("evidence", evidence)):
        record = LoadRecord(load=0, round=0, scheme="cubic")
        judge(record, _lateness(slips), rule)
        assert record.timing_ok is expected, (rule, slips)
        assert record.late_rule == rule and record.subframe_slips == len(slips)
        assert record.subframe_stall_ms == pytest.approx(sum(slips))


def test_delivery_error_counts_as_a_slip_and_nothing_measured_is_none() -> None:
    record = LoadRecord(load=0, round=0, scheme="claw")
    judge(record, _lateness([0.6], delivery_max_ms=4.5), "evidence")
    assert record.timing_ok is False and "evidence rule" in describe_lateness(record)
    judge(record, Lateness(None, None, None, None), "evidence")
    assert record.timing_ok is None and record.subframe_slips is None


def test_every_rule_is_registered_once_and_a_bad_one_is_refused() -> None:
    assert set(LATE_RULES) == {"strict", "evidence"}
    with pytest.raises(ValueError, match="twice"):
        lateness.register_rule(lateness.StrictRule())
    config = ReplayConfig(trace=SAMPLES / "idle-cell.cbt", page="set-01", schemes=["cubic"], runs=1,
                          late_rule="lenient")
    with pytest.raises(InputError, match="--late-rule 'lenient': one of strict, evidence"):
        config.check()


def test_a_judged_load_reads_again_under_the_other_rule() -> None:
    record = LoadRecord(load=0, round=0, scheme="cubic")
    judge(record, _lateness([1.3]), "strict")
    assert record.timing_ok is False
    assert lateness.timing_ok_by(record, "evidence") is True and lateness.timing_ok_by(record, "strict") is False
    assert lateness.timing_ok_by(LoadRecord(load=1, round=0, scheme="cubic"), "evidence") is None


@pytest.mark.parametrize(("span_ms", "evidence"), [
    (None, False),     # duration unknown: the fixed 5 ms bound
    (1_000.0, False),  # 0.5 % of 1 s is 5 ms: 6 ms in all is beyond it
    (2_000.0, True),   # 0.5 % of 2 s is 10 ms
])
def test_the_stall_bound_grows_with_the_load(span_ms: float | None, evidence: bool) -> None:
    measured = _lateness([1.2] * 5)
    measured.span_ms = span_ms
    record = LoadRecord(load=0, round=0, scheme="claw")
    judge(record, measured, "evidence")
    assert record.timing_ok is evidence
    # Read again from the record alone: the load's duration is its start and end.
    if span_ms is not None:
        record.t_start_unix_s, record.t_end_unix_s = 1_000.0, 1_000.0 + span_ms / 1000.0
        assert lateness.timing_ok_by(record, "evidence") is evidence
        assert lateness.timing_ok_by(record, "strict") is False
