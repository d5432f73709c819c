"""Bulk-flow rows on what an observer of the cell sees against the emulator's ground truth: RSRQ
in the diag records against the cell's allocation (CLAW-3) and the passive bandwidth estimator
on a server-side capture (LTE-6). Registered in :data:`.bulk.EXPERIMENTS`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import plotly.graph_objects as go

from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.emulator.truth import read_truth
from clawbed.orchestrator.fidelity.harness import (
    Cell,
    RowContext,
    constant_trace,
    fmt,
    save_figure,
    synth_trace,
)
from clawbed.orchestrator.fidelity.results import Check, Outcome

# -- CLAW-3: RSRQ against the cell's allocation; polarised allocation ---------------------------


def diag_fidelity(ctx: RowContext) -> Outcome:
    p, out = ctx.params, ctx.outcome
    step_ms = int(p["step_ms"])
    steps = list(range(0, 51, 5))
    # Phase 1: the UE idle, the other users' demand stepped 0 → 50 RBs; phase 2: no other users.
    n_phase1 = len(steps) * step_ms
    total_s = n_phase1 / 1000 + p["ramp_steps"] * p["ramp_step_s"] + 10
    path, _ = constant_trace(ctx.out / "steps.cbt", 30e6, total_s, other_steps=steps + [0] * 1000, step_ms=step_ms)

    with Cell(ctx, "ramp", ue={"trace": path}, loop_trace=False) as cell:
        time.sleep(n_phase1 / 1000 + 0.5)
        with UdpSink([cell.topo.ues[0].name], 9000):
            t_ramp = time.time()
            for k in range(1, p["ramp_steps"] + 1):
                argv = send_udp_command(sys.executable, [(str(cell.topo.ues[0].address), 9000)],
                                        f"{0.5 * k}mbit", 1200, p["ramp_step_s"])
                cell.topo.core.run(argv, timeout_s=p["ramp_step_s"] + 30)
        truth = read_truth(cell.truth_path)
    origin_s = truth.header["origin_unix_ns"] / 1e9
    rsrq = truth["rsrq_db"]
    means = [float(np.mean(rsrq[i * step_ms + 100:(i + 1) * step_ms])) for i in range(len(steps))]
    n_rb = int(truth["n_rb"][0])
    idle, full = means[0], means[-1]
    mono = all(b <= a + 0.05 for a, b in zip(means, means[1:]))
    out.checks += [Check("mean RSRQ idle (2 antennas)", fmt(idle, "dB", 2), "−6.0 ± 0.3 dB", abs(idle + 6.0) <= 0.3),
                   Check("mean RSRQ full load", fmt(full, "dB", 2), "−13.0 ± 0.3 dB", abs(full + 13.0) <= 0.3),
                   Check("RSRQ monotone in the load", "yes" if mono else "no", "monotone", mono)]
    alloc = truth.ue(0, "alloc_rbs").astype(float)
    t0 = int((t_ramp - origin_s) * 1000)
    span = alloc[t0:t0 + int(p["ramp_steps"] * p["ramp_step_s"] * 1000)]
    polar = float(np.mean((span == 0) | (span >= 0.8 * n_rb))) if len(span) else float("nan")
    # The paper's Fig 10: the UE's RBs averaged over ~an RTT (200 ms) against the rate it received
    # in the same window (its tcpdump rate), over the ramp.
    delivered = truth.ue(0, "delivered_bytes").astype(float)[t0:t0 + len(span)]
    w = 200
    nwin = len(span) // w
    rbs_w = span[:nwin * w].reshape(nwin, w).mean(axis=1)
    rate_w = delivered[:nwin * w].reshape(nwin, w).sum(axis=1) * 8 / (w / 1000) / 1e6
    r2 = float(np.corrcoef(rate_w, rbs_w)[0, 1] ** 2) if nwin > 2 and np.ptp(rate_w) > 0 else float("nan")
    out.checks += [Check("subframes with 0 RBs or ≥ 80 % of N_rb during the ramp", fmt(polar * 100, "%"), "≥ 80 %", polar >= 0.8),
                   Check("200 ms-averaged own RBs vs the rate received in the window, R²", f"{r2:.3f}", "≥ 0.9",
                         r2 >= 0.9 if not np.isnan(r2) else None, "too few windows")]
    per_step = {f"{float(x):.2f}": float(y) for x, y in zip(rate_w, rbs_w)}
    offered = [0.5 * (k + 1) for k in range(p["ramp_steps"])]
    out.metrics = {"rsrq_per_load_step_db": dict(zip(steps, means)), "polarised_fraction": polar, "r2": r2,
                   "own_rbs_per_200ms_by_rate_mbit": per_step, "offered_mbit": offered}
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[s / n_rb * 100 for s in steps], y=means, mode="lines+markers", name="mean RSRQ (truth)"))
    fig.add_trace(go.Scatter(x=[s / n_rb * 100 for s in steps],
                             y=[10 * np.log10(1 / ((s / n_rb) * (12 - 4) * 2 + 4)) if s else 10 * np.log10(1 / 4)
                                for s in steps], mode="lines", line={"dash": "dash"}, name="Eq. 6 (2 antennas)"))
    fig.update_layout(title=f"{ctx.row.id}: RSRQ against the cell's load", xaxis_title="RB load, %", yaxis_title="RSRQ, dB")
    save_figure(ctx, fig)
    out.testbed = f"RSRQ idle {fmt(idle, 'dB', 2)}, full {fmt(full, 'dB', 2)}; polarised {fmt(polar * 100, '%')}; R² {r2:.2f}"
    return out


def passive_bw(ctx: RowContext) -> Outcome:
    """LTE-6: the passive estimator on a server-side capture, scored against the ground truth as
    ``clawbed analyze bandwidth`` scores it (windows in which the UE's queue never emptied, so
    that the delivered rate is the available bandwidth the estimator measures)."""
    from clawbed.orchestrator.analyze import score

    p, out = ctx.params, ctx.outcome
    trace = synth_trace(p["preset"], max(int(p["seconds"]) + 10, 60))
    with Cell(ctx, "bulk", ue={"trace": trace}) as cell:
        cap = cell.dir / "server.pcap"
        dump = cell.topo.core.popen(["tcpdump", "-i", cell.topo.core.tun, "-s", "128", "-U", "-w", str(cap), "tcp"],
                                    name="fidtcpdump", log_path=cell.dir / "tcpdump.log")
        time.sleep(1.0)
        cell.flow("cubic", seconds=p["seconds"])
        dump.close()
        truth_path = cell.truth_path
    scores = {w: score(cap, truth_path, window_s=w) for w in p["windows_s"]}
    fig = go.Figure()
    for w, sc in scores.items():
        pts = [(r["truth_bps"] / 1e6, r["estimate_bps"] / 1e6) for r in sc["rows"]
               if r["saturated"] and r["estimate_bps"] is not None]
        fig.add_trace(go.Scatter(x=[a for a, _ in pts], y=[b for _, b in pts], mode="markers", name=f"{w} s windows"))
    first = next(iter(scores.values()))
    flows_with, flows = first["flows_with_samples"], first["flows"]
    nan = float("nan")
    errors: dict[float, float] = {w: nan if sc["mean_abs_error"] is None else float(sc["mean_abs_error"])
                                  for w, sc in scores.items()}
    out.metrics = {"mean_abs_error": errors, "mean_signed_error": {w: sc["mean_error"] for w, sc in scores.items()},
                   "within_1mbit": {w: sc["within_1mbit"] for w, sc in scores.items()},
                   "windows_scored": {w: sc["windows_scored"] for w, sc in scores.items()},
                   "flows": flows, "flows_with_samples": flows_with}
    e1 = errors.get(1.0, nan)
    one_s = scores.get(1.0)
    out.checks.append(Check("mean absolute error, 1.0 s saturated windows (vs the emulator's delivered bytes)",
                            fmt(e1 * 100, "%", 1), "≤ 8 % (paper 7.9 %)", e1 <= 0.08 if not np.isnan(e1) else None,
                            "no 1 s window estimated", cause=estimate_bias_cause(one_s) if one_s else ""))
    w1 = one_s["within_1mbit"] if one_s and one_s["within_1mbit"] is not None else nan
    out.checks.append(Check("1 s windows within ±1 Mbit/s", fmt(w1 * 100, "%"), "≥ 80 % (proposed)",
                            w1 >= 0.8 if not np.isnan(w1) else None, "no 1 s window estimated",
                            cause=estimate_bias_cause(one_s) if one_s else ""))
    e01 = errors.get(0.1, nan)
    out.checks.append(Check("error larger at 0.1 s than at 1.0 s", f"{fmt(e01 * 100, '%', 1)} vs {fmt(e1 * 100, '%', 1)}",
                            "larger", e01 > e1 if not (np.isnan(e01) or np.isnan(e1)) else None, "a window size without estimates"))
    out.checks.append(Check("large flows with samples", f"{flows_with}/{flows}", "≥ 90 %",
                            flows_with >= 0.9 * flows if flows else None, "no large flow in the capture"))
    fig.add_trace(go.Scatter(x=[0, 30], y=[0, 30], mode="lines", line={"dash": "dot"}, name="estimate = truth"))
    fig.update_layout(title=f"{ctx.row.id}: passive estimate against the delivered rate (saturated windows)",
                      xaxis_title="truth, Mbit/s", yaxis_title="estimate, Mbit/s")
    save_figure(ctx, fig)
    out.testbed = (", ".join(f"{k} s: error {fmt(v * 100, '%', 1)}" for k, v in errors.items())
                   + f"; {flows_with}/{flows} flows")
    return out


def estimate_bias_cause(sc: dict[str, Any]) -> str:
    """Where a window's estimate went wrong, from the scored windows: the signed mean error (a
    bias, not scatter), and the error in the faster and the slower half of the windows."""
    rows = [r for r in sc["rows"] if r["saturated"] and r["estimate_bps"] is not None and r["truth_bps"] > 0]
    if len(rows) < 4 or sc["mean_error"] is None:
        return ""
    truth = np.array([r["truth_bps"] for r in rows])
    rel = np.array([(r["estimate_bps"] - r["truth_bps"]) / r["truth_bps"] for r in rows])
    fast = truth >= np.median(truth)
    signed, spread = float(sc["mean_error"]), float(np.mean(np.abs(rel)))
    kind = ("a bias (the signed error is most of the absolute one)" if abs(signed) >= 0.5 * spread
            else "scatter around the truth (the signed error is small next to the absolute one)")
    worse = "slower" if abs(rel[~fast].mean()) > abs(rel[fast].mean()) else "faster"
    return (f"signed mean error {signed * 100:+.1f} % over {len(rows)} saturated windows, absolute "
            f"{spread * 100:.1f} %: {kind}; {rel[fast].mean() * 100:+.1f} % in the faster half (≥ "
            f"{np.median(truth) / 1e6:.1f} Mbit/s), {rel[~fast].mean() * 100:+.1f} % in the slower half, so the "
            f"error sits in the {worse} windows")
