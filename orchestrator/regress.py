"""PLT regression check: each (scenario, scheme) PLT distribution of a run against a baseline.

The test, per (scenario label, scheme), on the successful loads' PLTs (loads during which the
emulator fell behind — ``timing_ok`` False — are left out and counted):

* **paired** (the default whenever it can be): a suite's rounds are aligned to the trace, so
  repetition r of a rerun meets the same trace stretch (``trace_ms``) as repetition r of the
  baseline. The pairs' log ratios d_r = log(current_r / baseline_r) take the trace's variation
  out; the statistic is the **Hodges–Lehmann estimate of the paired ratio** — exp of the median
  of the Walsh averages (d_i + d_j) / 2, i ≤ j — and its **exact distribution-free interval**
  goes with the Wilcoxon signed-rank test: the k-th smallest and k-th largest Walsh averages,
  k the largest count for which the chance, with nothing changed (each d_r as likely positive
  as negative), that the signed-rank statistic is k − 1 or less is at most 2.5 %
  (:func:`signed_rank_null_counts`, counted exactly). At least 95 % coverage for any
  distribution symmetric under no change, at any n; :data:`MIN_PAIRS` pairs (6: 1/64 per
  tail) is the least for which an interval exists.
* **unpaired** (fallback: fewer than :data:`MIN_PAIRS` pairs with the same repetition and
  trace time — a baseline without them, or failed loads): the **Hodges–Lehmann ratio** — the
  median, over every (current load, baseline load) pair, of current PLT / baseline PLT — with
  the exact interval of the Mann–Whitney U test: the k-th smallest and k-th largest of the n·m
  pair ratios, k from the U statistic's exact null distribution. At least 95 % coverage at any
  sample size and for any PLT distribution, so long as loads are independent; ties make it
  slightly conservative.
* verdict: **regression** when the interval lies above 1 (the slowdown is significant: a
  false alarm at most 2.5 % of the time per check) *and* the estimate is at least
  ``threshold`` (default 1.05: a significant change smaller than that is not reported);
  **improved** when the interval lies below 1 and the estimate is at most 1 / ``threshold``;
  **ok** otherwise. A regression needs evidence that PLT grew, not that it grew by more than
  the threshold: requiring the interval's low end above the threshold would catch a change
  of exactly the threshold only half the time.
* also failing: **missing** (no successful load now, or not in the baseline), **new
  failures** (a larger fraction of failed loads than in the baseline) and **too few loads**
  (no 95 % interval exists for so few: 3 loads against 3 can never show a change at 95 %,
  since one ordering in 20 happens by chance — a check that cannot fail is not a check).
  :data:`MIN_LOADS` loads a side is the least the unpaired test can work with, :data:`MIN_PAIRS`
  the paired one; the CI suite runs 6.

How small a change the check catches depends on the loads' noise: :func:`detection_power`
and :func:`detectable_ratio` give the chance of a "regression" verdict, and the smallest ratio
caught with a given probability, from measured paired log ratios of unchanged reruns
(``orchestrator/suites/ci-power.json`` holds the CI suite's, measured with injected slowdowns).

Why not a bootstrap of the ratio of medians: with a few loads a side its interval is far too
narrow (it resamples only the few values seen), so an unchanged run whose loads happen to fall
high is flagged — and a CI job must not fail on noise.

Scenarios are matched by label (``trace/page/condition/s<seed>``), so a baseline still
applies after a condition's value changes (the table notes the id change).
"""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.errors import InputError
from clawbed.files import atomic_write
from clawbed.orchestrator.store import LoadRow

