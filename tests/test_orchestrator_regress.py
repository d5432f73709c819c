"""The PLT regression test's statistics, the baseline file and the JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from clawbed.errors import InputError
from clawbed.orchestrator import regress as rg
from clawbed.orchestrator.store import LoadRow


def _sample(values: np.ndarray | list[float], label: str = "busy/set-01/base/s1", scheme: str = "claw",
            failed: int = 0, sid: str = "abc") -> rg.Sample:
    return rg.Sample(label, sid, scheme, tuple(float(v) for v in values), failed)


def _plts(n: int, median_ms: float, seed: int) -> np.ndarray:
    """Log-normal PLTs (σ 0.15, about what the testbed shows) with a given median, ms."""
    return median_ms * np.exp(np.random.default_rng(seed).normal(0, 0.15, n))


def test_null_counts_match_enumerated_orderings() -> None:
    """The U statistic's exact null distribution against brute force over every ordering."""
    from itertools import combinations
    for n, m in ((1, 1), (2, 3), (4, 4), (3, 6)):
        brute = np.zeros(n * m + 1)
        for first in combinations(range(n + m), n):  # ranks of the first sample's loads
            second = [r for r in range(n + m) if r not in first]
            brute[sum(a > b for a in first for b in second)] += 1
        assert np.array_equal(rg.mann_whitney_null_counts(n, m), brute), (n, m)


def test_interval_rank_and_the_fewest_loads() -> None:
    # Textbook critical values: 4 vs 4 → the extreme pair ratios (1/70 per tail), 5 vs 5 → k 3, 10 vs 10 → k 24.
    assert [rg.interval_rank(n, n) for n in (2, 3, 4, 5, 10)] == [0, 0, 1, 3, 24]
    assert rg.interval_rank(rg.MIN_LOADS, rg.MIN_LOADS) >= 1 > rg.interval_rank(rg.MIN_LOADS - 1, rg.MIN_LOADS - 1)


def test_hodges_lehmann_ratio_and_interval() -> None:
    ratio, low, high = rg.hodges_lehmann_ratio_ci([1200, 1300, 1100, 1250], [1000, 1050, 950, 1000])
    assert low == pytest.approx(1100 / 1050) and high == pytest.approx(1300 / 950)  # k = 1: the extremes
    assert low <= ratio <= high
    inverse = rg.hodges_lehmann_ratio_ci([1000, 1050, 950, 1000], [1200, 1300, 1100, 1250])[0]
    assert inverse == pytest.approx(1 / ratio)
    assert rg.hodges_lehmann_ratio_ci([2, 3], [1, 2]) == (pytest.approx(np.sqrt(1.5 * 2)), None, None)  # pairs 1, 1.5, 2, 3
    with pytest.raises(ValueError):
        rg.hodges_lehmann_ratio_ci([], [1.0])


@pytest.mark.parametrize("n", [5, 10])
def test_slowed_distribution_is_caught_unchanged_is_not(n: int) -> None:
    """Over 200 independent draws: an 80 % slower distribution is flagged nearly always,
    another draw of the same distribution (almost) never — at the CI suite's 5 loads too."""
    caught = alarms = 0
    for trial in range(200):
        base = _sample(_plts(n, 1000, 1000 + trial))
        slowed = _sample(_plts(n, 1800, 3000 + trial))
        same = _sample(_plts(n, 1000, 5000 + trial))
        c_slow = rg.compare({base.key: slowed}, {base.key: base})[0]
        c_same = rg.compare({base.key: same}, {base.key: base})[0]
        caught += c_slow.verdict == "regression" and c_slow.ci_low > rg.DEFAULT_THRESHOLD
        alarms += c_same.failed
    assert caught >= 190  # power at n = 5, σ 0.15: about 99 %
    # A false alarm needs the interval above 1 (at most 2.5 % of draws) and the estimate ≥ 1.05.
    assert alarms <= 10


