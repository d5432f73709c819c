"""The client offline: replay a recorded diag feed (``diag-ue<N>.jsonl``) through the same
:class:`~.core.ClientCore` the daemon runs, and score estimates against the emulator's
ground truth (``truth.cbcol``).

Scoring. A row of the client (its window ending at subframe t, length T) is compared with
the truth over exactly the subframes the client's window covered: from max(t − T + 1,
the first subframe of the connection) to t. The client's diag time is mapped to the
truth's ``t_ms`` through the feed's ``timestamp`` (Unix time of the subframe =
``origin_unix_ns`` of the truth header + t_ms), so SFN offsets and wraps do not matter.

- true load: mean of ``total_alloc_rbs / n_rb`` (A_k / N_rb) over the window — what L
  estimates;
- true available RBs: Σ (N_rb − other users' RBs), the UE's own plus the idle RBs — what
  N_f estimates;
- true available capacity: Σ TBS(channel MCS_k, N_rb − other users' RBs_k, layers_k) / 8
  bytes — the bytes the UE could have received in the window had it claimed every RB the
  other users left; what W_claw estimates;
- own RBs: Σ S_k — what N_s reports (a check that client and truth are aligned).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from clawbed import lte
from clawbed.claw.client.core import ClientConfig, ClientCore, Row
from clawbed.claw.feedback import Echo


def replay(messages: Iterable[dict[str, Any]], config: ClientConfig, *, window_ms: int | None = None) -> list[Row]:
    """Every closed subframe's row of a client fed ``messages``; ``window_ms`` fixes T
    (as if the server had echoed that RTT before the first message)."""
    core = ClientCore(config)
    if window_ms is not None:
        core.on_echo(Echo(config.ue_id, 0, window_ms * 1000, 0, False))
    rows: list[Row] = []
    for message in messages:
        rows += core.on_message(message).rows
    rows += core.finish().rows
    return rows


def replay_file(path: Path | str, config: ClientConfig, *, window_ms: int | None = None) -> list[Row]:
    """:func:`replay` over a ``diag-ue<N>.jsonl`` file."""
    from clawbed.emulator.diag import read_diag_file
    return replay(read_diag_file(path), config, window_ms=window_ms)


def rows_to_columns(rows: list[Row]) -> dict[str, np.ndarray]:
    """The rows' fields the scorer needs, as arrays (the estimates log has the same names)."""
    def col(f: Any, dtype: Any = np.float64) -> np.ndarray:
        return np.array([f(r) for r in rows], dtype=dtype)

    def est(name: str) -> np.ndarray:
        return col(lambda r: getattr(r.estimate, name) if r.estimate is not None and r.estimate.mean_mcs is not None
                   else np.nan)

    return {
        "t_ms": col(lambda r: r.t_ms),
        "unix_s": col(lambda r: np.nan if r.unix_s is None else r.unix_s),
        "active": col(lambda r: float(r.active)),
        "window_ms": est("window_ms"), "load": est("load"), "n_s_rbs": est("n_s_rbs"),
        "n_f_rbs": est("n_f_rbs"), "w_claw_bytes": est("w_claw_bytes"), "samples": est("samples"),
    }


