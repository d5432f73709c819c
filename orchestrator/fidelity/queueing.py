"""Bulk-flow rows on the queue a flow builds in the cell: RTT against bytes in flight (LTE-1),
in flight far beyond the BDP and per hop (BB-1), bufferbloat per congestion control (BB-2).
Registered in :data:`.bulk.EXPERIMENTS`.
"""

from __future__ import annotations

import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import plotly.graph_objects as go

from clawbed.orchestrator.fidelity.harness import (
    KB,
    MIB,
    Cell,
    RowContext,
    _rate_cell,
    fmt,
    pct,
    rate_bps,
    save_figure,
    within,
)
from clawbed.orchestrator.fidelity.mechanisms import presence
from clawbed.orchestrator.fidelity.results import Check, Outcome

# -- LTE-1: RTT against bytes in flight ---------------------------------------------------------


def rtt_vs_inflight(ctx: RowContext) -> Outcome:
    p, out = ctx.params, ctx.outcome
    bin_bytes = int(p.get("bin_kb", 50)) * KB
    fig = go.Figure()
    testbed = []
    for rate in p["rates"]:
        cap = rate_bps(rate)
        with _rate_cell(ctx, f"bulk-{rate}", rate, p.get("queue_bytes", 3 * MIB), p.get("core_rtt_ms")) as cell:
            flow = cell.flow(p.get("cc", "cubic"), seconds=p["seconds"])
        inflight_now, rtt, t = flow.inflight_bytes, flow.series("srtt_ms"), flow.t
        # An RTT sample is of data sent one RTT before it: the queue that data met is what was
        # in flight then. Paired with the in-flight at the sample's own time instead, a growing
        # window reads as an RTT below in-flight/C (20 % low at 1.8 MB in flight, measured).
        known = ~np.isnan(inflight_now) & ~np.isnan(t)
        inflight = (np.interp(t - rtt / 1000, t[known], inflight_now[known], left=np.nan)
                    if known.sum() >= 2 else np.full_like(rtt, np.nan))
        ok = ~np.isnan(inflight) & ~np.isnan(rtt) & (inflight > 0)
        base = float(np.nanmin(flow.series("min_rtt_ms")))
        first_loss = flow.first_loss_index()
        max_before_loss = float(np.nanmax(inflight_now[:first_loss])) if first_loss else float("nan")
        bins: dict[int, list[float]] = {}
        for x, y in zip(inflight[ok], rtt[ok]):
            bins.setdefault(int(x // bin_bytes), []).append(float(y))
        rows = []
        for b in sorted(bins):
            if len(bins[b]) < p.get("min_samples_per_bin", 5):
                continue
            mid = (b + 0.5) * bin_bytes
            model = max(base, mid * 8 / cap * 1000)
            rows.append((mid, statistics.median(bins[b]), model))
        good = [abs(m - mod) <= 0.15 * mod for _, m, mod in rows]
        frac = sum(good) / len(good) if good else float("nan")
        out.metrics[rate] = {"base_rtt_ms": base, "max_inflight_before_loss_bytes": max_before_loss,
                             "bins": [{"inflight_bytes": a, "median_rtt_ms": b, "model_ms": c} for a, b, c in rows],
                             "fraction_of_bins_within_15pct": frac, "samples": int(ok.sum()),
                             "pairing": "srtt at t against the bytes in flight at t - srtt (when the acked data left)",
                             "goodput_bps": flow.goodput_bps()}
        out.checks.append(Check(f"{rate}: median RTT per in-flight bin ≈ max(base, in-flight/C) ±15 %",
                                f"{fmt(frac * 100)} % of {len(rows)} bins", "≥ 90 % of bins", frac >= 0.9 if rows else None,
                                "" if rows else "no populated bin"))
        out.checks.append(Check(f"{rate}: max in-flight before the first loss", fmt(max_before_loss / KB, "KB"),
                                "≥ 1200 KB (buffer ≥ 1.2 MB)", max_before_loss >= 1200 * KB))
        if abs(cap - 8e6) < 1e5:
            def at(x: float, xs: np.ndarray = inflight[ok], ys: np.ndarray = rtt[ok]) -> float:
                # The samples within a quarter bin of x, not the bin whose edge x is on.
                near = ys[np.abs(xs - x) <= bin_bytes / 4]
                return float(np.median(near)) if len(near) >= p.get("min_samples_per_bin", 5) else float("nan")
            r100, r200 = at(100 * KB), at(200 * KB)
            out.checks.append(Check("8 Mbit/s: median RTT at 100 KB in flight", fmt(r100, "ms"), "≥ 100 ms",
                                    r100 >= 100 if not np.isnan(r100) else None, "no samples near 100 KB"))
            out.checks.append(Check("8 Mbit/s: median RTT at 200 KB in flight", fmt(r200, "ms"), "≥ 150 ms",
                                    r200 >= 150 if not np.isnan(r200) else None, "no samples near 200 KB"))
            testbed.append(f"8 Mbit/s: {fmt(r100)} ms @100 KB, {fmt(r200)} ms @200 KB")
        testbed.append(f"{rate}: max in-flight before loss {fmt(max_before_loss / KB)} KB, {fmt(frac * 100)} % bins ±15 %")
        fig.add_trace(go.Scattergl(x=(inflight[ok] / KB).tolist(), y=rtt[ok].tolist(), mode="markers", opacity=0.3,
                                   name=f"{rate} samples", marker={"size": 3}))
        fig.add_trace(go.Scatter(x=[a / KB for a, _, _ in rows], y=[b for _, b, _ in rows], mode="lines+markers",
                                 name=f"{rate} median per bin"))
        fig.add_trace(go.Scatter(x=[a / KB for a, _, _ in rows], y=[c for _, _, c in rows], mode="lines",
                                 line={"dash": "dash"}, name=f"{rate} max(base, in-flight/C)"))
    fig.update_layout(title=f"{ctx.row.id}: server RTT (srtt) against the bytes in flight when the acked data was sent",
                      xaxis_title="in flight one RTT earlier, KB",
                      yaxis_title="RTT, ms")
    save_figure(ctx, fig)
    out.testbed = "; ".join(testbed)
    return out


# -- BB-1: in flight far beyond the BDP ---------------------------------------------------------


def inflight_vs_bdp(ctx: RowContext) -> Outcome:
    p, out = ctx.params, ctx.outcome
    fig = go.Figure()
    testbed = []
    for case in p["cases"]:
        cap = rate_bps(case["rate"])
        with _rate_cell(ctx, f"bulk-{case['name']}", case["rate"], case.get("queue_bytes", 3 * MIB),
                        case.get("core_rtt_ms")) as cell:
            flow = cell.flow("cubic", seconds=case["seconds"])
        inflight = flow.inflight_bytes
        base = float(np.nanmin(flow.series("min_rtt_ms")))
        bdp = cap / 8 * base / 1000
        k = flow.first_loss_index()
        top = float(np.nanmax(inflight[:k])) if k else float(np.nanmax(inflight))
        out.metrics[case["name"]] = {"base_rtt_ms": base, "bdp_bytes": bdp, "max_inflight_before_loss_bytes": top,
                                     "ratio_to_bdp": top / bdp}
        testbed.append(f"{case['name']}: max in-flight {fmt(top / KB)} KB = {top / bdp:.1f}× BDP ({fmt(bdp / KB)} KB)")
        if case.get("judge", False):
            out.checks.append(Check(f"{case['name']}: max in-flight before the first loss", fmt(top / KB, "KB"),
                                    "≥ 800 KB and ≥ 13× BDP", top >= 800 * KB and top >= 13 * bdp))
        fig.add_trace(go.Scatter(x=flow.t.tolist(), y=(inflight / KB).tolist(), name=f"{case['name']} in flight"))
        fig.add_hline(y=bdp / KB, line_dash="dot", annotation_text=f"BDP {case['name']}")
    if p.get("hops"):
        steps = per_hop_steps(ctx, p["hops"])
        out.metrics["per_hop"] = steps
        first = steps[0]["step_ms"]
        same = all(abs(h["step_ms"] - first) <= 0.10 * first for h in steps)
        out.checks.append(Check("(b) per-hop RTT step with a background download",
                                ", ".join(f"{h['hop']} +{h['step_ms']:.0f} ms" for h in steps),
                                "step from hop 1, the same (±10 %) at every hop", first >= 20 and same))
        testbed.append("per-hop step " + "/".join(f"{h['step_ms']:.0f}" for h in steps) + " ms")
    fig.update_layout(title=f"{ctx.row.id}: bytes in flight of a bulk CUBIC flow", xaxis_title="s",
                      yaxis_title="in flight, KB")
    save_figure(ctx, fig)
    out.testbed = "; ".join(testbed)
    return out


def per_hop_steps(ctx: RowContext, p: dict[str, Any]) -> list[dict[str, Any]]:
    """Median ping RTT from the UE to every hop (core router, wired gateway, server host behind
    it), idle and with a background bulk download queueing in the UE's base-station buffer."""
    from clawbed.replay.network.topology import Topology

    def rtts(cell: Cell, hop: str) -> list[float]:
        r = cell.topo.ues[0].run(["ping", "-n", "-c", str(p["pings"]), "-i", "0.2", hop], check=False,
                                 timeout_s=p["pings"] + 30)
        return [float(x.split("time=")[1].split()[0]) for x in r.stdout.splitlines() if "time=" in x]

    def all_hops(cell: Cell, hops: dict[str, str]) -> dict[str, list[float]]:
        # Every hop pinged at once: they see the same queue at the same moments.
        with ThreadPoolExecutor(len(hops)) as pool:
            futures = {name: pool.submit(rtts, cell, addr) for name, addr in hops.items()}
            return {name: f.result() for name, f in futures.items()}

    with _rate_cell(ctx, "per-hop", p["rate"], p.get("queue_bytes", 3 * MIB), p.get("core_rtt_ms"),
                    topology=Topology) as cell:
        server = cell.topo.add_server()
        assert cell.topo.wired is not None
        hops = {"hop 1 (core router)": str(cell.topo.core.address),
                "hop 2 (gateway)": str(cell.topo.wired.gateway_address), "hop 3 (server)": str(server.address)}
        idle = all_hops(cell, hops)
        with cell.server("cubic") as (port, _cc, sub, _sampler):
            bg = cell.topo.ues[0].popen([sys.executable, "-m", "clawbed.orchestrator.fidelity.flows", "fetch", "--host",
                                         str(cell.topo.core.address), "--port", str(port), "--seconds",
                                         str(p["background_s"])], name="fidbg", log_path=sub / "client.jsonl")
            time.sleep(p["warmup_s"])
            busy = all_hops(cell, hops)
            bg.close()
    return [{"hop": name, "address": hops[name], "idle_ms": pct(idle[name], 50), "busy_ms": pct(busy[name], 50),
             "step_ms": pct(busy[name], 50) - pct(idle[name], 50)} for name in hops]


# -- BB-2: bufferbloat per congestion control ---------------------------------------------------


def bufferbloat(ctx: RowContext) -> Outcome:
    p, out = ctx.params, ctx.outcome
    fig = go.Figure()
    testbed = []
    for case in p["cases"]:
        cap = rate_bps(case["rate"])
        buf = int(case["queue_bytes"])
        per_cc: dict[str, dict[str, float]] = {}
        for cc in case["schemes"]:
            if cc == "vegas" and not presence("vegas").present:
                per_cc[cc] = {}
                continue
            with _rate_cell(ctx, f"{case['name']}-{cc}", case["rate"], buf, case.get("core_rtt_ms")) as cell:
                flow = cell.flow(cc, seconds=case["seconds"])
            rtt = flow.series("srtt_ms")
            half = rtt[len(rtt) // 2:]
            base = float(np.nanmin(flow.series("min_rtt_ms")))
            m = {"rtt_p50_ms": pct(rtt, 50), "rtt_p95_ms": pct(rtt, 95), "rtt_max_ms": float(np.nanmax(rtt)),
                 "rtt_second_half_median_ms": pct(half, 50), "base_rtt_ms": base, "goodput_bps": flow.goodput_bps(),
                 "max_cwnd_bytes": float(np.nanmax(flow.series("cwnd_bytes"))),
                 "bdp_bytes": cap / 8 * base / 1000, "retrans": float(np.nanmax(flow.series("retrans_total")))}
            per_cc[cc] = m
            fig.add_trace(go.Scatter(x=flow.t.tolist(), y=rtt.tolist(), name=f"{case['name']} {cc} srtt"))
        out.metrics[case["name"]] = per_cc
        cub = per_cc.get("cubic", {})
        if cub:
            plateau_model = cub["base_rtt_ms"] + buf * 8 / cap * 1000
            out.checks.append(Check(f"{case['name']}: CUBIC RTT plateau ≈ base + buffer/C ±15 %",
                                    fmt(cub["rtt_second_half_median_ms"], "ms"), f"{fmt(plateau_model, 'ms')} ±15 %",
                                    within(cub["rtt_second_half_median_ms"], plateau_model, 0.15)))
            out.checks.append(Check(f"{case['name']}: CUBIC max cwnd", f"{cub['max_cwnd_bytes'] / cub['bdp_bytes']:.1f}× BDP",
                                    "≥ 10× BDP", cub["max_cwnd_bytes"] >= 10 * cub["bdp_bytes"]))
            if buf >= 4 * MIB - 1 and cap <= 3.1e6:
                out.checks.append(Check(f"{case['name']}: CUBIC max RTT (≥ 4 MB at ≤ 3.1 Mbit/s)",
                                        fmt(cub["rtt_max_ms"] / 1000, "s", 1), "≥ 10 s", cub["rtt_max_ms"] >= 10_000))
            if buf <= 1 * MIB + 1 and cap <= 8e6:
                out.checks.append(Check(f"{case['name']}: CUBIC p95 RTT (1 MB at ≤ 8 Mbit/s)",
                                        fmt(cub["rtt_p95_ms"] / 1000, "s", 2), "≥ 1 s", cub["rtt_p95_ms"] >= 1000))
            if per_cc.get("reno"):
                out.checks.append(Check(f"{case['name']}: RTT CUBIC ≥ Reno (median)",
                                        f"{fmt(cub['rtt_p50_ms'])} vs {fmt(per_cc['reno']['rtt_p50_ms'])} ms", "CUBIC ≥ Reno",
                                        cub["rtt_p50_ms"] >= 0.95 * per_cc["reno"]["rtt_p50_ms"],
                                        ))
            if "vegas" in case["schemes"]:
                veg = per_cc.get("vegas") or {}
                why = "" if veg else presence("vegas").reason()
                out.checks.append(Check(f"{case['name']}: RTT Reno > Vegas and Vegas throughput < CUBIC's",
                                        fmt(veg.get("rtt_p50_ms", float("nan")), "ms"), "Vegas lowest RTT, lower throughput",
                                        (veg["rtt_p50_ms"] < per_cc.get("reno", cub)["rtt_p50_ms"]
                                         and veg["goodput_bps"] < cub["goodput_bps"]) if veg else None, why))
            testbed.append(f"{case['name']}: CUBIC RTT p50/p95/max {fmt(cub['rtt_p50_ms'])}/{fmt(cub['rtt_p95_ms'])}/"
                           f"{fmt(cub['rtt_max_ms'])} ms, " + ", ".join(
                               f"{cc} p50 {fmt(m['rtt_p50_ms'])} ms {fmt(m['goodput_bps'] / 1e6, 'Mbit/s', 2)}"
                               for cc, m in per_cc.items() if m))
    fig.update_layout(title=f"{ctx.row.id}: smoothed RTT of bulk flows per CC and buffer", xaxis_title="s",
                      yaxis_title="srtt, ms", yaxis_type="log")
    save_figure(ctx, fig)
    out.testbed = "; ".join(testbed)
    return out