def test_an_unchanged_run_whose_loads_fall_high_is_not_a_regression() -> None:
    """Both loads now above both baseline loads by 30 % happens by chance one time in six with
    two loads a side: that is no evidence, and with more loads the same draw is not flagged."""
    base, cur = _sample([585, 590]), _sample([781, 763])
    assert rg.compare({base.key: cur}, {base.key: base})[0].verdict == "too-few-loads"
    base, cur = _sample([585, 590, 640, 700, 620]), _sample([781, 763, 600, 650, 640])
    assert rg.compare({base.key: cur}, {base.key: base})[0].verdict == "ok"


def test_small_slowdown_within_threshold_is_not_a_regression() -> None:
    base = _sample(_plts(30, 1000, 20))
    cur = _sample(1.02 * _plts(30, 1000, 20)[::-1])  # +2 %: below the 5 % threshold
    assert rg.compare({base.key: cur}, {base.key: base})[0].verdict == "ok"
    # Significant (the interval above 1) but smaller than the threshold: not reported.
    assert rg.verdict_of(1.03, 1.01, 1.05, 1.05) == "ok"
    assert rg.verdict_of(1.06, 1.01, 1.09, 1.05) == "regression"


def test_improvement_missing_and_new_failures() -> None:
    base = _sample(_plts(10, 1000, 30))
    faster = _sample(_plts(10, 500, 31))
    assert rg.compare({base.key: faster}, {base.key: base})[0].verdict == "improved"
    other = _sample(_plts(10, 1000, 32), scheme="cubic")
    verdicts = {c.scheme: c.verdict for c in rg.compare({other.key: other}, {base.key: base})}
    assert verdicts == {"claw": "missing", "cubic": "missing"}
    flaky = _sample(_plts(7, 1000, 33), failed=3)
    assert rg.compare({base.key: flaky}, {base.key: base})[0].verdict == "new-failures"
    with pytest.raises(InputError, match="--threshold"):
        rg.compare({}, {}, threshold=0.9)


def test_settings_change_is_noted() -> None:
    base, cur = _sample(_plts(5, 1000, 40), sid="aaa"), _sample(_plts(5, 1000, 41), sid="bbb")
    assert "settings changed (id aaa → bbb)" in rg.compare({cur.key: cur}, {base.key: base})[0].note


def test_samples_from_loads_groups_and_counts_failures() -> None:
    def row(scheme: str, rep: int, ok: bool, plt: float | None) -> LoadRow:
        return LoadRow("s", "main", "id1", "lbl", scheme, rep, ok, plt, 1, "h2", None if ok else "x", None, rep,
                       None, None, 0.0)
    samples = rg.samples_from_loads([row("claw", 1, True, 600), row("claw", 0, True, 500), row("claw", 2, False, None),
                                     row("cubic", 0, True, 700)])
    assert samples["lbl|claw"].plt_ms == (500.0, 600.0) and samples["lbl|claw"].n_failed == 1
    assert samples["lbl|cubic"].summary()["median_ms"] == 700.0


def test_baseline_round_trip_and_errors(tmp_path: Path) -> None:
    s = {x.key: x for x in (_sample([500, 510, 520]), _sample([700, 720], scheme="cubic", failed=1))}
    path = tmp_path / "b.json"
    rg.write_baseline(path, "ci", s)
    suite, back = rg.read_baseline(path)
    assert suite == "ci" and back == s
    doc = json.loads(path.read_text())
    assert doc["entries"]["busy/set-01/base/s1|claw"]["summary"]["median_ms"] == 510.0
    (tmp_path / "bad.json").write_text('{"format": 1, "entries": {"k": {"label": "x"}}}')
    with pytest.raises(InputError, match=r"bad.json: entries.k: bad or missing"):
        rg.read_baseline(tmp_path / "bad.json")
    with pytest.raises(InputError, match="not JSON"):
        (tmp_path / "x.json").write_text("{")
        rg.read_baseline(tmp_path / "x.json")


