"""The rows that are page loads: each writes an orchestrator suite spec (``suite.yaml`` in the
row's directory), runs it with the suites' machinery (``run_suite``: one replay per scenario,
nginx, the real loader, every load in the result store under suite ``fidelity-<row>`` and the
fidelity run's name as the sweep) and scores the loads: PLTs from the store, TCP samples and
ground truth from each load's directory.

The rows' parts are beside: :mod:`.loadfacts` (what the loads say) and :mod:`.spdy` (the SPDY
rows' profiles, per-load radio facts and checks). Every row gets its loads through
:func:`run_spec` here, the one place a row's suite is run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import plotly.graph_objects as go
import yaml

from clawbed.orchestrator.fidelity.harness import RowContext, fmt, save_figure, spearman
from clawbed.orchestrator.fidelity.loadfacts import (
    _by,
    _netstat,
    gain_cause,
    mean,
    med,
    plts,
    split_label,
    tcp_stats,
    timeout_cause,
)
from clawbed.orchestrator.fidelity.loadfacts import load_dir as load_dir
from clawbed.orchestrator.fidelity.mechanisms import presence
from clawbed.orchestrator.fidelity.results import Check, Outcome
from clawbed.orchestrator.fidelity.spdy import (
    _LOADS_PER_RUN,
    _RTO_COUNTERS,
    _data_retransmissions,
    _h2_vs_h1_matrices,
    _idle_before_s,
    _post_demotion_rtos,
    _rrc_note,
    _spdy2_checks,
    _spdy3_checks,
    _spdy_load,
    protocol_rto_cause,
)
from clawbed.orchestrator.fidelity.spdy import _connections_cause as _connections_cause
from clawbed.orchestrator.fidelity.spdy import _spurious as _spurious
from clawbed.orchestrator.store import LoadRow


def run_spec(ctx: RowContext, matrices: list[dict[str, Any]], **top: Any) -> list[LoadRow]:
    """Write and run the row's suite; its loads (resumed when the row is run again in the same run)."""
    from clawbed.orchestrator.runner import run_suite
    from clawbed.orchestrator.spec import load_spec
    from clawbed.orchestrator.store import Store

    suite = f"fidelity-{ctx.row.id.lower()}"
    spec = {"suite": suite, "description": f"fidelity row {ctx.row.id}: {ctx.row.title}", "seeds": [1],
            **{k: v for k, v in top.items() if v is not None}, "matrices": matrices}
    path = ctx.out / "suite.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    loaded = load_spec(path)
    with Store(ctx.store_path) as store:
        run_suite(loaded, store, sweep=ctx.sweep, resume=True, output_root=ctx.out / "suites",
                  run_id_prefix=ctx.run_id_prefix, console=ctx.console)
        return store.loads(suite=suite, sweep=ctx.sweep)


# -- SPDY rows --------------------------------------------------------------------------------------


def spdy_h2_vs_h1(ctx: RowContext) -> Outcome:
    """SPDY-1: per page, HTTP/2's median PLT over HTTP/1.1's, on a WiFi-like and a 3G-like profile."""
    p, out = ctx.params, ctx.outcome
    matrices, traces = _h2_vs_h1_matrices(ctx, p["pages"], ["cubic"])
    loads = run_spec(ctx, matrices, loader=p["loader"], repetitions=p["repetitions"], load_timeout_s=p["load_timeout_s"])
    pl = plts(loads)
    ratios: dict[str, dict[str, float]] = {}
    for prof in p["profiles"]:
        for page in p["pages"]:
            h2 = pl.get((traces[prof], page, f"{prof}-h2", "cubic"), [])
            h1 = pl.get((traces[prof], page, f"{prof}-h1", "cubic"), [])
            if h2 and h1:
                ratios.setdefault(prof, {})[page] = med(h2) / med(h1)
    out.metrics = {"h2_over_h1_median_plt": ratios, "loads": len(loads), "failed": sum(1 for r in loads if not r.ok)}
    wifi, g3 = ratios.get("wifi", {}), ratios.get("3g", {})
    faster = sum(1 for v in wifi.values() if v < 1) / len(wifi) if wifi else float("nan")
    out.checks.append(Check("WiFi-like: pages where H2 is faster", fmt(faster * 100, "%"), "≥ 80 % of pages",
                            faster >= 0.8 if wifi else None, "no WiFi-like loads"))
    if g3:
        gain = mean([1 - v for v in g3.values()])
        both = min(g3.values()) < 1 < max(g3.values()) if len(g3) > 1 else None
        out.checks.append(Check("3G-like: mean H2 gain over H1.1", fmt(gain * 100, "%", 1), "≤ 10 % (paper Cubic 7.3 %)",
                                gain <= 0.10, _rrc_note(p), cause=protocol_rto_cause(loads, "3g")))
        out.checks.append(Check("3G-like: per-page H2/H1.1 ratios on both sides of 1",
                                ", ".join(f"{k} {v:.2f}" for k, v in g3.items()), "both sides", both,
                                "one page only" if both is None else _rrc_note(p),
                                cause=protocol_rto_cause(loads, "3g")))
    fig = go.Figure()
    for prof, per in ratios.items():
        fig.add_trace(go.Bar(x=list(per), y=list(per.values()), name=prof))
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_layout(title=f"{ctx.row.id}: median PLT HTTP/2 ÷ HTTP/1.1 per page (Chromium)", yaxis_title="ratio")
    save_figure(ctx, fig)
    out.testbed = "; ".join(f"{prof}: " + ", ".join(f"{k} {v:.2f}" for k, v in per.items()) for prof, per in ratios.items())
    out.reason = "pages loaded back to back, not 60 s apart"
    return out


