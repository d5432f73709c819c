"""The channel where the phone was not scheduled, from its own measurements.

A phone's log gives its MCS only in the subframes the cell scheduled it; elsewhere the cell
had nothing for it, not a dead channel. This module fits, per log, the relation between the
phone's serving-cell measurement (0xB193: FTL SNR, else RSRQ, else RSRP) and the MCS it was
given when scheduled, and fills the other subframes with it. The model and why it is this
one: ``traces/CHANNEL_MODEL.md`` §6.

- **Fit blocks**: subframes where the UE received a new-transmission block (MCS 0..28) of
  at least :data:`MIN_FIT_TBS_BITS`. Smaller blocks (an RRC message, a MAC control element,
  a TCP ACK) are sized by their payload and sent at a robust fixed MCS, not the
  link-adapted one: in the shared logs they sit at MCS 0, 2 or 9 whatever the SNR.
- **Measurement of a subframe**: the 0xB193 measurement nearest in time, if within
  :data:`MEAS_NEAR_MS`; otherwise the subframe has none.
- **Model**: the median MCS of the fit blocks per :data:`BIN_DB` bin of the predictor; a
  bin with fewer than :data:`MIN_BIN_BLOCKS` blocks pools its neighbours (nearest first,
  both sides at once) until it has them; outside the fitted range, the edge bin (no extrapolation). Layers: 2
  where at least half of the bin's blocks were two-layer.
- **Per subframe** (``mcs_source``): :data:`MEASURED` the log's MCS (a fit block);
  :data:`INFERRED` the model at the subframe's measurement; :data:`HELD` no measurement
  near (or no fit): the last measured or inferred value held, and the span listed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clawbed.lte import MAX_MCS

#: ``mcs_source`` values (FORMAT.md).
MEASURED, INFERRED, HELD = 0, 1, 2
SOURCE_NAMES = {MEASURED: "measured", INFERRED: "inferred", HELD: "held"}
#: Blocks below this many bits are payload-sized, not link-adapted: not fitted.
MIN_FIT_TBS_BITS = 1000
#: A measurement speaks for subframes up to this far from it, ms: half of LTE's longest
#: default paging cycle (2.56 s, 36.304), within which an idle phone still measures its
#: serving cell at least once (36.133 §4.2.2), so a log that kept measuring covers every
#: subframe.
MEAS_NEAR_MS = 1280
#: Bin width of each predictor, dB (its unit's natural step: SNR and RSRP are coarse and
#: noisy, RSRQ spans only ~15 dB).
BIN_DB = {"snr_db": 2.0, "rsrq_db": 1.0, "rsrp_dbm": 2.0}
#: Predictors in order of preference: SNR is what link adaptation follows; RSRQ mixes in the
#: cell's load, RSRP ignores interference.
PREDICTORS = ("snr_db", "rsrq_db", "rsrp_dbm")
#: A bin's median needs this many blocks (else neighbours are pooled).
MIN_BIN_BLOCKS = 20
#: Fewer fit blocks than this: no fit (too few to say more than one median).
MIN_FIT_BLOCKS = 30
#: Held spans listed in the provenance (the longest).
LISTED_HELD_SPANS = 10


@dataclass
class ChannelFit:
    """A per-log binned-median model: predictor value → (MCS, layers)."""

    predictor: str
    bin_db: float
    lo: float
    mcs: np.ndarray
    two_layer: np.ndarray
    counts: np.ndarray
    blocks: int

    def bin_of(self, x: np.ndarray) -> np.ndarray:
        k = np.floor((np.asarray(x, dtype=np.float64) - self.lo) / self.bin_db).astype(np.int64)
        return np.clip(k, 0, len(self.mcs) - 1)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(MCS, layers) at predictor values ``x``."""
        k = self.bin_of(x)
        return self.mcs[k], np.where(self.two_layer[k], 2, 1)

    def as_json(self) -> dict[str, Any]:
        return {
            "predictor": self.predictor, "bin_db": self.bin_db, "blocks": self.blocks,
            "bins": [[round(self.lo + i * self.bin_db, 2), round(self.lo + (i + 1) * self.bin_db, 2), int(m),
                      int(n), 2 if t else 1] for i, (m, n, t) in enumerate(zip(self.mcs, self.counts, self.two_layer))],
            "bins_columns": ["from", "to", "median_mcs", "own_blocks", "layers"],
        }