def test_junit_xml_is_well_formed_with_one_failure() -> None:
    base = _sample(_plts(5, 1000, 50))
    base2 = _sample(_plts(5, 1000, 51), scheme="cubic")
    comparisons = rg.compare({base.key: _sample(_plts(5, 3000, 52)), base2.key: _sample(_plts(5, 1000, 53),
                                                                                         scheme="cubic")},
                             {base.key: base, base2.key: base2})
    root = ET.fromstring(rg.junit_xml("ci & <co>", comparisons, 1.1))
    assert root.tag == "testsuites" and root.get("tests") == "2" and root.get("failures") == "1"
    cases = root.findall("./testsuite/testcase")
    assert [c.get("name") for c in cases] == ["claw", "cubic"]
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("type") == "regression" and "ratio" in failure.get("message")
    assert cases[1].find("failure") is None


def test_paper_rows_put_the_papers_number_beside_the_testbeds() -> None:
    from clawbed.orchestrator.report import paper_rows
    from clawbed.orchestrator.spec import PaperNumber

    samples = {s.key: s for s in (_sample([400, 600], label="idle-cell/profile/h2/s1"),
                                  _sample([1000, 1000], label="idle-cell/profile/h2/s1", scheme="cubic"))}
    rows = paper_rows([PaperNumber(figure="Fig 18a", match="idle-cell/profile/h2", metric="reduction_pct",
                                   scheme="claw", versus="cubic", value=66, note="§6.2.2"),
                       PaperNumber(figure="Fig 12", match="image-2mb", metric="plt_s", scheme="claw", value=2.7,
                                   note="§6.1")],
                      samples)
    assert rows[0][:6] == ("Fig 18a", "idle-cell/profile/h2", "PLT reduction claw vs cubic", "66 %", "50 %", "2/2")
    assert rows[1][3:6] == ("2.7 s", "not run", "0")


# -- the paired test (rounds aligned to the trace) ----------------------------------------------


def _paired(values: np.ndarray | list[float], *, scheme: str = "claw", trace_step: int = 3333,
            reps: list[int] | None = None) -> rg.Sample:
    reps = list(range(len(values))) if reps is None else reps
    return rg.Sample("busy/set-01/base/s1", "abc", scheme, tuple(float(v) for v in values), 0,
                     repetitions=tuple(reps), trace_ms=tuple(r * trace_step for r in reps))