DEFAULT_THRESHOLD = 1.05
CONFIDENCE = 0.95
#: The fewest loads a side for which a 95 % interval exists when both sides have as many
#: (4 against 4: all 70 orderings equally likely unchanged, the most extreme 1/70 < 2.5 %).
MIN_LOADS = 4
#: The fewest pairs for which the paired 95 % interval exists (6: all 64 sign patterns equally
#: likely unchanged, the most extreme 1/64 < 2.5 %; 5 pairs give 1/32).
MIN_PAIRS = 6
BASELINE_FORMAT = 2
#: Baseline formats this version reads (1: PLTs only, compared unpaired).
BASELINE_FORMATS = (1, 2)
FAILING = ("regression", "missing", "new-failures", "too-few-loads")


@dataclass(frozen=True)
class Sample:
    """One (scenario, scheme)'s loads: successful PLTs (ms) in repetition order, the count of
    failed loads; per PLT its repetition and trace time (empty: not known, no pairing); loads
    left out because the emulator fell behind during them, and loads run again for that."""

    label: str
    scenario_id: str
    scheme: str
    plt_ms: tuple[float, ...]
    n_failed: int
    repetitions: tuple[int, ...] = ()
    trace_ms: tuple[int | None, ...] = ()
    n_late: int = 0
    late_reruns: int = 0

    @property
    def key(self) -> str:
        return f"{self.label}|{self.scheme}"

    def by_round(self) -> dict[tuple[int, int], float]:
        """(repetition, trace_ms) → PLT, for the loads that can be paired (trace time known)."""
        if len(self.repetitions) != len(self.plt_ms) or len(self.trace_ms) != len(self.plt_ms):
            return {}
        return {(r, t): p for r, t, p in zip(self.repetitions, self.trace_ms, self.plt_ms) if t is not None}

    def summary(self) -> dict[str, Any]:
        a = np.asarray(self.plt_ms, dtype=float)
        stats = ({"median_ms": float(np.median(a)), "mean_ms": float(a.mean()), "std_ms": float(a.std(ddof=0)),
                  "min_ms": float(a.min()), "max_ms": float(a.max())} if len(a) else {})
        return {"n_ok": len(a), "n_failed": self.n_failed, "n_late": self.n_late, "late_reruns": self.late_reruns,
                **stats}


def samples_from_loads(rows: Iterable[LoadRow], with_late: bool = False) -> dict[str, Sample]:
    """Group loads by (label, scheme); a load the emulator fell behind in is counted, not used
    (``with_late``: used too, and still counted in ``n_late``)."""
    groups: dict[tuple[str, str], list[LoadRow]] = {}
    for r in rows:
        groups.setdefault((r.label, r.scheme), []).append(r)
    out = {}
    for (label, scheme), rs in sorted(groups.items()):
        used = [r for r in sorted(rs, key=lambda r: r.repetition)
                if r.ok and r.plt_ms is not None and (with_late or r.timing_ok is not False)]
        s = Sample(label, rs[0].scenario_id, scheme, tuple(float(r.plt_ms) for r in used if r.plt_ms is not None),
                   sum(1 for r in rs if not r.ok or r.plt_ms is None),
                   repetitions=tuple(r.repetition for r in used), trace_ms=tuple(r.trace_ms for r in used),
                   n_late=sum(1 for r in rs if r.ok and r.plt_ms is not None and r.timing_ok is False),
                   late_reruns=sum(r.late_reruns for r in rs))
        out[s.key] = s
    return out


def mann_whitney_null_counts(n: int, m: int) -> np.ndarray:
    """How many of the C(n+m, n) equally likely orderings of n and m loads (nothing changed, no
    ties) give each value u = 0 … n·m of the U statistic (pairs in which the first sample's
    load is the larger), as floats (exact up to 2**53).

    Counted with the recurrence on the largest of all loads: it is either one of the n (it
    beats all m of the others: u shifts by m) or one of the m (u unchanged)."""
    if n < 0 or m < 0:
        raise ValueError("sample sizes must be >= 0")
    # row[j] holds the counts for (i, j) as i grows; every list entry has length i*j + 1.
    row = [np.ones(1) for _ in range(m + 1)]  # i = 0: one ordering, u = 0
    for i in range(1, n + 1):
        new = [np.ones(1)]  # j = 0: one ordering, u = 0
        for j in range(1, m + 1):
            counts = np.zeros(i * j + 1)
            counts[j:j + len(row[j])] += row[j]  # largest load from the first sample
            counts[:len(new[j - 1])] += new[j - 1]  # largest load from the second
            new.append(counts)
        row = new
    return row[m]