def spdy_page50(ctx: RowContext) -> Outcome:
    """SPDY-5: a page of ~50 images (set-08: 50 objects, 1 MB), one host, H2 vs H1.1."""
    p, out = ctx.params, ctx.outcome
    matrices, traces = _h2_vs_h1_matrices(ctx, [p["page"]], ["cubic"])
    loads = run_spec(ctx, matrices, loader=p["loader"], repetitions=p["repetitions"], load_timeout_s=p["load_timeout_s"])
    pl = plts(loads)
    res = {}
    for prof in p["profiles"]:
        h2 = pl.get((traces[prof], p["page"], f"{prof}-h2", "cubic"), [])
        h1 = pl.get((traces[prof], p["page"], f"{prof}-h1", "cubic"), [])
        res[prof] = {"h2_mean_s": mean(h2), "h1_mean_s": mean(h1), "ratio": mean(h2) / mean(h1) if h2 and h1 else float("nan")}
    out.metrics = res
    g3, wifi = res.get("3g", {}), res.get("wifi", {})
    out.checks.append(Check("3G-like, one host: H2 PLT / H1.1 PLT", f"{g3.get('ratio', float('nan')):.2f}",
                            "≥ 1.0 (paper 1.36)", g3["ratio"] >= 1.0 if not np.isnan(g3.get("ratio", np.nan)) else None,
                            _rrc_note(p), cause=protocol_rto_cause(loads, "3g")))
    out.checks.append(Check("WiFi-like: H2 PLT ≤ H1.1 PLT", f"{wifi.get('ratio', float('nan')):.2f}", "≤ 1.0",
                            wifi["ratio"] <= 1.0 if not np.isnan(wifi.get("ratio", np.nan)) else None))
    mh = presence("multi-host-pages")
    out.checks.append(Check("3G-like, 50 host names: H2 / H1.1", "–", "≥ 1.0 (paper 1.23)", None,
                            mh.reason() if not mh.present else "variant pending"))
    fig = go.Figure([go.Bar(x=list(res), y=[v["h2_mean_s"] for v in res.values()], name="HTTP/2"),
                     go.Bar(x=list(res), y=[v["h1_mean_s"] for v in res.values()], name="HTTP/1.1")])
    fig.update_layout(title=f"{ctx.row.id}: mean PLT of {p['page']} per profile", yaxis_title="PLT, s")
    save_figure(ctx, fig)
    out.testbed = "; ".join(f"{k}: H2 {fmt(v['h2_mean_s'], 's', 2)} vs H1.1 {fmt(v['h1_mean_s'], 's', 2)}" for k, v in res.items())
    return out