@dataclass(frozen=True)
class Score:
    """How the client's estimates compare with the truth (over ``rows`` scored rows)."""

    rows: int
    #: Mean absolute error of L (fraction of the cell's RBs).
    load_mae: float
    #: Mean of the true load over the scored windows.
    true_load_mean: float
    #: MAE of N_f against the true available RBs, as a fraction of N_t.
    n_f_mae_fraction: float
    #: MAE of W_claw against the true available capacity, bytes.
    w_claw_mae_bytes: float
    #: Mean true available capacity, bytes per window.
    true_capacity_mean_bytes: float
    #: MAE of W_claw relative to the mean true capacity.
    w_claw_mae_relative: float
    #: Mean signed error of W_claw (estimate − truth), bytes.
    w_claw_bias_bytes: float
    #: Fraction of rows whose N_s equals the truth's own RBs exactly (alignment check).
    n_s_exact_fraction: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def truth_windows(truth: Any, ue: int, t_truth: np.ndarray, start_truth: np.ndarray) -> dict[str, np.ndarray]:
    """Per scored row, truth sums over truth subframes ``start_truth .. t_truth`` (inclusive)."""
    t = np.asarray(truth["t_ms"], dtype=np.int64)
    n_rb = np.asarray(truth["n_rb"], dtype=np.float64)
    other = np.asarray(truth["other_alloc_rbs"], dtype=np.float64)
    avail = n_rb - other
    mcs = np.asarray(truth.ue(ue, "mcs"), dtype=np.float64)
    layers = np.asarray(truth.ue(ue, "layers"), dtype=np.float64)
    own = np.asarray(truth.ue(ue, "alloc_rbs"), dtype=np.float64)
    load = np.asarray(truth["total_alloc_rbs"], dtype=np.float64) / n_rb
    cell_rbs = int(np.nanmax(n_rb))
    has_mcs = ~np.isnan(mcs)
    bits = np.zeros(len(t), dtype=np.float64)
    bits[has_mcs] = lte.capacity_bits(mcs[has_mcs].astype(int), avail[has_mcs].astype(int), cell_rbs,
                                      np.where(layers[has_mcs] == 2, 2, 1))

    def window_sum(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sums of ``values`` over each estimate's window, and the subframes in it."""
        c = np.concatenate([[0.0], np.cumsum(values)])
        hi = np.searchsorted(t, t_truth, side="right")
        lo = np.searchsorted(t, start_truth, side="left")
        return c[hi] - c[lo], hi - lo

    load_sum, count = window_sum(load)
    return {
        "count": count,
        "load": load_sum / np.maximum(count, 1),
        "avail_rbs": window_sum(avail)[0],
        "capacity_bytes": window_sum(bits)[0] / 8.0,
        "own_rbs": window_sum(own)[0],
        "n_rb": np.full(len(t_truth), cell_rbs),
    }


def score(cols: dict[str, np.ndarray], truth: Any, *, ue: int = 0, skip_ms: int = 0) -> Score:
    """Score client rows (columns as :func:`rows_to_columns` or the estimates log give)
    against ``truth`` (a :class:`clawbed.emulator.truth.Truth`). Rows are scored while the
    analyzer is active and has an estimate; ``skip_ms`` leaves out each connection's first
    milliseconds."""
    origin_s = float(truth.header["origin_unix_ns"]) / 1e9
    active = cols["active"] == 1
    ok = active & ~np.isnan(cols["load"]) & ~np.isnan(cols["unix_s"]) & ~np.isnan(cols["window_ms"])
    t_truth = np.rint((cols["unix_s"] - origin_s) * 1000.0)
    # Each connection starts at the first active row after an inactive one.
    starts = np.where(active & ~np.concatenate([[False], active[:-1]]), t_truth, np.nan)
    conn_start = _ffill(starts)
    window = cols["window_ms"]
    since_start = t_truth - conn_start
    ok &= ~np.isnan(conn_start) & (since_start >= skip_ms)
    if not ok.any():
        raise ValueError("no client rows to score (was the analyzer ever active?)")
    tt = t_truth[ok].astype(np.int64)
    start = np.maximum(tt - window[ok].astype(np.int64) + 1, conn_start[ok].astype(np.int64))
    w = truth_windows(truth, ue, tt, start)
    n_t = w["n_rb"] * window[ok]
    load_err = np.abs(cols["load"][ok] - w["load"])
    capacity = w["capacity_bytes"]
    w_err = cols["w_claw_bytes"][ok] - capacity
    return Score(
        rows=int(ok.sum()),
        load_mae=float(load_err.mean()),
        true_load_mean=float(w["load"].mean()),
        n_f_mae_fraction=float((np.abs(cols["n_f_rbs"][ok] - w["avail_rbs"]) / n_t).mean()),
        w_claw_mae_bytes=float(np.abs(w_err).mean()),
        true_capacity_mean_bytes=float(capacity.mean()),
        w_claw_mae_relative=float(np.abs(w_err).mean() / max(capacity.mean(), 1.0)),
        w_claw_bias_bytes=float(w_err.mean()),
        n_s_exact_fraction=float((cols["n_s_rbs"][ok] == w["own_rbs"]).mean()),
    )


def _ffill(values: np.ndarray) -> np.ndarray:
    """Forward-fill NaNs with the last non-NaN value (leading NaNs stay)."""
    idx = np.where(~np.isnan(values), np.arange(len(values)), -1)
    np.maximum.accumulate(idx, out=idx)
    out = np.full(len(values), np.nan)
    has = idx >= 0
    out[has] = values[idx[has]]
    return out