def _rank_from_counts(counts: np.ndarray, confidence: float) -> int:
    """The largest k with P(statistic ≤ k − 1) ≤ (1 − confidence) / 2 under the null counts."""
    cdf = np.cumsum(counts) / counts.sum()
    return int(np.searchsorted(cdf, (1 - confidence) / 2 * (1 + 1e-12), side="right"))


def interval_rank(n: int, m: int, confidence: float = CONFIDENCE) -> int:
    """k: the interval runs from the k-th smallest to the k-th largest of the n·m pair ratios —
    the largest k with P(U ≤ k − 1) ≤ (1 − confidence) / 2 under no change; 0 when even the
    most extreme ordering is likelier than that (no interval exists)."""
    if n == 0 or m == 0:
        return 0
    return _rank_from_counts(mann_whitney_null_counts(n, m), confidence)


def hodges_lehmann_ratio_ci(current: Iterable[float], baseline: Iterable[float], *,
                            confidence: float = CONFIDENCE) -> tuple[float, float | None, float | None]:
    """(ratio, CI low, CI high) of current over baseline PLTs: the median of all pair ratios and
    the exact distribution-free interval around it (``None`` ends when no interval exists for
    so few loads)."""
    cur, base = np.asarray(list(current), float), np.asarray(list(baseline), float)
    if len(cur) == 0 or len(base) == 0:
        raise ValueError("both samples need at least one value")
    if np.any(cur <= 0) or np.any(base <= 0):
        raise ValueError("PLTs must be positive")
    ratios = np.sort(np.divide.outer(cur, base).ravel())
    # The median pair ratio, through logs, so that swapping the samples inverts it exactly.
    ratio = float(np.exp(np.median(np.log(ratios))))
    k = interval_rank(len(cur), len(base), confidence)
    if k == 0:
        return ratio, None, None
    return ratio, float(ratios[k - 1]), float(ratios[len(ratios) - k])