def spdy_3g_runs(ctx: RowContext) -> Outcome:
    """SPDY-2 / SPDY-3: H2 vs H1.1 page loads on the 3G profile with the ``umts`` RRC model, each
    after an idle long enough for the radio to demote (SPDY-3 also on the LTE model, all else
    equal); PLT, cwnd per connection, retransmissions, and the RTOs after each promotion."""
    p, out = ctx.params, ctx.outcome
    matrices, _ = _h2_vs_h1_matrices(ctx, p["pages"], p["schemes"])
    loads = run_spec(ctx, matrices, loader=p["loader"], repetitions=p["repetitions"], load_timeout_s=p["load_timeout_s"])
    # (profile, scheme, protocol) → its successful loads and their facts; conditions are <profile>-h2|h1.
    groups: dict[tuple[str, str, str], list[tuple[LoadRow, dict[str, Any]]]] = {}
    for r in loads:
        if r.ok:
            prof, _, proto = split_label(r.label)[2].rpartition("-")
            groups.setdefault((prof, r.scheme, proto), []).append((r, _spdy_load(r)))
    summary: dict[str, dict[str, dict[str, Any]]] = {}
    for (prof, scheme, proto), items in sorted(groups.items()):
        fl = [f for _, x in items for f in x["flows"] if f["carried_page"]]
        counters = [x["counters"] for _, x in items if x["counters"] is not None]
        promos = [x["promotion_ms"] for _, x in items if x["promotion_ms"] is not None]
        retrans = mean([_data_retransmissions(x) for _, x in items])
        summary.setdefault(prof, {})[f"{scheme}-{proto}"] = {
            "loads": len(items), "plt_mean_s": mean([r.plt_ms / 1000 for r, _ in items if r.plt_ms is not None]),
            "connections_per_load": len(fl) / len(items),
            "connections_opened_per_load": sum(len(x["flows"]) for _, x in items) / len(items),
            "bytes_per_connection": mean([f["sent_bytes"] for f in fl]),
            "cwnd_mean_pkts": mean([f["cwnd_mean_pkts"] for f in fl if not np.isnan(f["cwnd_mean_pkts"])]),
            "cwnd_max_pkts": max((f["cwnd_max_pkts"] for f in fl if not np.isnan(f["cwnd_max_pkts"])),
                                 default=float("nan")),
            "retrans_per_load": retrans, "retrans_per_20_loads": retrans * _LOADS_PER_RUN,
            "demoted_loads": sum(1 for _, x in items if x["demoted"]), "promotion_ms_mean": mean(promos),
            "promotions_per_load": mean([x["promotions"] for _, x in items]),
            "post_demotion_rto_loads": sum(1 for _, x in items if _post_demotion_rtos(x)),
            "rto_loads": sum(1 for _, x in items if any(f["rto"] for f in x["flows"])),
            "emulator_drops": sum(x["emulator_drops"] for _, x in items),
            "counters": {k: sum(c.get(k, 0) for c in counters) for k in _RTO_COUNTERS} if counters else None}
    out.metrics = {"per_profile": summary, "loads": len(loads), "failed": sum(1 for r in loads if not r.ok),
                   "idle_before_s": {k: _idle_before_s(p, v) for k, v in p["profiles"].items()}}
    if ctx.row.id == "SPDY-3":
        _spdy3_checks(ctx, summary, [(k, x) for k, items in groups.items() for _, x in items])
    else:
        _spdy2_checks(ctx, summary)
    fig = go.Figure()
    for prof, per in summary.items():
        fig.add_trace(go.Bar(x=list(per), y=[v["plt_mean_s"] for v in per.values()], name=f"{prof}: mean PLT, s"))
        fig.add_trace(go.Bar(x=list(per), y=[v["cwnd_mean_pkts"] for v in per.values()],
                             name=f"{prof}: mean cwnd per connection, segments"))
        fig.add_trace(go.Bar(x=list(per), y=[v["retrans_per_20_loads"] for v in per.values()],
                             name=f"{prof}: data retransmissions per 20 loads"))
    fig.update_layout(title=f"{ctx.row.id}: per scheme and protocol ({ctx.row.source})", barmode="group")
    save_figure(ctx, fig)
    return out


# -- CLAW rows ---------------------------------------------------------------------------------


def _claw_run(ctx: RowContext) -> tuple[list[LoadRow], dict[tuple[str, str, str, str], list[float]]]:
    p = ctx.params
    # Schemes whose mechanism may be missing (vegas): in the matrices when this build has them.
    extra = [s for s in p.get("optional_schemes", []) if presence(s).present]
    matrices = [{**m, "schemes": list(dict.fromkeys([*m["schemes"], *extra]))} for m in p["matrices"]]
    loads = run_spec(ctx, matrices, loader=p["loader"], repetitions=p["repetitions"], synth_seconds=p.get("synth_seconds"),
                     load_timeout_s=p.get("load_timeout_s", 120), max_other_ues=p.get("max_other_ues"))
    return loads, plts(loads)


