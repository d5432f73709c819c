"""PLT regression check: each (scenario, scheme) PLT distribution of a run against a baseline.

The test, per (scenario label, scheme):

* statistic: the ratio of medians, current / baseline, of the successful loads' PLTs;
* uncertainty: a percentile bootstrap — both samples resampled with replacement
  :data:`RESAMPLES` times (independently), the ratio of the resampled medians each time, the
  2.5th and 97.5th percentiles of those ratios as the 95 % confidence interval; the random
  generator is seeded with :data:`BOOTSTRAP_SEED`, so a verdict is reproducible;
* verdict: **regression** when the interval's lower bound > ``threshold`` (default 1.10: the
  current median is, with 95 % confidence, more than 10 % above the baseline's);
  **improved** when its upper bound < 1 / ``threshold``; **ok** otherwise. With few loads
  the interval is wide and only a large, consistent slow-down is flagged — by design, a CI
  job must not fail on noise.
* also failing: **missing** (no successful load now, or not in the baseline) and
  **new failures** (a larger fraction of failed loads than in the baseline).

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

RESAMPLES = 10_000
BOOTSTRAP_SEED = 20170619
DEFAULT_THRESHOLD = 1.10
CONFIDENCE = 0.95
BASELINE_FORMAT = 1
FAILING = ("regression", "missing", "new-failures")


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


def bootstrap_median_ratio_ci(current: Iterable[float], baseline: Iterable[float], *, resamples: int = RESAMPLES,
                              seed: int = BOOTSTRAP_SEED, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(ratio of medians, CI low, CI high): the percentile bootstrap of median(current) / median(baseline)."""
    cur, base = np.asarray(list(current), float), np.asarray(list(baseline), float)
    if len(cur) == 0 or len(base) == 0:
        raise ValueError("both samples need at least one value")
    if np.any(base <= 0):
        raise ValueError("baseline PLTs must be positive")
    rng = np.random.default_rng(seed)
    cur_medians = np.median(rng.choice(cur, size=(resamples, len(cur)), replace=True), axis=1)
    base_medians = np.median(rng.choice(base, size=(resamples, len(base)), replace=True), axis=1)
    ratios = cur_medians / base_medians
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail])
    return float(np.median(cur) / np.median(base)), float(low), float(high)


@dataclass(frozen=True)
class Comparison:
    """The verdict on one (scenario label, scheme)."""

    label: str
    scheme: str
    verdict: str  # ok | improved | regression | missing | new-failures
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


def compare(current: dict[str, Sample], baseline: dict[str, Sample], *, threshold: float = DEFAULT_THRESHOLD,
            resamples: int = RESAMPLES, seed: int = BOOTSTRAP_SEED) -> list[Comparison]:
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
        ratio, low, high = bootstrap_median_ratio_ci(cur.plt_ms, base.plt_ms, resamples=resamples, seed=seed)
        fail_now = cur.n_failed / (cur.n_failed + n_cur)
        fail_before = base.n_failed / (base.n_failed + n_base)
        if low > threshold:
            verdict = "regression"
        elif fail_now > fail_before:
            verdict = "new-failures"
            note = "; ".join(x for x in (f"{cur.n_failed} failed load(s), baseline {base.n_failed}", note) if x)
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
        "test": {"statistic": "median(current) / median(baseline)", "method": "percentile bootstrap",
                 "resamples": RESAMPLES, "seed": BOOTSTRAP_SEED, "confidence": CONFIDENCE,
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
    text = (f"median {c.current_median_ms:,.0f} ms vs {c.baseline_median_ms:,.0f} ms, ratio {c.ratio:.3f} "
            f"[95% CI {c.ci_low:.3f}, {c.ci_high:.3f}], n={c.n_current}/{c.n_baseline}")
    return f"{text}; {c.note}" if c.note else text