def signed_rank_null_counts(n: int) -> np.ndarray:
    """How many of the 2**n equally likely sign patterns of n paired differences (nothing
    changed: each as likely positive as negative, no ties, no zeros) give each value
    t = 0 … n(n+1)/2 of the signed-rank statistic T+ (the sum of the ranks of |d| of the
    positive differences), as floats (exact up to 2**53): the subsets of {1, …, n} by sum."""
    if n < 0:
        raise ValueError("the number of pairs must be >= 0")
    counts = np.zeros(n * (n + 1) // 2 + 1)
    counts[0] = 1
    for rank in range(1, n + 1):
        top = rank * (rank + 1) // 2
        # Rank ``rank`` positive (sum shifts by it) or not; newest first so each is used once.
        counts[rank:top + 1] += counts[:top + 1 - rank].copy()
    return counts


def signed_rank_interval_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """k: the paired interval runs from the k-th smallest to the k-th largest of the
    n(n+1)/2 Walsh averages — the largest k with P(T+ ≤ k − 1) ≤ (1 − confidence) / 2 under no
    change; 0 when no interval exists for so few pairs."""
    if n == 0:
        return 0
    return _rank_from_counts(signed_rank_null_counts(n), confidence)


def paired_hodges_lehmann_ratio_ci(current: Iterable[float], baseline: Iterable[float], *,
                                   confidence: float = CONFIDENCE) -> tuple[float, float | None, float | None]:
    """(ratio, CI low, CI high) of paired PLTs (``current[i]`` against ``baseline[i]``): exp of the
    Hodges–Lehmann estimate of the log ratios (the median of their Walsh averages) and the
    exact signed-rank interval (``None`` ends when no interval exists for so few pairs)."""
    cur, base = np.asarray(list(current), float), np.asarray(list(baseline), float)
    if len(cur) != len(base) or len(cur) == 0:
        raise ValueError("paired samples need the same number (at least one) of values")
    if np.any(cur <= 0) or np.any(base <= 0):
        raise ValueError("PLTs must be positive")
    d = np.log(cur / base)
    i, j = np.triu_indices(len(d))
    walsh = np.sort((d[i] + d[j]) / 2)
    ratio = float(np.exp(np.median(walsh)))
    k = signed_rank_interval_rank(len(d), confidence)
    if k == 0:
        return ratio, None, None
    return ratio, float(np.exp(walsh[k - 1])), float(np.exp(walsh[len(walsh) - k]))


def pair_up(current: Sample, baseline: Sample) -> tuple[list[float], list[float]]:
    """The PLTs of the loads of both samples that met the same trace stretch: same repetition
    and same (known) trace time; (current, baseline) in repetition order."""
    cur, base = current.by_round(), baseline.by_round()
    common = sorted(set(cur) & set(base))
    return [cur[k] for k in common], [base[k] for k in common]


def ratio_ci(current: Sample, baseline: Sample, *,
             confidence: float = CONFIDENCE) -> tuple[str, float, float | None, float | None, str]:
    """(method, ratio, CI low, CI high, note): paired when at least :data:`MIN_PAIRS` loads pair
    up, otherwise unpaired over all loads."""
    cur_p, base_p = pair_up(current, baseline)
    if len(cur_p) >= MIN_PAIRS:
        ratio, low, high = paired_hodges_lehmann_ratio_ci(cur_p, base_p, confidence=confidence)
        left = len(current.plt_ms) + len(baseline.plt_ms) - 2 * len(cur_p)
        return "paired", ratio, low, high, f"{left} unpaired load(s) left out" if left else ""
    ratio, low, high = hodges_lehmann_ratio_ci(current.plt_ms, baseline.plt_ms, confidence=confidence)
    why = (f"unpaired: {len(cur_p)} pair(s) of the same trace stretch, fewer than {MIN_PAIRS}"
           if current.by_round() and baseline.by_round() else "unpaired: no trace times to pair by")
    return "unpaired", ratio, low, high, why


@dataclass(frozen=True)
class Comparison:
    """The verdict on one (scenario label, scheme)."""

    label: str
    scheme: str
    verdict: str  # ok | improved | regression | missing | new-failures | too-few-loads
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    current_median_ms: float | None
    baseline_median_ms: float | None
    n_current: int
    n_baseline: int
    note: str = ""
    #: paired | unpaired (None: no test ran).
    method: str | None = None
    #: Loads left out because the emulator fell behind during them, now and in the baseline.
    n_late_current: int = 0
    n_late_baseline: int = 0

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING


def verdict_of(ratio: float, low: float | None, high: float | None, threshold: float) -> str:
    """regression, improved, ok — or too-few-loads when no interval exists."""
    if low is None or high is None:
        return "too-few-loads"
    if low > 1 and ratio >= threshold:
        return "regression"
    if high < 1 and ratio <= 1 / threshold:
        return "improved"
    return "ok"


def compare(current: dict[str, Sample], baseline: dict[str, Sample], *,
            threshold: float = DEFAULT_THRESHOLD) -> list[Comparison]:
    """A verdict for every (label, scheme) in the baseline or the current results."""
    if threshold < 1:
        raise InputError(f"--threshold {threshold}: must be >= 1 (a PLT ratio)")
    out = []
    for key in sorted(set(current) | set(baseline)):
        cur, base = current.get(key), baseline.get(key)
        either = cur or base
        assert either is not None  # the key came from one of the two
        label, scheme = either.label, either.scheme
        n_cur, n_base = len(cur.plt_ms) if cur else 0, len(base.plt_ms) if base else 0
        late_cur, late_base = (cur.n_late if cur else 0), (base.n_late if base else 0)

        def med(s: Sample | None) -> float | None:
            return float(np.median(s.plt_ms)) if s and s.plt_ms else None

        notes = []
        if cur and base and cur.scenario_id != base.scenario_id:
            notes.append(f"settings changed (id {base.scenario_id} → {cur.scenario_id})")
        if late_cur or late_base:
            notes.append(f"{late_cur} load(s) now, {late_base} in the baseline left out: the emulator fell behind")
        if base is None:
            out.append(Comparison(label, scheme, "missing", None, None, None, med(cur), None, n_cur, 0,
                                  "not in the baseline (--update-baseline to add it)", n_late_current=late_cur, n_late_baseline=late_base))
            continue
        if cur is None or not cur.plt_ms or not base.plt_ms:
            why = "no successful load now" if base.plt_ms else "no successful load in the baseline"
            out.append(Comparison(label, scheme, "missing", None, None, None, med(cur), med(base), n_cur, n_base,
                                  "; ".join([why, *notes]), n_late_current=late_cur, n_late_baseline=late_base))
            continue
        method, ratio, low, high, how = ratio_ci(cur, base)
        if how:
            notes.insert(0, how)
        verdict = verdict_of(ratio, low, high, threshold)
        fail_now = cur.n_failed / (cur.n_failed + n_cur)
        fail_before = base.n_failed / (base.n_failed + n_base)
        if verdict != "regression" and fail_now > fail_before:
            verdict = "new-failures"
            notes.insert(0, f"{cur.n_failed} failed load(s), baseline {base.n_failed}")
        elif verdict == "too-few-loads":
            notes.insert(0, f"no {CONFIDENCE:.0%} interval exists for {n_cur} against {n_base} loads "
                            f"(at least {MIN_PAIRS} pairs or {MIN_LOADS} loads a side)")
        out.append(Comparison(label, scheme, verdict, ratio, low, high, med(cur), med(base), n_cur, n_base,
                              "; ".join(notes), method, n_late_current=late_cur, n_late_baseline=late_base))
    return out


# -- how small a change the check catches ----------------------------------------------------------


def detection_power(noise_log_ratios: Iterable[float], ratio: float, *, n_pairs: int = MIN_PAIRS,
                    threshold: float = DEFAULT_THRESHOLD, trials: int = 4000, seed: int = 1) -> float:
    """The chance that a paired check of ``n_pairs`` pairs says "regression" when PLT is
    ``ratio`` times the baseline's, the pairs' noise drawn (with replacement, each with a
    random sign: the noise of an unchanged rerun is symmetric) from ``noise_log_ratios`` —
    measured log(rerun / baseline) of unchanged reruns' paired loads."""
    noise = np.asarray(list(noise_log_ratios), float)
    if len(noise) == 0:
        raise ValueError("no noise values")
    rng = np.random.default_rng(seed)
    k = signed_rank_interval_rank(n_pairs)
    if k == 0:
        return 0.0
    d = rng.choice(noise, size=(trials, n_pairs)) * rng.choice([-1.0, 1.0], size=(trials, n_pairs)) + np.log(ratio)
    i, j = np.triu_indices(n_pairs)
    walsh = np.sort((d[:, i] + d[:, j]) / 2, axis=1)
    low, est = walsh[:, k - 1], np.median(walsh, axis=1)
    return float(np.mean((low > 0) & (est >= np.log(threshold))))


def detectable_ratio(noise_log_ratios: Iterable[float], *, power: float = 0.95, n_pairs: int = MIN_PAIRS,
                     threshold: float = DEFAULT_THRESHOLD, trials: int = 4000, seed: int = 1,
                     step: float = 0.005, largest: float = 3.0) -> float | None:
    """The smallest PLT ratio (on a grid of ``step``) that the paired check of ``n_pairs`` pairs
    calls a regression with probability ``power`` (:func:`detection_power`); None beyond
    ``largest``."""
    noise = list(noise_log_ratios)
    ratio = 1.0
    while ratio <= largest:
        if detection_power(noise, ratio, n_pairs=n_pairs, threshold=threshold, trials=trials, seed=seed) >= power:
            return round(ratio, 6)
        ratio += step
    return None


def paired_noise(sweeps: list[dict[str, Sample]]) -> dict[str, list[float]]:
    """Per (label, scheme) key: the log ratios of the paired loads (same repetition and trace
    time) between every two of ``sweeps`` — unchanged reruns of one suite — in both orders (the
    noise a paired check meets when nothing changed; symmetric by construction)."""
    out: dict[str, list[float]] = {}
    for i, first in enumerate(sweeps):
        for second in sweeps[i + 1:]:
            for key in sorted(set(first) & set(second)):
                cur, base = pair_up(first[key], second[key])
                logs = [float(np.log(c / b)) for c, b in zip(cur, base)]
                out.setdefault(key, []).extend(logs + [-v for v in logs])
    return out


def power_table(sweeps: list[dict[str, Sample]], *, n_pairs: int, threshold: float = DEFAULT_THRESHOLD,
                power: float = 0.95) -> list[dict[str, Any]]:
    """Per (label, scheme): the measured noise (RMS of the paired log ratios), the smallest ratio
    the paired check of ``n_pairs`` pairs catches with probability ``power``, and its power at
    1.10 and false-alarm rate at 1.00 (:func:`detection_power`)."""
    rows = []
    for key, noise in sorted(paired_noise(sweeps).items()):
        label, scheme = key.rsplit("|", 1)
        rows.append({"label": label, "scheme": scheme, "pairs_measured": len(noise) // 2,
                     "noise_rms_log": round(float(np.sqrt(np.mean(np.square(noise)))), 4),
                     "detectable_ratio": detectable_ratio(noise, power=power, n_pairs=n_pairs, threshold=threshold),
                     "power_at_1.10": round(detection_power(noise, 1.10, n_pairs=n_pairs, threshold=threshold), 3),
                     "false_alarms_at_1.00": round(detection_power(noise, 1.0, n_pairs=n_pairs, threshold=threshold),
                                                   4)})
    return rows


# -- baseline file ------------------------------------------------------------------------------


def write_baseline(path: Path, suite: str, samples: dict[str, Sample], *, threshold: float = DEFAULT_THRESHOLD,
                   machine: dict[str, Any] | None = None) -> None:
    """The baseline JSON: per (label, scheme) the PLT samples (ms) with each load's repetition
    and trace time (the pairing), and their summary; ``machine``: the fingerprint of the machine
    that measured them (``ab.machine_fingerprint``), which a comparison elsewhere warns about."""
    doc = {
        "format": BASELINE_FORMAT, "suite": suite, "created_unix_s": round(time.time(), 3),
        **({"machine": machine} if machine is not None else {}),
        "test": {"statistic": "Hodges-Lehmann ratio: of the paired loads (same repetition and trace time) when at "
                              f"least {MIN_PAIRS} pair up, else of all load pairs",
                 "method": "exact Wilcoxon signed-rank interval (paired), exact Mann-Whitney interval (unpaired)",
                 "confidence": CONFIDENCE, "regression_when": f"CI lower bound > 1 and ratio >= {threshold}"},
        "entries": {k: {"label": s.label, "scenario_id": s.scenario_id, "scheme": s.scheme,
                        "plt_ms": list(s.plt_ms), "repetitions": list(s.repetitions), "trace_ms": list(s.trace_ms),
                        "summary": s.summary()} for k, s in sorted(samples.items())},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def read_baseline(path: Path) -> tuple[str, dict[str, Sample]]:
    """(suite, samples) of a baseline file; :class:`InputError` naming the file and key."""
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise InputError(f"--baseline {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"--baseline {path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") not in BASELINE_FORMATS or not isinstance(doc.get("entries"), dict):
        raise InputError(f"--baseline {path}: not a baseline of format {' or '.join(map(str, BASELINE_FORMATS))} "
                         "(keys format, suite, entries)")
    out = {}
    for key, entry in doc["entries"].items():
        try:
            plts = tuple(float(v) for v in entry["plt_ms"])
            reps = tuple(int(v) for v in entry.get("repetitions", ()))
            trace = tuple(None if v is None else int(v) for v in entry.get("trace_ms", ()))
            if reps and (len(reps) != len(plts) or len(trace) != len(plts)):
                raise ValueError("repetitions/trace_ms: not one per plt_ms")
            summary = entry["summary"]
            out[key] = Sample(entry["label"], entry["scenario_id"], entry["scheme"], plts, int(summary["n_failed"]),
                              repetitions=reps, trace_ms=trace, n_late=int(summary.get("n_late", 0)),
                              late_reruns=int(summary.get("late_reruns", 0)))
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"--baseline {path}: entries.{key}: bad or missing {err}") from None
    return str(doc.get("suite", "")), out


def baseline_machine(path: Path) -> dict[str, Any] | None:
    """The fingerprint of the machine a baseline was measured on; None when it has none
    (written before baselines recorded it). Read after :func:`read_baseline` checked the file."""
    try:
        machine = json.loads(path.read_text()).get("machine")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None
    if machine is not None and not isinstance(machine, dict):
        raise InputError(f"--baseline {path}: machine: not an object of CPU model, count, kernel and preemption")
    return machine


# -- reports ------------------------------------------------------------------------------------


def junit_xml(suite: str, comparisons: list[Comparison], threshold: float,
              other_checks: Iterable[tuple[str, str, bool, str]] = ()) -> bytes:
    """JUnit XML: one ``testcase`` per (scenario, scheme); a ``failure`` for each failing verdict.
    ``other_checks``: more test cases as (class name, name, passed, detail), e.g. the A/B run's
    emulator determinism check."""
    others = list(other_checks)
    tests = len(comparisons) + len(others)
    failures = sum(c.failed for c in comparisons) + sum(not ok for _, _, ok, _ in others)
    root = ET.Element("testsuites", name=f"clawbed regress {suite}", tests=str(tests), failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=f"plt-regression.{suite}", tests=str(tests),
                       failures=str(failures), errors="0", skipped="0")
    for c in comparisons:
        tc = ET.SubElement(ts, "testcase", classname=f"plt.{suite}.{c.label}", name=c.scheme)
        detail = describe(c)
        if c.failed:
            failure = ET.SubElement(tc, "failure", type=c.verdict,
                                    message=f"{c.verdict}: {detail} (regression when CI low > 1 and ratio >= {threshold:g})")
            failure.text = json.dumps(asdict(c), indent=1)
        else:
            ET.SubElement(tc, "system-out").text = detail
    for classname, name, ok, detail in others:
        tc = ET.SubElement(ts, "testcase", classname=classname, name=name)
        if ok:
            ET.SubElement(tc, "system-out").text = detail
        else:
            ET.SubElement(tc, "failure", type="differs", message=detail)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def describe(c: Comparison) -> str:
    if c.ratio is None:
        return c.note or c.verdict
    interval = f"95% CI {c.ci_low:.3f}, {c.ci_high:.3f}" if c.ci_low is not None else "no 95% CI"
    text = (f"median {c.current_median_ms:,.0f} ms vs {c.baseline_median_ms:,.0f} ms, {c.method or ''} ratio "
            f"{c.ratio:.3f} [{interval}], n={c.n_current}/{c.n_baseline}")
    return f"{text}; {c.note}" if c.note else text