def _bar_figure(ctx: RowContext, pl: dict[tuple[str, str, str, str], list[float]], title: str) -> None:
    fig = go.Figure()
    schemes = sorted({k[3] for k in pl})
    for s in schemes:
        keys = [k for k in pl if k[3] == s]
        fig.add_trace(go.Box(x=[f"{k[0].removeprefix('synth:')}/{k[1]}/{k[2]}" for k in keys for _ in pl[k]],
                             y=[v for k in keys for v in pl[k]], name=s))
    fig.update_layout(title=f"{ctx.row.id}: {title}", yaxis_title="PLT, s", boxmode="group")
    save_figure(ctx, fig)


def claw_loss_plt(ctx: RowContext) -> Outcome:
    """CLAW-1: PLT against losses and RTT spikes across loads of one page (Cubic)."""
    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    pts = [(r.plt_ms / 1000, tcp_stats(r)) for r in loads if r.ok and r.plt_ms]
    pts = [(t, s) for t, s in pts if s]
    losses = [s["loss_frac"] for _, s in pts]
    plt_s = [t for t, _ in pts]
    worst = max(losses, default=float("nan"))
    out.checks.append(Check("loss in every load", fmt(worst * 100, "% (worst)", 3), "< 1 %", worst < 0.01 if pts else None))
    rho = spearman([s["retrans"] for _, s in pts], plt_s)
    out.checks.append(Check("PLT rises with lost packets (Spearman)", f"{rho:.2f}", "> 0",
                            rho > 0 if not np.isnan(rho) else None, "no load had a loss (nothing to rank)"))
    ratio = max(plt_s) / min(plt_s) if plt_s else float("nan")
    out.checks.append(Check("worst / best PLT", f"{ratio:.2f}", "≥ 2 (proposed)", ratio >= 2 if plt_s else None))
    m = med(plt_s)
    outliers = [s for t, s in pts if s["retrans"] == 0 and t > 1.5 * m]
    out.metrics = {"loads": len(pts), "median_plt_s": m, "loss_free_outliers": len(outliers),
                   "outlier_max_srtt_ms": [s["srtt_max_ms"] for s in outliers]}
    fig = go.Figure([go.Scatter(x=[s["retrans"] for _, s in pts], y=plt_s, mode="markers", name="PLT vs retransmissions"),
                     go.Scatter(x=[s["srtt_max_ms"] for _, s in pts], y=plt_s, mode="markers", name="PLT vs max srtt (ms)",
                                xaxis="x2")])
    fig.update_layout(title=f"{ctx.row.id}: PLT against retransmissions and max RTT per load (Cubic)",
                      xaxis_title="retransmitted packets", xaxis2={"overlaying": "x", "side": "top", "title": "max srtt, ms"},
                      yaxis_title="PLT, s")
    save_figure(ctx, fig)
    out.testbed = (f"{len(pts)} loads, median PLT {fmt(m, 's', 2)}, worst/best {ratio:.2f}, worst loss "
                   f"{fmt(worst * 100, '%', 3)}, {len(outliers)} loss-free outlier(s)")
    return out


def claw_idle(ctx: RowContext) -> Outcome:
    """CLAW-4: idle cell, Cubic vs CLAW; RTOs without buffer drops; slow start left without loss."""
    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    cub, claw = _by(pl, "cubic"), _by(pl, "claw")
    ratio = med(cub) / med(claw) if cub and claw else float("nan")
    out.checks.append(Check("Cubic median PLT / CLAW's", f"{ratio:.2f}", "1.3–2.0 (paper ≈ 1.5)", 1.3 <= ratio <= 2.0
                            if not np.isnan(ratio) else None, cause=gain_cause(loads)))
    st = [tcp_stats(r) for r in loads if r.scheme == "cubic" and r.ok]
    rto_clean = sum(1 for s in st if s and s["rto"] and s["overflow_drops"] == 0)
    early = sum(1 for s in st if s and s["ss_exit_no_loss"])
    out.checks.append(Check("Cubic loads with an RTO and zero buffer drops", str(rto_clean), "≥ 1", rto_clean >= 1,
                            cause=timeout_cause(loads)))
    out.checks.append(Check("Cubic loads leaving slow start without a loss", str(early), "≥ 1", early >= 1))
    out.metrics = {"cubic_plt_s": cub, "claw_plt_s": claw}
    _bar_figure(ctx, pl, "PLT per scheme on the idle cell")
    out.testbed = (f"Cubic {fmt(med(cub), 's', 2)} vs CLAW {fmt(med(claw), 's', 2)} (×{ratio:.2f}); "
                   f"{rto_clean} clean RTO(s), {early} early exit(s)")
    return out


