"""PLT regression check: each (scenario, scheme) PLT distribution of a run against a baseline.

The test, per (scenario label, scheme), on the successful loads' PLTs:

* statistic: the **Hodges–Lehmann ratio** — the median, over every (current load, baseline
  load) pair, of current PLT / baseline PLT. It answers "how much slower is a load now than a
  load then", and one odd load moves it little.
* uncertainty: the **exact distribution-free confidence interval** of that ratio that goes
  with the Mann–Whitney U test: with n current and m baseline loads, the k-th smallest and
  k-th largest of the n·m pair ratios, k the largest count for which the chance, with nothing
  changed, that k or fewer pairs favour one side is at most 2.5 % (the U statistic's exact
  null distribution, counted below). It holds at least 95 % coverage at any sample size and
  for any PLT distribution, so long as loads are independent; ties (equal PLTs to the
  microsecond) make it slightly conservative.
* verdict: **regression** when the interval's lower end > ``threshold`` (default 1.10: now is,
  with 95 % confidence, more than 10 % slower than the baseline); **improved** when its upper
  end < 1 / ``threshold``; **ok** otherwise.
* also failing: **missing** (no successful load now, or not in the baseline), **new
  failures** (a larger fraction of failed loads than in the baseline) and **too few loads**
  (no 95 % interval exists for so few: 3 loads against 3 can never show a change at 95 %,
  since one ordering in 20 happens by chance — a check that cannot fail is not a check).
  :data:`MIN_LOADS` loads a side is the least that can; the CI suite runs 5.

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from clawbed.errors import InputError
from clawbed.files import atomic_write
from clawbed.orchestrator.store import LoadRow

DEFAULT_THRESHOLD = 1.10
CONFIDENCE = 0.95
#: The fewest loads a side for which a 95 % interval exists when both sides have as many
#: (4 against 4: all 70 orderings equally likely unchanged, the most extreme 1/70 < 2.5 %).
MIN_LOADS = 4
BASELINE_FORMAT = 1
FAILING = ("regression", "missing", "new-failures", "too-few-loads")


@dataclass(frozen=True)
class Sample:
    """One (scenario, scheme)'s loads: successful PLTs (ms) and the count of failed loads."""

    label: str
    scenario_id: str
    scheme: str
    plt_ms: tuple[float, ...]
    n_failed: int

    @property
    def key(self) -> str:
        return f"{self.label}|{self.scheme}"

    def summary(self) -> dict[str, Any]:
        a = np.asarray(self.plt_ms, dtype=float)
        stats = ({"median_ms": float(np.median(a)), "mean_ms": float(a.mean()), "std_ms": float(a.std(ddof=0)),
                  "min_ms": float(a.min()), "max_ms": float(a.max())} if len(a) else {})
        return {"n_ok": len(a), "n_failed": self.n_failed, **stats}


def samples_from_loads(rows: Iterable[LoadRow]) -> dict[str, Sample]:
    """Group loads by (label, scheme)."""
    groups: dict[tuple[str, str], list[LoadRow]] = {}
    for r in rows:
        groups.setdefault((r.label, r.scheme), []).append(r)
    out = {}
    for (label, scheme), rs in sorted(groups.items()):
        ok = tuple(float(r.plt_ms) for r in sorted(rs, key=lambda r: r.repetition) if r.ok and r.plt_ms is not None)
        s = Sample(label, rs[0].scenario_id, scheme, ok, sum(1 for r in rs if not r.ok or r.plt_ms is None))
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


def interval_rank(n: int, m: int, confidence: float = CONFIDENCE) -> int:
    """k: the interval runs from the k-th smallest to the k-th largest of the n·m pair ratios —
    the largest k with P(U ≤ k − 1) ≤ (1 − confidence) / 2 under no change; 0 when even the
    most extreme ordering is likelier than that (no interval exists)."""
    if n == 0 or m == 0:
        return 0
    counts = mann_whitney_null_counts(n, m)
    cdf = np.cumsum(counts) / counts.sum()
    return int(np.searchsorted(cdf, (1 - confidence) / 2 * (1 + 1e-12), side="right"))


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

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING


def compare(current: dict[str, Sample], baseline: dict[str, Sample], *,
            threshold: float = DEFAULT_THRESHOLD) -> list[Comparison]:
    """A verdict for every (label, scheme) in the baseline or the current results."""
    if threshold <= 1:
        raise InputError(f"--threshold {threshold}: must be > 1 (a ratio of medians)")
    out = []
    for key in sorted(set(current) | set(baseline)):
        cur, base = current.get(key), baseline.get(key)
        label, scheme = (cur or base).label, (cur or base).scheme  # type: ignore[union-attr]
        n_cur, n_base = len(cur.plt_ms) if cur else 0, len(base.plt_ms) if base else 0
        med = (lambda s: float(np.median(s.plt_ms)) if s and s.plt_ms else None)
        note = ""
        if cur and base and cur.scenario_id != base.scenario_id:
            note = f"settings changed (id {base.scenario_id} → {cur.scenario_id})"
        if base is None:
            out.append(Comparison(label, scheme, "missing", None, None, None, med(cur), None, n_cur, 0,
                                  "not in the baseline (--update-baseline to add it)"))
            continue
        if cur is None or not cur.plt_ms or not base.plt_ms:
            why = "no successful load now" if base.plt_ms else "no successful load in the baseline"
            out.append(Comparison(label, scheme, "missing", None, None, None, med(cur), med(base), n_cur, n_base,
                                  "; ".join(x for x in (why, note) if x)))
            continue
        ratio, low, high = hodges_lehmann_ratio_ci(cur.plt_ms, base.plt_ms)
        fail_now = cur.n_failed / (cur.n_failed + n_cur)
        fail_before = base.n_failed / (base.n_failed + n_base)
        if low is not None and low > threshold:
            verdict = "regression"
        elif fail_now > fail_before:
            verdict = "new-failures"
            note = "; ".join(x for x in (f"{cur.n_failed} failed load(s), baseline {base.n_failed}", note) if x)
        elif low is None or high is None:
            verdict = "too-few-loads"
            note = "; ".join(x for x in (f"no {CONFIDENCE:.0%} interval exists for {n_cur} against {n_base} loads "
                                         f"(at least {MIN_LOADS} a side)", note) if x)
        elif high < 1 / threshold:
            verdict = "improved"
        else:
            verdict = "ok"
        out.append(Comparison(label, scheme, verdict, ratio, low, high, med(cur), med(base), n_cur, n_base, note))
    return out


# -- baseline file ------------------------------------------------------------------------------


def write_baseline(path: Path, suite: str, samples: dict[str, Sample], *, threshold: float = DEFAULT_THRESHOLD) -> None:
    """The baseline JSON: per (label, scheme) the PLT samples (ms) and their summary."""
    doc = {
        "format": BASELINE_FORMAT, "suite": suite, "created_unix_s": round(time.time(), 3),
        "test": {"statistic": "Hodges-Lehmann ratio: the median of current/baseline over all load pairs",
                 "method": "exact Mann-Whitney confidence interval", "confidence": CONFIDENCE,
                 "regression_when": f"CI lower bound > {threshold}"},
        "entries": {k: {"label": s.label, "scenario_id": s.scenario_id, "scheme": s.scheme,
                        "plt_ms": list(s.plt_ms), "summary": s.summary()} for k, s in sorted(samples.items())},
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
    if not isinstance(doc, dict) or doc.get("format") != BASELINE_FORMAT or not isinstance(doc.get("entries"), dict):
        raise InputError(f"--baseline {path}: not a baseline of format {BASELINE_FORMAT} (keys format, suite, entries)")
    out = {}
    for key, e in doc["entries"].items():
        try:
            out[key] = Sample(e["label"], e["scenario_id"], e["scheme"], tuple(float(v) for v in e["plt_ms"]),
                              int(e["summary"]["n_failed"]))
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"--baseline {path}: entries.{key}: bad or missing {err}") from None
    return str(doc.get("suite", "")), out


# -- reports ------------------------------------------------------------------------------------


def junit_xml(suite: str, comparisons: list[Comparison], threshold: float) -> bytes:
    """JUnit XML: one ``testcase`` per (scenario, scheme); a ``failure`` for each failing verdict."""
    failures = sum(c.failed for c in comparisons)
    root = ET.Element("testsuites", name=f"clawbed regress {suite}", tests=str(len(comparisons)),
                      failures=str(failures))
    ts = ET.SubElement(root, "testsuite", name=f"plt-regression.{suite}", tests=str(len(comparisons)),
                       failures=str(failures), errors="0", skipped="0")
    for c in comparisons:
        tc = ET.SubElement(ts, "testcase", classname=f"plt.{suite}.{c.label}", name=c.scheme)
        detail = describe(c)
        if c.failed:
            failure = ET.SubElement(tc, "failure", type=c.verdict,
                                    message=f"{c.verdict}: {detail} (regression when CI low > {threshold:g})")
            failure.text = json.dumps(asdict(c), indent=1)
        else:
            ET.SubElement(tc, "system-out").text = detail
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def describe(c: Comparison) -> str:
    if c.ratio is None:
        return c.note or c.verdict
    interval = f"95% CI {c.ci_low:.3f}, {c.ci_high:.3f}" if c.ci_low is not None else "no 95% CI"
    text = (f"median {c.current_median_ms:,.0f} ms vs {c.baseline_median_ms:,.0f} ms, ratio {c.ratio:.3f} "
            f"[{interval}], n={c.n_current}/{c.n_baseline}")
    return f"{text}; {c.note}" if c.note else text