def fit(predictor: str, x: np.ndarray, mcs: np.ndarray, two: np.ndarray) -> ChannelFit | None:
    """The model from fit blocks at predictor values ``x`` (finite) with their MCS and
    two-layer flags; None with fewer than :data:`MIN_FIT_BLOCKS`."""
    x = np.asarray(x, dtype=np.float64)
    if len(x) < MIN_FIT_BLOCKS:
        return None
    width = BIN_DB[predictor]
    lo = float(np.floor(x.min() / width) * width)
    n_bins = int(np.floor((x.max() - lo) / width)) + 1
    k = np.clip(np.floor((x - lo) / width).astype(np.int64), 0, n_bins - 1)
    counts = np.bincount(k, minlength=n_bins)
    med = np.zeros(n_bins, dtype=np.int64)
    two_share = np.zeros(n_bins, dtype=bool)
    for b in range(n_bins):
        # Pool neighbours, nearest first (both sides at once), until MIN_BIN_BLOCKS.
        members = [b]
        step = 1
        while counts[members].sum() < MIN_BIN_BLOCKS and (b - step >= 0 or b + step < n_bins):
            members += [j for j in (b - step, b + step) if 0 <= j < n_bins]
            step += 1
        sel = np.isin(k, members)
        med[b] = int(np.clip(np.round(np.median(mcs[sel])), 0, MAX_MCS))
        two_share[b] = bool(np.mean(two[sel]) >= 0.5)
    return ChannelFit(predictor, width, lo, med, two_share, counts, int(len(x)))