def claw_image(ctx: RowContext) -> Outcome:
    """CLAW-5: the 2 MB image per CC: PLT and RTT order."""
    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    schemes = sorted({k[3] for k in pl})
    mean_plt = {s: mean(_by(pl, s)) for s in schemes}
    worst = {s: max(_by(pl, s), default=float("nan")) for s in schemes}
    rtt = {s: mean([tcp_stats(r).get("srtt_mean_ms", float("nan")) for r in loads if r.scheme == s and r.ok]) for s in schemes}
    red = 1 - mean_plt.get("claw", np.nan) / mean_plt.get("cubic", np.nan)
    out.checks.append(Check("CLAW mean PLT below Cubic", fmt(red * 100, "%"), "45–65 % (paper 56 %)", 0.45 <= red <= 0.65
                            if not np.isnan(red) else None, cause=gain_cause(loads)))
    wm = worst.get("cubic", np.nan) / mean_plt.get("cubic", np.nan)
    out.checks.append(Check("Cubic worst / mean", f"{wm:.2f}", "≈ 2 (paper ≈ 2.2; accept 1.6–2.8)", 1.6 <= wm <= 2.8
                            if not np.isnan(wm) else None, cause=timeout_cause(loads)))
    linux = [s for s in ("cubic", "reno", "bbr", "vegas") if s in mean_plt]
    fastest = min(linux, key=lambda s: mean_plt[s]) if linux else ""
    out.checks.append(Check("fastest non-CLAW Linux variant", fastest, "cubic", fastest == "cubic" if linux else None,
                            cause=(", ".join(f"{x} {fmt(mean_plt[x], 's', 2)}" for x in linux) + "; " + gain_cause(loads,
                                   fastest, "cubic")) if linux and fastest != "cubic" else ""))
    out.checks.append(Check("RTT Cubic > CLAW", f"{fmt(rtt.get('cubic', np.nan))} vs {fmt(rtt.get('claw', np.nan))} ms",
                            "Cubic > CLAW", rtt.get("cubic", np.nan) > rtt.get("claw", np.nan)
                            if "cubic" in rtt and "claw" in rtt else None))
    veg = presence("vegas")
    if "vegas" in mean_plt:
        out.checks.append(Check("Vegas: RTT below CLAW's, PLT ≥ 2× CLAW's",
                                f"RTT {fmt(rtt['vegas'])} ms, PLT ×{mean_plt['vegas'] / mean_plt['claw']:.2f}",
                                "RTT 10–20 % below CLAW, PLT ≥ 2×",
                                rtt["vegas"] < rtt["claw"] and mean_plt["vegas"] >= 2 * mean_plt["claw"],
                                cause=gain_cause(loads, "claw", "vegas")))
    else:
        out.checks.append(Check("Vegas: RTT below CLAW's, PLT ≥ 2× CLAW's", "–", "RTT 10–20 % below CLAW, PLT ≥ 2×", None,
                                veg.reason() if not veg.present else "vegas not in the matrix"))
    out.metrics = {"mean_plt_s": mean_plt, "worst_plt_s": worst, "mean_srtt_ms": rtt}
    _bar_figure(ctx, pl, "PLT of the 2 MB image per congestion control")
    out.testbed = ", ".join(f"{s} {fmt(mean_plt[s], 's', 2)} / {fmt(rtt[s])} ms" for s in schemes)
    return out


