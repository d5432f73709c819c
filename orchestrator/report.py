"""The paper's numbers (a spec's ``paper:`` list) next to what the testbed measured."""

from __future__ import annotations

import numpy as np

from clawbed.orchestrator.regress import Sample
from clawbed.orchestrator.spec import PaperNumber


def _matching(samples: dict[str, Sample], match: str, scheme: str) -> list[float]:
    """Every successful PLT (ms) of ``scheme`` in the scenarios whose label contains ``match``."""
    return [v for s in samples.values() if s.scheme == scheme and match in s.label for v in s.plt_ms]


def paper_rows(numbers: list[PaperNumber], samples: dict[str, Sample]) -> list[tuple[str, ...]]:
    """One table row per paper number: figure, scenarios, metric, paper, testbed, n, note."""
    rows = []
    for p in numbers:
        mine = _matching(samples, p.match, p.scheme)
        if p.metric == "plt_s":
            measured = f"{np.mean(mine) / 1000:.2f} s" if mine else "–"
            paper, n = f"{p.value:g} s", str(len(mine))
            what = f"mean PLT {p.scheme}"
        else:
            other = _matching(samples, p.match, p.versus or "")
            measured = (f"{(1 - np.mean(mine) / np.mean(other)) * 100:.0f} %" if mine and other else "–")
            paper, n = f"{p.value:g} %", f"{len(mine)}/{len(other)}"
            what = f"PLT reduction {p.scheme} vs {p.versus}"
        rows.append((p.figure, p.match, what, paper, measured, n, p.note))
    return rows