def test_signed_rank_null_counts_match_enumerated_sign_patterns() -> None:
    from itertools import product
    for n in range(0, 9):
        brute = np.zeros(n * (n + 1) // 2 + 1)
        for signs in product((0, 1), repeat=n):
            brute[sum(rank for rank, positive in zip(range(1, n + 1), signs) if positive)] += 1
        assert np.array_equal(rg.signed_rank_null_counts(n), brute), n


def test_signed_rank_interval_rank_matches_the_textbook_table() -> None:
    # Two-sided 5 % critical values of the Wilcoxon signed-rank test (T ≤ c rejects): n 6 → 0,
    # 7 → 2, 8 → 3, 9 → 5, 10 → 8, 15 → 25, 20 → 52, 25 → 89; the interval's k is c + 1.
    table = {5: None, 6: 0, 7: 2, 8: 3, 9: 5, 10: 8, 15: 25, 20: 52, 25: 89}
    for n, critical in table.items():
        assert rg.signed_rank_interval_rank(n) == (0 if critical is None else critical + 1), n
    assert rg.signed_rank_interval_rank(rg.MIN_PAIRS) >= 1 > rg.signed_rank_interval_rank(rg.MIN_PAIRS - 1)


def test_paired_interval_against_brute_force() -> None:
    cur = [1100.0, 1210.0, 990.0, 1300.0, 1050.0, 1180.0, 1120.0]
    base = [1000.0, 1100.0, 1000.0, 1200.0, 1000.0, 1100.0, 1000.0]
    ratio, low, high = rg.paired_hodges_lehmann_ratio_ci(cur, base)
    d = [np.log(c / b) for c, b in zip(cur, base)]
    walsh = sorted((d[i] + d[j]) / 2 for i in range(7) for j in range(i, 7))
    assert ratio == pytest.approx(np.exp(np.median(walsh)))
    assert (low, high) == (pytest.approx(np.exp(walsh[2])), pytest.approx(np.exp(walsh[-3])))  # k = 3 at n = 7
    assert rg.paired_hodges_lehmann_ratio_ci(base, cur)[0] == pytest.approx(1 / ratio)
    assert rg.paired_hodges_lehmann_ratio_ci(cur[:5], base[:5])[1:] == (None, None)
    with pytest.raises(ValueError):
        rg.paired_hodges_lehmann_ratio_ci([1.0], [1.0, 2.0])


@pytest.mark.parametrize("n", [6, 8])
def test_paired_interval_covers_the_true_ratio_at_least_95_percent(n: int) -> None:
    """Coverage over 4000 simulated reruns: a per-round trace effect (σ 0.25, shared by the
    pair) and per-load noise (σ 0.05) with a true ratio of 1.07 — the interval holds it at
    least 95 % of the time (and is far narrower than the unpaired one)."""
    rng = np.random.default_rng(7)
    covered = 0
    widths_paired, widths_unpaired = [], []
    for _ in range(4000):
        stretch = rng.normal(0, 0.25, n)
        base = 800 * np.exp(stretch + rng.normal(0, 0.05, n))
        cur = 800 * 1.07 * np.exp(stretch + rng.normal(0, 0.05, n))
        _, low, high = rg.paired_hodges_lehmann_ratio_ci(cur, base)
        assert low is not None and high is not None
        covered += low <= 1.07 <= high
        widths_paired.append(high / low)
    for _ in range(200):
        stretch = rng.normal(0, 0.25, n)
        _, low, high = rg.hodges_lehmann_ratio_ci(800 * np.exp(stretch + rng.normal(0, 0.05, n)),
                                                  800 * np.exp(stretch + rng.normal(0, 0.05, n)))
        widths_unpaired.append(high / low)
    assert covered / 4000 >= 0.95
    assert np.median(widths_paired) < np.median(widths_unpaired)


def test_paired_when_rounds_match_unpaired_otherwise() -> None:
    rng = np.random.default_rng(3)
    stretch = np.exp(rng.normal(0, 0.2, 6))
    base = _paired(700 * stretch)
    slowed = _paired(700 * 1.10 * stretch * np.exp(rng.normal(0, 0.01, 6)))
    c = rg.compare({base.key: slowed}, {base.key: base})[0]
    assert (c.method, c.verdict) == ("paired", "regression") and c.ci_low > 1.05
    # The same PLTs without their trace times (an old baseline): unpaired, and the trace's
    # spread hides the 10 %.
    old = rg.Sample(base.label, base.scenario_id, base.scheme, base.plt_ms, 0)
    c = rg.compare({base.key: slowed}, {base.key: old})[0]
    assert c.method == "unpaired" and c.verdict == "ok" and "no trace times" in c.note
    # Trace times that differ (another repetition count) do not pair either.
    other = _paired(700 * stretch, trace_step=2500)
    assert rg.compare({base.key: slowed}, {base.key: other})[0].method == "unpaired"
    # One failed load leaves 5 pairs: unpaired over all loads, said so.
    short = _paired(list(slowed.plt_ms[:5]))
    c = rg.compare({base.key: short}, {base.key: base})[0]
    assert c.method == "unpaired" and "5 pair(s)" in c.note


def test_loads_the_emulator_fell_behind_in_are_counted_not_used() -> None:
    def row(rep: int, plt: float, timing_ok: bool | None, reruns: int = 0) -> LoadRow:
        return LoadRow("s", "main", "id1", "lbl", "claw", rep, True, plt, 1, "h2", None, None, rep, None, None, 0.0,
                       trace_ms=rep * 100, timing_ok=timing_ok, late_reruns=reruns)
    s = rg.samples_from_loads([row(0, 500, True), row(1, 900, False, 2), row(2, 510, None, 1)])["lbl|claw"]
    assert s.plt_ms == (500.0, 510.0) and s.repetitions == (0, 2) and s.trace_ms == (0, 200)
    assert (s.n_late, s.late_reruns, s.n_failed) == (1, 3, 0)
    c = rg.compare({s.key: s}, {s.key: s})[0]
    assert c.n_late_current == 1 and "fell behind" in c.note
    # Asked for (suite report --with-late), they are used, and still counted.
    s = rg.samples_from_loads([row(0, 500, True), row(1, 900, False, 2)], with_late=True)["lbl|claw"]
    assert s.plt_ms == (500.0, 900.0) and s.n_late == 1


def test_baseline_format_2_keeps_the_pairing_and_format_1_still_reads(tmp_path: Path) -> None:
    s = _paired([600, 610, 620, 630, 640, 650])
    path = tmp_path / "b.json"
    rg.write_baseline(path, "ci", {s.key: s})
    _, back = rg.read_baseline(path)
    assert back[s.key].by_round() == s.by_round()
    doc = json.loads(path.read_text())
    doc["format"] = 1
    for entry in doc["entries"].values():
        del entry["repetitions"], entry["trace_ms"]
    path.write_text(json.dumps(doc))
    _, old = rg.read_baseline(path)
    assert old[s.key].plt_ms == s.plt_ms and old[s.key].by_round() == {}


def test_detection_power_grows_with_the_change_and_stays_low_unchanged() -> None:
    noise = list(np.random.default_rng(5).normal(0, 0.03, 60))
    assert rg.detection_power(noise, 1.0) <= 0.025
    assert rg.detection_power(noise, 1.03) < rg.detection_power(noise, 1.08) < rg.detection_power(noise, 1.15)
    r = rg.detectable_ratio(noise)
    assert r is not None and 1.05 <= r <= 1.2
    assert rg.detection_power(noise, r) >= 0.95


def test_power_table_from_unchanged_reruns() -> None:
    rng = np.random.default_rng(11)
    stretch = 700 * np.exp(rng.normal(0, 0.3, 6))
    sweeps = [{s.key: s} for s in (_paired(stretch * np.exp(rng.normal(0, 0.02, 6))) for _ in range(3))]
    noise = rg.paired_noise(sweeps)
    (key,) = noise
    assert len(noise[key]) == 3 * 6 * 2 and abs(sum(noise[key])) < 1e-9  # 3 pairs of sweeps, both signs
    (row,) = rg.power_table(sweeps, n_pairs=6)
    assert row["pairs_measured"] == 18 and row["noise_rms_log"] < 0.06
    assert 1.05 <= row["detectable_ratio"] <= 1.15 and row["power_at_1.10"] >= 0.5
    assert row["false_alarms_at_1.00"] <= 0.025


def test_the_verdicts_print_as_a_listing(capsys: pytest.CaptureFixture[str]) -> None:
    """regress's verdicts: csv carries every figure raw; the table fits 80 columns."""
    import csv as csv_module
    import io

    from rich.console import Console

    from clawbed.orchestrator import cli

    comparisons = [
        rg.Comparison("busy-cell/set-01/base/s1", "claw", "regression", 1.131, 1.103, 1.163, 812.0, 718.0, 24, 24,
                           method="paired", n_late_current=1),
        rg.Comparison("idle-cell/set-01/base/s1", "cubic", "ok", 0.998, 0.985, 1.010, 503.0, 504.0, 24, 24,
                           note="a long note that the table wraps over lines rather than cutting", method="paired")]
    cli._print_comparisons("PLT regression check", comparisons, 1.05, ("candidate ms", "base ms"), "csv")
    rows = list(csv_module.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["verdict"] for r in rows] == ["regression", "ok"]
    assert float(rows[0]["ci_low"]) == 1.103 and rows[0]["late_current"] == "1" and rows[0]["test"] == "paired"
    console = Console(width=80, file=io.StringIO(), color_system=None)
    original = cli._console
    try:
        cli._console = lambda: console
        cli._print_comparisons("PLT regression check", comparisons, 1.05, ("candidate ms", "base ms"), "table")
    finally:
        cli._console = original
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "regression" in text and "1.131" in text and "cutting" in text  # the note is never left out
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