def claw_wireline(ctx: RowContext) -> Outcome:
    """CLAW-6: a wireline bottleneck in the core."""
    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    c, k = mean(_by(pl, "cubic")), mean(_by(pl, "claw"))
    out.checks.append(Check("CLAW (with detector) ≤ Cubic", f"{fmt(k, 's', 2)} vs {fmt(c, 's', 2)}", "CLAW ≤ Cubic (±5 %)",
                            k <= 1.05 * c if _by(pl, "cubic") and _by(pl, "claw") else None))
    nd = presence("claw-nodetect")
    n = mean(_by(pl, "claw-nodetect"))
    gain = 1 - k / n
    out.checks.append(Check("CLAW with vs without detector", f"{fmt(k, 's', 2)} vs {fmt(n, 's', 2)} "
                            f"({fmt(gain * 100)} % faster)", "10–30 % faster with it",
                            0.10 <= gain <= 0.30 if _by(pl, "claw-nodetect") and _by(pl, "claw") else None,
                            nd.reason() if not nd.present else "no loads without the detector"))
    out.checks.append(Check("CLAW without detector vs Cubic", f"{fmt(n, 's', 2)} vs {fmt(c, 's', 2)}", "within ±15 %",
                            abs(n / c - 1) <= 0.15 if _by(pl, "claw-nodetect") and _by(pl, "cubic") else None,
                            nd.reason() if not nd.present else "no loads without the detector"))
    # What the overload does at the wired bottleneck, by each scheme's own counters: the
    # retransmissions and the RTOs (the server namespace's TcpExtTCPTimeouts over each load).
    counters: dict[str, dict[str, float]] = {}
    for scheme in ("claw", "claw-nodetect", "cubic"):
        rows = [r for r in loads if r.scheme == scheme and r.ok]
        timeouts = [float(_netstat(r).get("TcpExtTCPTimeouts", 0)) for r in rows]
        counters[scheme] = {"retrans_per_load": mean([tcp_stats(r).get("retrans", float("nan")) for r in rows]),
                            "rtos_per_load": mean(timeouts)}
    out.metrics["counters"] = counters
    if _by(pl, "claw-nodetect") and not 0.10 <= gain <= 0.30:
        nd_c, k_c = counters["claw-nodetect"], counters["claw"]
        out.checks[-2].cause = (f"without the detector the sender overloads the wired link as the paper says "
                               f"({fmt(nd_c['retrans_per_load'])} retransmissions a load vs {fmt(k_c['retrans_per_load'])} "
                               f"with it, {fmt(counters['cubic']['retrans_per_load'])} for Cubic), but with "
                               f"{fmt(nd_c['rtos_per_load'], digits=1)} RTOs a load: SACK/RACK recovery keeps the "
                               f"bottleneck busy, so the overload costs no PLT; the paper's penalty came with RTOs")
    _bar_figure(ctx, pl, "PLT behind a wireline bottleneck")
    out.testbed = f"CLAW {fmt(k, 's', 2)}, without detector {fmt(n, 's', 2)}, Cubic {fmt(c, 's', 2)}"
    return out


def claw_pages(ctx: RowContext) -> Outcome:
    """CLAW-7: CLAW's gain over Cubic across pages; CQIC second."""
    from clawbed.replay import pages as page_defs

    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    names = sorted({k[1] for k in pl})
    red, cq, order = {}, {}, {}
    for pg in names:
        c, k, q = mean(_by(pl, "cubic", page=pg)), mean(_by(pl, "claw", page=pg)), mean(_by(pl, "cqic", page=pg))
        red[pg] = 1 - k / c
        cq[pg] = q / k
        order[pg] = k < q < c
    vals = [v for v in red.values() if not np.isnan(v)]
    out.checks.append(Check("CLAW-vs-Cubic reduction per page (min–max)",
                            f"{fmt(min(vals, default=np.nan) * 100)}–{fmt(max(vals, default=np.nan) * 100)} %",
                            "within 20–55 % (paper 27–48 %)", all(0.20 <= v <= 0.55 for v in vals) if vals else None,
                            cause=gain_cause(loads)))
    sizes = [page_defs.NAMED_PAGES[pg].total_bytes for pg in red]
    rho = spearman(sizes, list(red.values()))
    out.checks.append(Check("rank correlation of the reduction with page size", f"{rho:.2f}", "> 0",
                            rho > 0 if not np.isnan(rho) else None, "fewer than 3 pages"))
    cqm = mean([v for v in cq.values() if not np.isnan(v)])
    out.checks.append(Check("CQIC / CLAW PLT", f"{cqm:.2f}", "1.2–1.8 (paper ≈ 1.5)", 1.2 <= cqm <= 1.8 if not np.isnan(cqm) else None,
                            cause=gain_cause(loads, "claw", "cqic")))
    out.checks.append(Check("CLAW < CQIC < Cubic on every page", f"{sum(order.values())}/{len(order)}", "all", all(order.values())
                            if order else None))
    out.metrics = {"reduction": red, "cqic_over_claw": cq}
    _bar_figure(ctx, pl, "PLT per page and scheme")
    out.testbed = ", ".join(f"{pg} {fmt(v * 100)} %" for pg, v in red.items()) + f"; CQIC/CLAW {cqm:.2f}"
    return out


