"""REAL-2: the channel a phone log gives where the phone was not scheduled, held against the
log itself, and what the emulated cell gives the phone's demand over the same seconds.

Every phone log (``*.mi2log``, ``*.qmdl``) in the shared folder's ``data/real-logs/`` is
imported as ``clawbed trace import`` does (``traces/diaglog/``; the cell's bandwidth, which a
diag log does not carry, is the smallest LTE bandwidth holding the largest allocation the
log records: a lower bound, 10 MHz for the 2018 Pixel XL, as its README says). Two parts:

1. **Held-out MCS.** The importer's cross-validation (``traces/diaglog/channelfit.py``
   ``held_out_error``): the log's seconds with link-adapted blocks are split into five
   groups; each group's blocks are hidden (every scheduled subframe of those seconds, as in
   a gap), inferred from the phone's measurements by a fit on the rest, and compared with
   the MCS the log really has. Beside it, on the same hidden blocks: the previous import
   rule (hold the last block's MCS), a constant (the log's median), and each hidden
   second's own median (a floor: the MCS varies inside a second with fast fading and the
   outer loop, which no per-measurement model follows). The criterion, per log with a fit:

   - MAE ≤ the floor + 2 MCS steps: the phone reports its channel as a 4-bit CQI, and one
     CQI step spans about two MCS steps (CHANNEL_MODEL.md §2's CQI → MCS map), so a model
     fed by the phone's measurements cannot resolve the channel finer than that;
   - |bias| ≤ 1 MCS step (half a CQI step): the inferred channel must not shift the replayed
     capacity one way (a step is ~7–12 % of a block at mid MCS);
   - MAE below the constant's: the measurements must carry information the model uses.

2. **Throughput.** Over the log's most informative segment (``traces/segments.py``, at most
   ``segment_s``, with ``lead_in_s`` before it), the real emulator plays the imported trace
   and one bulk TCP download (Cubic, set explicitly) keeps the cell backlogged; per second
   of the segment, the bits the emulated UE received (ground truth, ``delivered_bytes``)
   against the phone's own transport blocks in the same seconds. The phone's rate is a lower
   bound on what the cell could give it: the emulated cell under a saturating demand must
   give at least ``min_ratio`` of it (0.8: the phone's block bits also count HARQ
   retransmissions, ~6–8 % of blocks in these logs, and MAC/RLC/PDCP headers, which the
   emulated side's delivered IP bytes do not). In seconds where the phone itself saturated
   (scheduled in at least ``saturated_share`` of the subframes: a backlogged UE is served
   in most subframes unless others take them), the two must agree within ``±tolerance``;
   where no second saturated, that part is reported as not evaluated, with the phone's
   highest share.

Without the shared folder the row is skipped with the reason; a log that does not import,
or has no fit or no segment, is listed with why, never dropped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.errors import ClawbedError, InputError
from clawbed.lte import N_RB_BY_BANDWIDTH_MHZ
from clawbed.orchestrator.fidelity.harness import Cell, RowContext, fmt
from clawbed.orchestrator.fidelity.results import SKIPPED, Check, Outcome
from clawbed.paths import shared_dir
from clawbed.traces.schema import Trace

LOG_SUFFIXES = (".mi2log", ".qmdl")
#: One CQI step in MCS steps (the CQI → MCS map of CHANNEL_MODEL.md §2 for N_rb 50).
CQI_STEP_MCS = 2.0
MAX_BIAS_MCS = 1.0
SCHEME = "cubic"


def real_logs() -> tuple[list[Path], str]:
    """The phone logs of the shared folder, or [] and why there are none."""
    try:
        folder = shared_dir() / "data" / "real-logs"
    except ClawbedError as e:
        return [], str(e)
    if not folder.is_dir():
        return [], f"{folder} absent: the real logs are in the shared data folder's data/real-logs/"
    logs = sorted(p for p in folder.iterdir() if p.suffix in LOG_SUFFIXES)
    return logs, "" if logs else f"no {' or '.join(LOG_SUFFIXES)} file in {folder}"


def import_log(path: Path) -> tuple[Trace, dict[str, Any]]:
    """The log's trace at the smallest bandwidth holding its largest allocation; the notes say
    what was chosen (and whether 0xB173 v48 had to be read with the inferred layout)."""
    from clawbed.traces.importers import import_mobileinsight

    notes: dict[str, Any] = {}
    kwargs: dict[str, Any] = {}
    try:
        probe = import_mobileinsight(path, bandwidth_mhz=20.0)
    except InputError as e:
        if "v48" not in str(e):
            raise
        kwargs["infer_v48"] = True
        notes["infer_b173_v48"] = True
        probe = import_mobileinsight(path, bandwidth_mhz=20.0, **kwargs)
    largest = int(probe["own_rbs"].max())
    bw = min(b for b, n in N_RB_BY_BANDWIDTH_MHZ.items() if n >= max(largest, 1) and b >= 1.4)
    if probe.metadata["provenance"].get("path") == "mac-fallback":
        bw = 20.0  # its RBs are estimated from the bandwidth: no lower bound to read
        notes["bandwidth_rule"] = "20 MHz: the lossy path's RBs are estimated, they bound nothing"
    else:
        notes["bandwidth_rule"] = f"smallest LTE bandwidth holding the largest allocation ({largest} RBs)"
    notes["bandwidth_mhz"] = bw
    trace = probe if bw == 20.0 else import_mobileinsight(path, bandwidth_mhz=bw, **kwargs)
    return trace, notes


def mcs_checks(name: str, channel: dict[str, Any]) -> tuple[list[Check], dict[str, Any]]:
    """Part 1's checks of one log from its provenance's ``channel`` object."""
    err = channel.get("error_held_out") or {}
    if not channel.get("fit") or not err.get("blocks"):
        why = channel.get("no_fit_reason") or err.get("reason") or "no held-out blocks"
        return [Check(f"{name}: held-out MCS", "–", "a fit", None, note=f"no fit: {why}")], {"evaluated": False,
                                                                                               "reason": why}
    floor = err["second_median_mae_mcs"]
    figures = {"evaluated": True, "blocks": err["blocks"], "seconds": err["seconds"], "mae_mcs": err["mae_mcs"],
               "bias_mcs": err["bias_mcs"], "within_2_mcs": err["within_2_mcs"], "floor_mae_mcs": floor,
               "median_mae_mcs": err["median_mae_mcs"], "hold_mae_mcs": err.get("hold_mae_mcs"),
               "predictor": channel["fit"]["predictor"]}
    checks = [
        Check(f"{name}: held-out MCS error (MAE, {err['blocks']} blocks)", fmt(err["mae_mcs"], "MCS", 2),
              f"≤ the second's own median's {floor:.2f} + {CQI_STEP_MCS:g} (one CQI step)",
              err["mae_mcs"] <= floor + CQI_STEP_MCS,
              cause=f"previous rule (hold the last block) {err.get('hold_mae_mcs', '–')}, constant "
                    f"{err['median_mae_mcs']}"),
        Check(f"{name}: held-out MCS bias", fmt(err["bias_mcs"], "MCS", 2), f"within ±{MAX_BIAS_MCS:g}",
              abs(err["bias_mcs"]) <= MAX_BIAS_MCS),
        Check(f"{name}: measurements inform (MAE vs the log's median)", f"{err['mae_mcs']:.2f} vs "
              f"{err['median_mae_mcs']:.2f}", "below", err["mae_mcs"] < err["median_mae_mcs"]),
    ]
    return checks, figures


def _aligned_rows(truth_mcs: np.ndarray, trace_mcs: np.ndarray, guess: int,
                  search_ms: int = 400) -> tuple[int, float]:
    """The truth row where trace row 0 played, and the share of rows whose MCS then agree: the
    offset near ``guess`` at which the truth's channel MCS matches the trace's most often
    (the seek lands within a few ms of it)."""
    best, best_hits = guess, -1
    n = min(len(trace_mcs), 5000)
    for off in range(max(guess - search_ms, 0), guess + search_ms + 1):
        seg = truth_mcs[off:off + n]
        if len(seg) < n:
            break
        hits = int(np.sum(seg == trace_mcs[:n]))
        if hits > best_hits:
            best, best_hits = off, hits
    return best, max(best_hits, 0) / max(n, 1)


def throughput(ctx: RowContext, name: str, trace: Trace, p: dict[str, Any]) -> tuple[list[Check], dict[str, Any]]:
    """Part 2 for one log (module doc)."""
    from clawbed.emulator.truth import read_truth
    from clawbed.traces.io import write_trace
    from clawbed.traces.segments import cut, informative_segments, per_second

    seconds = per_second(trace)
    segs = informative_segments(seconds) if seconds else []
    if not segs:
        why = "no informative segment"
        return [Check(f"{name}: emulated vs phone throughput", "–", "a segment", None, note=why)], {"evaluated": False,
                                                                                                  "reason": why}
    seg = segs[0]
    a_s, b_s = seg["start_s"], min(seg["end_s"], seg["start_s"] + int(p["segment_s"]))
    lead = min(int(p["lead_in_s"]), a_s)
    part = cut(trace, (a_s - lead) * 1000, min(b_s * 1000, trace.duration_ms))
    path = ctx.out / f"{name}.cbt"
    write_trace(part, path)
    flow_s = part.duration_ms / 1000
    ue = {"trace": path, "cell": {"queue_limit_bytes": int(p["queue_bytes"])}}
    # The trace loops (the emulator stops at a trace's end otherwise, under a running flow);
    # only the seconds of its first play are compared.
    with Cell(ctx, name, ue=ue, seed=int(p["seed"])) as cell:
        cell.record_ends()
        t_seek = time.time()
        cell.cell.emulator.seek(0)
        flow = cell.flow(SCHEME, seconds=flow_s)
        truth = read_truth(cell.truth_path, ("t_ms", "ues[0].mcs", "ues[0].delivered_bytes"))
    origin_s = truth.header["origin_unix_ns"] / 1e9
    row0, agree = _aligned_rows(np.asarray(truth.ue(0, "mcs"), dtype=np.float64), part["mcs"].astype(np.float64),
                         int((t_seek - origin_s) * 1000))
    delivered = np.asarray(truth.ue(0, "delivered_bytes"), dtype=np.float64)
    sched = (part["own_rbs"] > 0) if part.get("own_rbs") is not None else np.zeros(part.duration_ms, dtype=bool)
    rows = []
    for k in range(lead, lead + (b_s - a_s)):
        lo, hi = k * 1000, (k + 1) * 1000
        if hi > part.duration_ms or row0 + hi > len(delivered):
            break
        rows.append({"second": a_s + k - lead, "phone_mbps": float(part["own_tbs_bits"][lo:hi].sum()) / 1e6,
                     "emulated_mbps": float(delivered[row0 + lo:row0 + hi].sum()) * 8 / 1e6,
                     "phone_scheduled_share": float(sched[lo:hi].mean())})
    figures: dict[str, Any] = {"evaluated": bool(rows), "segment_s": [a_s, b_s], "lead_in_s": lead,
                               "scheme": SCHEME, "flow_goodput_mbps": round(flow.goodput_bps() / 1e6, 3),
                               "seconds": rows, "truth_row_of_trace_row_0": row0,
                               "truth_mcs_agrees_share": round(agree, 4)}
    if not rows:
        why = "the emulator's ground truth does not cover the segment"
        return [Check(f"{name}: emulated vs phone throughput", "–", "a segment", None, note=why)], figures
    phone = float(np.mean([r["phone_mbps"] for r in rows]))
    emu = float(np.mean([r["emulated_mbps"] for r in rows]))
    ratio = emu / phone if phone > 0 else float("nan")
    figures.update({"phone_mbps": round(phone, 3), "emulated_mbps": round(emu, 3), "ratio": round(ratio, 3)})
    checks = [Check(f"{name}: emulated cell under a saturating demand vs the phone's rate, {len(rows)} s",
                    f"{emu:.2f} vs {phone:.2f} Mbit/s (×{ratio:.2f})", f"≥ ×{p['min_ratio']:g} (the phone's rate is a "
                    "lower bound)", bool(ratio >= p["min_ratio"]) if not np.isnan(ratio) else None,
                    note="the phone received nothing in the segment")]
    sat = [r for r in rows if r["phone_scheduled_share"] >= p["saturated_share"]]
    top = max(r["phone_scheduled_share"] for r in rows)
    if sat:
        ps = float(np.mean([r["phone_mbps"] for r in sat]))
        es = float(np.mean([r["emulated_mbps"] for r in sat]))
        figures["saturated"] = {"seconds": len(sat), "phone_mbps": round(ps, 3), "emulated_mbps": round(es, 3)}
        checks.append(Check(f"{name}: where the phone saturated ({len(sat)} s)", f"{es:.2f} vs {ps:.2f} Mbit/s",
                            f"within ±{p['tolerance']:.0%}", abs(es - ps) <= p["tolerance"] * ps))
    else:
        checks.append(Check(f"{name}: where the phone saturated", "–", f"within ±{p['tolerance']:.0%}", None,
                            note=f"no second with the phone scheduled in ≥ {p['saturated_share']:.0%} of the "
                                 f"subframes (highest {top:.0%}): its demand, not the cell, set its rate"))
    return checks, figures


def real_logs_channel(ctx: RowContext) -> Outcome:
    """REAL-2 (module doc)."""
    p, out = ctx.params, ctx.outcome
    logs, why = real_logs()
    if not logs:
        out.status = SKIPPED
        out.reason = f"no real logs: {why}"
        return out
    if p.get("only"):
        logs = [lg for lg in logs if lg.name in p["only"]]
    per_log: dict[str, Any] = {}
    line = []
    for path in logs:
        name = path.stem
        ctx.log(f"{path.name}")
        try:
            trace, notes = import_log(path)
        except InputError as e:
            per_log[name] = {"imports": False, "reason": str(e)[:300]}
            out.checks.append(Check(f"{name}: imports", "no", "a trace", None, note=str(e)[:200]))
            continue
        channel = trace.metadata["provenance"].get("channel", {})
        checks, mfig = mcs_checks(name, channel)
        entry: dict[str, Any] = {"imports": True, **notes, "duration_s": trace.duration_ms / 1000,
                                 "inferred_share": channel.get("inferred_share"),
                                 "held_subframes": channel.get("held_subframes"), "mcs": mfig}
        if p.get("throughput", True):
            tchecks, tfig = throughput(ctx, name, trace, p)
            checks += tchecks
            entry["throughput"] = tfig
        if all(c.ok is None for c in checks):  # one line for a log that says nothing here
            checks = [Check(name, "–", "a fit or a segment", None, note="; ".join(c.note for c in checks))]
        out.checks += checks
        per_log[name] = entry
        bits = []
        if mfig.get("evaluated"):
            bits.append(f"MCS MAE {mfig['mae_mcs']:.2f} (floor {mfig['floor_mae_mcs']:.2f}, hold "
                        f"{mfig['hold_mae_mcs']}, bias {mfig['bias_mcs']:+.2f})")
        tf = entry.get("throughput", {})
        if tf.get("ratio") is not None:
            bits.append(f"emulated/phone ×{tf['ratio']:.2f}")
        line.append(f"{'_'.join(name.split('_')[:2])}: " + (", ".join(bits) if bits else "not evaluable"))
    out.metrics = {"logs": per_log}
    out.testbed = "; ".join(line)
    return out


EXPERIMENTS: dict[str, Callable[[RowContext], Outcome]] = {"real_logs_channel": real_logs_channel}