def nearest(rows: np.ndarray, meas_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Index into sorted ``meas_rows`` of the measurement nearest each row, and its distance, ms."""
    j = np.clip(np.searchsorted(meas_rows, rows), 1, max(len(meas_rows) - 1, 1))
    if len(meas_rows) == 1:
        j = np.zeros(len(rows), dtype=np.int64)
        return j, np.abs(meas_rows[j] - rows)
    j = np.where(np.abs(meas_rows[j - 1] - rows) <= np.abs(meas_rows[j] - rows), j - 1, j)
    return j, np.abs(meas_rows[j] - rows)


def held_out_error(x: np.ndarray, mcs: np.ndarray, two: np.ndarray, rows: np.ndarray, *, predictor: str,
                   logged: tuple[np.ndarray, np.ndarray] | None = None, folds: int = 5,
                   seed: int = 1) -> dict[str, Any]:
    """Cross-validated error of the model on fit blocks at ``rows`` (predictor values ``x``,
    MCS ``mcs``, two-layer ``two``): the log's seconds with fit blocks are split into
    ``folds`` groups (seeded); each group's blocks are hidden and predicted by a fit on the
    others. Whole seconds are hidden so that a hidden block has no scheduled neighbour left
    (as in a gap). MAE and bias in MCS steps and the share within ±2, beside what other
    rules give the same hidden blocks: ``hold`` (the previous import rule: the MCS of the last
    visible block of any size, ``logged`` = (rows, MCS) of every block with an MCS 0..28),
    ``median`` (a constant: the visible fit blocks' median) and ``second_median`` (a floor no
    per-measurement model reaches: each hidden second's own median)."""
    seconds = rows // 1000
    uniq = np.unique(seconds)
    if len(uniq) < 2:
        return {"blocks": 0, "reason": "fit blocks in fewer than 2 seconds"}
    n_folds = min(folds, len(uniq))
    rng = np.random.default_rng(seed)
    group = dict(zip(uniq.tolist(), rng.permutation(len(uniq)) % n_folds))
    g = np.array([group[s] for s in seconds.tolist()])
    pred = np.full(len(mcs), -1, dtype=np.int64)
    hold = np.full(len(mcs), -1, dtype=np.int64)
    const = np.full(len(mcs), -1, dtype=np.int64)
    for f in range(n_folds):
        hide = g == f
        model = fit(predictor, x[~hide], mcs[~hide], two[~hide])
        if model is None:
            continue
        pred[hide] = model.predict(x[hide])[0]
        const[hide] = int(np.round(np.median(mcs[~hide])))
        if logged is not None:
            lrows, lmcs = logged
            hidden_s = set(uniq[[group[u] == f for u in uniq.tolist()]].tolist())
            vis = ~np.isin(lrows // 1000, list(hidden_s))
            vr, vm = lrows[vis], lmcs[vis]
            if len(vr):
                k = np.searchsorted(vr, rows[hide], side="right") - 1
                hold[hide] = vm[np.maximum(k, 0)]
    ok = pred >= 0
    if not ok.any():
        return {"blocks": 0, "reason": "too few fit blocks to fit on the rest"}
    second_median = np.zeros(len(mcs))
    for sec in np.unique(seconds[ok]):
        at = ok & (seconds == sec)
        second_median[at] = np.median(mcs[at])

    def mae(p: np.ndarray) -> float:
        return round(float(np.mean(np.abs(p[ok] - mcs[ok]))), 3)

    err = pred[ok] - mcs[ok]
    out = {"blocks": int(ok.sum()), "seconds": int(len(np.unique(seconds[ok]))), "folds": n_folds,
           "hidden_share_per_fold": round(1 / n_folds, 3), "mae_mcs": mae(pred),
           "bias_mcs": round(float(np.mean(err)), 3), "within_2_mcs": round(float(np.mean(np.abs(err) <= 2)), 4),
           "median_mae_mcs": mae(const), "second_median_mae_mcs": mae(second_median)}
    if logged is not None and (hold[ok] >= 0).all():
        out["hold_mae_mcs"] = mae(hold)
    return out


def runs_of(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(starts, lengths) of the runs of True in ``mask``."""
    m = np.concatenate(([False], mask.astype(bool), [False]))
    d = np.diff(m.astype(np.int8))
    starts = np.flatnonzero(d == 1)
    return starts, np.flatnonzero(d == -1) - starts


@dataclass
class Measurements:
    """A log's serving-cell measurements: trace rows and values (NaN where absent)."""

    rows: np.ndarray
    values: dict[str, np.ndarray]

    def predictor(self) -> str | None:
        """The first of :data:`PREDICTORS` that some measurement carries."""
        for name in PREDICTORS:
            if np.isfinite(self.values[name]).any():
                return name
        return None


def fill(mcs: np.ndarray, layers: np.ndarray | None, fit_rows: np.ndarray, meas: Measurements,
         *, two: np.ndarray, logged: tuple[np.ndarray, np.ndarray] | None = None
         ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, dict[str, Any]]:
    """The channel per subframe: ``mcs`` (and ``layers``) kept at ``fit_rows`` (the fit
    blocks' rows), inferred from the nearest measurement elsewhere, held where none is near.
    ``two``: per row, the UE received two blocks; ``logged``: (rows, MCS) of every block
    with an MCS 0..28, for the previous rule's error beside the model's. Returns (mcs,
    layers, mcs_source, the provenance's ``channel`` object)."""
    n = len(mcs)
    source = np.full(n, HELD, dtype=np.int64)
    source[fit_rows] = MEASURED
    out_mcs = mcs.copy()
    out_layers = None if layers is None else layers.copy()
    predictor = meas.predictor()
    info: dict[str, Any] = {
        "model": "per-log binned median of the MCS of the UE's own link-adapted blocks (new transmissions of "
                 f"≥ {MIN_FIT_TBS_BITS} bits) by its nearest serving-cell measurement (within {MEAS_NEAR_MS} ms); "
                 "traces/CHANNEL_MODEL.md §6",
        "fit_blocks_min_bits": MIN_FIT_TBS_BITS, "measurement_near_ms": MEAS_NEAR_MS,
    }
    model: ChannelFit | None = None
    near = np.zeros(n, dtype=bool)
    xrow = np.full(n, np.nan)
    if predictor is None:
        info["fit"] = None
        info["no_fit_reason"] = "the log has no serving-cell measurement (0xB193) of this cell"
    else:
        v = meas.values[predictor]
        ok = np.isfinite(v)
        order = np.argsort(meas.rows[ok], kind="stable")
        mr, mv = meas.rows[ok][order], v[ok][order]
        j, dist = nearest(np.arange(n), mr)
        near = dist <= MEAS_NEAR_MS
        xrow = np.where(near, mv[j], np.nan)
        fr = fit_rows[near[fit_rows]]
        model = fit(predictor, xrow[fr], mcs[fr], two[fr])
        if model is None:
            info["fit"] = None
            info["no_fit_reason"] = (f"{len(fr)} link-adapted blocks with a measurement near, fewer than "
                                     f"{MIN_FIT_BLOCKS}")
        else:
            info["fit"] = model.as_json()
            pred_fit = model.predict(xrow[fr])[0]
            info["error_in_sample"] = {"mae_mcs": round(float(np.mean(np.abs(pred_fit - mcs[fr]))), 3),
                                       "bias_mcs": round(float(np.mean(pred_fit - mcs[fr])), 3)}
            info["error_held_out"] = held_out_error(xrow[fr], mcs[fr], two[fr], fr, predictor=predictor,
                                                    logged=logged)
            todo = (source != MEASURED) & near
            m_pred, l_pred = model.predict(xrow[todo])
            out_mcs[todo] = m_pred
            if out_layers is not None:
                out_layers[todo] = l_pred
            source[todo] = INFERRED
    # Held: the last measured or inferred value (the first after, before any); none at all:
    # the values as they came (the importer's own hold).
    known = source != HELD
    if known.any() and not known.all():
        idx = np.where(known, np.arange(n), -1)
        np.maximum.accumulate(idx, out=idx)
        idx[idx < 0] = int(np.argmax(known))
        out_mcs = out_mcs[idx]
        if out_layers is not None:
            out_layers = out_layers[idx]
    starts, lengths = runs_of(source == HELD)
    longest = np.argsort(-lengths, kind="stable")[:LISTED_HELD_SPANS]
    info.update({
        "measured_subframes": int((source == MEASURED).sum()),
        "inferred_subframes": int((source == INFERRED).sum()),
        "held_subframes": int((source == HELD).sum()),
        "inferred_share": round(float(np.mean(source == INFERRED)), 4),
        "held_spans": int(len(lengths)),
        "longest_held_spans_ms": [[int(starts[i]), int(lengths[i])] for i in longest],
        "held_rule": "no measurement within measurement_near_ms (or no fit): the last measured or inferred MCS "
                     "held (the first after, before any); listed here and marked mcs_source 2, never read as "
                     "measured",
    })
    return out_mcs, out_layers, source, info