def claw_load(ctx: RowContext) -> Outcome:
    """CLAW-8: idle vs busy cell."""
    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    ratio = {}
    for s in ("cubic", "cqic", "claw"):
        i, b = mean(_by(pl, s, trace="idle-cell")), mean(_by(pl, s, trace="busy-cell"))
        ratio[s] = b / i
    bands = {"cqic": (1.8, 9.9), "cubic": (1.2, 1.8), "claw": (1.5, 2.1)}
    for s, (lo, hi) in bands.items():
        out.checks.append(Check(f"{s}: busy / idle PLT", f"{ratio[s]:.2f}", f"{lo}–{hi if hi < 9 else '∞'}",
                                lo <= ratio[s] <= hi if not np.isnan(ratio[s]) else None))
    red = 1 - mean(_by(pl, "claw", trace="busy-cell")) / mean(_by(pl, "cubic", trace="busy-cell"))
    out.checks.append(Check("busy: CLAW vs Cubic", fmt(red * 100, "%"), "45–70 % (paper 59 %)",
                            0.45 <= red <= 0.70 if not np.isnan(red) else None, cause=gain_cause(loads, trace="busy-cell")))
    out.metrics = {"busy_over_idle": ratio, "busy_reduction": red}
    _bar_figure(ctx, pl, "PLT on the idle and the busy cell")
    out.testbed = ", ".join(f"{s} busy/idle {v:.2f}" for s, v in ratio.items()) + f"; busy CLAW vs Cubic {fmt(red * 100)} %"
    return out


def claw_channels(ctx: RowContext) -> Outcome:
    """CLAW-9: channel quality (SINR), mobility, scheduler."""
    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    traces = sorted({k[0] for k in pl})
    reds = {}
    for t in traces:
        c, k = mean(_by(pl, "cubic", trace=t)), mean(_by(pl, "claw", trace=t))
        reds[t] = 1 - k / c
    slower = {s: mean(_by(pl, s, trace="low-sinr")) - mean(_by(pl, s, trace="high-sinr")) for s in ("cubic", "cqic", "claw")}
    if all(not np.isnan(v) for v in slower.values()):
        out.checks.append(Check("5 dB slower than 12 dB for every scheme", ", ".join(f"{s} +{v:.2f} s" for s, v in slower.items()),
                                "all > 0", all(v > 0 for v in slower.values())))
        out.checks.append(Check("CLAW's increase the smallest", min(slower, key=lambda s: slower[s]), "claw",
                                min(slower, key=lambda s: slower[s]) == "claw"))
    vals = [v for v in reds.values() if not np.isnan(v)]
    out.checks.append(Check("CLAW vs Cubic in every condition", ", ".join(f"{t.removeprefix('synth:')} {v * 100:.0f} %"
                                                                          for t, v in reds.items()),
                            "−30 % to −45 % (proposed)", all(0.30 <= v <= 0.45 for v in vals) if vals else None,
                            cause=gain_cause(loads)))
    cat = presence("ue-category")
    out.checks.append(Check("UE category 4 vs 9", "–", "gain ~35 % on both", None, cat.reason() if not cat.present else "pending"))
    out.metrics = {"reduction": reds, "low_minus_high_s": slower}
    _bar_figure(ctx, pl, "PLT per channel and scheme")
    out.testbed = ", ".join(f"{t.removeprefix('synth:')} {v * 100:.0f} %" for t, v in reds.items())
    return out


