"""The paper's numbers (a spec's ``paper:`` list) next to what the testbed measured: one row
per number, with "not run" when the store has no loads for it and "not emulated" when the
testbed does not model what the number is about."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from clawbed.orchestrator.analyze import mean_airtime
from clawbed.orchestrator.regress import Sample
from clawbed.orchestrator.spec import PaperNumber, label_matches

if TYPE_CHECKING:
    from clawbed.orchestrator.store import LoadRow

NOT_RUN = "not run"
NOT_EMULATED = "not emulated"
COLUMNS = ("figure", "scenarios", "metric", "paper", "testbed", "n", "note")


def _plts(samples: dict[str, Sample], match: str, scheme: str) -> dict[str, list[float]]:
    """Successful PLTs (ms) of ``scheme`` per scenario label that ``match`` picks."""
    return {s.label: list(s.plt_ms) for s in samples.values()
            if s.scheme == scheme and s.plt_ms and label_matches(match, s.label)}


def _pooled(per_label: dict[str, list[float]]) -> list[float]:
    return [v for values in per_label.values() for v in values]


def _reduction_pct(mine: list[float], other: list[float], stat: str) -> float:
    """``mine``'s PLT reduction against ``other``'s, %, of their means or their worst loads."""
    f = np.max if stat == "worst" else np.mean
    return float((1 - f(mine) / f(other)) * 100)


def _what(p: PaperNumber) -> str:
    if p.metric == "plt_s":
        return f"mean PLT {p.scheme}"
    if p.metric == "rank":
        return f"rank of {p.scheme} by mean PLT (1 = lowest)"
    worst = "worst-case " if p.metric == "worst_reduction_pct" else ""
    spread = {"pooled": "", "min": ", min over scenarios", "max": ", max over scenarios"}[p.across]
    return f"{worst}PLT reduction {p.scheme} vs {p.versus}{spread}"


def _paper_value(p: PaperNumber) -> str:
    if p.metric == "plt_s":
        return f"{p.value:g} s"
    if p.metric == "rank":
        return f"{p.value:g}"
    return f"{p.value:g} %"


def _measure(p: PaperNumber, samples: dict[str, Sample]) -> tuple[str, str]:
    """(the testbed's figure, n) for a measurable number; (``NOT_RUN``, n) without data."""
    mine = _plts(samples, p.match, p.scheme)
    if p.metric == "plt_s":
        pooled = _pooled(mine)
        return (f"{np.mean(pooled) / 1000:.2f} s" if pooled else NOT_RUN), str(len(pooled))
    if p.metric == "rank":
        means = {s: np.mean(v) for s in {x.scheme for x in samples.values()}
                 if (v := _pooled(_plts(samples, p.match, s)))}
        if p.scheme not in means:
            return NOT_RUN, f"0/{len(means)} schemes"
        order = sorted(means, key=means.__getitem__)
        return f"{order.index(p.scheme) + 1} of {len(order)}", f"{len(order)} schemes"
    assert p.versus is not None  # PaperNumber's validator: comparisons have a versus scheme
    other = _plts(samples, p.versus_match or p.match, p.versus)
    stat = "worst" if p.metric == "worst_reduction_pct" else "mean"
    if p.across == "pooled":
        a, b = _pooled(mine), _pooled(other)
        return (f"{_reduction_pct(a, b, stat):.0f} %" if a and b else NOT_RUN), f"{len(a)}/{len(b)}"
    # min/max over the scenarios that measured both schemes (same label on both sides).
    per = [_reduction_pct(mine[label], other[label], stat) for label in mine if label in other]
    if not per:
        return NOT_RUN, "0 scenarios"
    return f"{(min if p.across == 'min' else max)(per):.0f} %", f"{len(per)} scenarios"


def paper_rows(numbers: list[PaperNumber], samples: dict[str, Sample]) -> list[tuple[str, ...]]:
    """One table row per paper number (:data:`COLUMNS`)."""
    rows: list[tuple[str, ...]] = []
    for p in numbers:
        scenarios = p.match if p.versus_match is None else f"{p.match} vs {p.versus_match}"
        if p.not_emulated is not None:
            measured, n, note = NOT_EMULATED, "–", f"{p.not_emulated}; {p.note}"
        elif p.missing is not None:
            measured, n, note = NOT_RUN, "–", f"missing: {p.missing}; {p.note}"
        else:
            (measured, n), note = _measure(p, samples), p.note
        rows.append((p.figure, scenarios, _what(p), _paper_value(p), measured, n, note))
    return rows


def _split_text(scheme: str, split: dict[str, float] | None, *, full: bool) -> str:
    if split is None:
        return f"{scheme}: no series"
    plt = split["plt_ms"] or float("nan")
    held = f"held back {split['window_ms'] / plt:.0%}"
    if not full:
        return f"{scheme} {held}"
    return (f"{scheme} ({split['plt_ms'] / 1000:.2f} s): queued at the BS {split['queued_ms'] / plt:.0%}, {held}, "
            f"nothing to send {split['app_ms'] / plt:.0%}")


def _matcher(pattern: str) -> Callable[[str], bool]:
    return lambda label: label_matches(pattern, label)


def airtime_notes(numbers: list[PaperNumber], loads: Iterable[LoadRow]) -> list[str]:
    """Per paper number, where its loads' time went by the ground truth (``clawbed analyze
    airtime``): for a comparison, the ``versus`` scheme's split (its held-back share is the most
    a faster sender could take off) and the compared scheme's held-back share; else the
    scheme's split. Empty for numbers not measured."""
    rows = list(loads)
    notes = []
    for p in numbers:
        if p.not_emulated is not None or p.missing is not None:
            notes.append("")
            continue
        mine = mean_airtime(rows, p.scheme, _matcher(p.match))
        if p.versus is None:
            notes.append(_split_text(p.scheme, mine, full=True) if mine else "")
            continue
        other = mean_airtime(rows, p.versus, _matcher(p.versus_match or p.match))
        notes.append(f"{_split_text(p.versus, other, full=True)}; {_split_text(p.scheme, mine, full=False)}"
                     if mine and other else "")
    return notes