def claw_http(ctx: RowContext) -> Outcome:
    """CLAW-10: HTTP/2 vs HTTP/1.1 per scheme."""
    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    gain = {}
    for s in sorted({k[3] for k in pl}):
        h2, h1 = mean(_by(pl, s, cond="h2")), mean(_by(pl, s, cond="h1"))
        gain[s] = 1 - h2 / h1
    out.checks.append(Check("H2 ≤ H1.1 for every scheme", ", ".join(f"{s} {v * 100:.0f} %" for s, v in gain.items()), "all ≥ 0",
                            all(v >= 0 for v in gain.values()) if gain else None))
    if "cubic" in gain:
        out.checks.append(Check("Cubic's H2 gain", fmt(gain["cubic"] * 100, "%"), "≤ 15 % (paper ≈ 7 %)", gain["cubic"] <= 0.15))
    if "claw" in gain:
        out.checks.append(Check("CLAW's H2 gain", fmt(gain["claw"] * 100, "%"), "≥ 25 % (paper ≈ 39 %)", gain["claw"] >= 0.25))
    r2 = 1 - mean(_by(pl, "claw", cond="h2")) / mean(_by(pl, "cubic", cond="h2"))
    r1 = 1 - mean(_by(pl, "claw", cond="h1")) / mean(_by(pl, "cubic", cond="h1"))
    out.checks.append(Check("CLAW-vs-Cubic reduction larger on H2 than on H1.1", f"{fmt(r2 * 100)} % vs {fmt(r1 * 100)} %",
                            "H2 > H1.1 (paper 46 % vs 18 %)", r2 > r1 if not (np.isnan(r1) or np.isnan(r2)) else None,
                            cause=gain_cause(loads, cond="/h2/")))
    out.metrics = {"h2_gain": gain, "reduction_h2": r2, "reduction_h1": r1}
    _bar_figure(ctx, pl, "PLT over HTTP/2 and HTTP/1.1")
    out.testbed = (", ".join(f"{s} H2 gain {v * 100:.0f} %" for s, v in gain.items())
                   + f"; CLAW vs Cubic H2 {fmt(r2 * 100)} %, H1.1 {fmt(r1 * 100)} %")
    return out


def claw_neighbours(ctx: RowContext) -> Outcome:
    """CLAW-11: a neighbour's scheme and a crowded cell."""
    out = ctx.outcome
    loads, pl = _claw_run(ctx)
    bc, bk = med(_by(pl, "cubic", cond="beside-cubic")), med(_by(pl, "cubic", cond="beside-claw"))
    change = bk / bc - 1
    out.checks.append(Check("Cubic's median PLT beside CLAW vs beside Cubic", fmt(change * 100, "%", 1), "≤ 10 % change",
                            abs(change) <= 0.10 if not np.isnan(change) else None))
    ac, ak = mean(_by(pl, "cubic", cond="all-cubic")), mean(_by(pl, "claw", cond="all-claw"))
    out.checks.append(Check("crowded cell: CLAW median PLT < Cubic's", f"{fmt(ak, 's', 2)} vs {fmt(ac, 's', 2)}", "CLAW < Cubic",
                            ak < ac if not (np.isnan(ac) or np.isnan(ak)) else None, "the crowded-cell matrix is full-profile only"))
    out.metrics = {"cubic_beside_cubic_s": bc, "cubic_beside_claw_s": bk}
    _bar_figure(ctx, pl, "PLT beside another UE")
    out.testbed = f"Cubic beside Cubic {fmt(bc, 's', 2)}, beside CLAW {fmt(bk, 's', 2)} ({fmt(change * 100, '%', 1)})"
    return out


def not_written(ctx: RowContext) -> Outcome:
    """A row whose experiment needs a mechanism's interface to be settled first (see its ``needs``)."""
    ctx.outcome.checks.append(Check("experiment", "–", ctx.row.criterion, None, "experiment pending its mechanism's interface"))
    return ctx.outcome


EXPERIMENTS: dict[str, Callable[[RowContext], Outcome]] = {
    "spdy_h2_vs_h1": spdy_h2_vs_h1, "spdy_page50": spdy_page50, "spdy_3g_runs": spdy_3g_runs,
    "claw_loss_plt": claw_loss_plt, "claw_idle": claw_idle, "claw_image": claw_image, "claw_wireline": claw_wireline,
    "claw_pages": claw_pages, "claw_load": claw_load, "claw_channels": claw_channels, "claw_http": claw_http,
    "claw_neighbours": claw_neighbours, "not_written": not_written,
}
