"""The rows that are page loads: each writes an orchestrator suite spec (``suite.yaml`` in the
row's directory), runs it with the suites' machinery (``run_suite``: one replay per scenario,
nginx, the real loader, every load in the result store under suite ``fidelity-<row>`` and the
fidelity run's name as the sweep) and scores the loads: PLTs from the store, TCP samples and
ground truth from each load's directory.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import yaml

from clawbed.orchestrator.analyze import mean_airtime
from clawbed.orchestrator.fidelity.harness import RowContext, constant_trace, fmt, rate_bps, save_figure, spearman
from clawbed.orchestrator.fidelity.mechanisms import presence
from clawbed.orchestrator.fidelity.results import Check, Outcome
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


def split_label(label: str) -> tuple[str, str, str]:
    """(trace, page, condition) of a scenario label ``trace/page/condition/s<seed>``."""
    trace, page, cond, _seed = label.rsplit("/", 3)
    return trace, page, cond


def plts(loads: list[LoadRow]) -> dict[tuple[str, str, str, str], list[float]]:
    """Successful PLTs (s) per (trace, page, condition, scheme)."""
    out: dict[tuple[str, str, str, str], list[float]] = {}
    for r in loads:
        if r.ok and r.plt_ms is not None:
            out.setdefault((*split_label(r.label), r.scheme), []).append(r.plt_ms / 1000)
    return out


def load_dir(r: LoadRow) -> Path:
    return Path(r.run_dir or "") / "loads" / f"{r.load_index:03d}-{r.scheme}"


def read_csv(path: Path) -> dict[str, list[str]]:
    if not path.is_file():
        return {}
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        return {}
    cols: dict[str, list[str]] = {h: [] for h in rows[0]}
    for row in rows[1:]:
        if len(row) == len(rows[0]):
            for h, v in zip(rows[0], row):
                cols[h].append(v)
    return cols


def _netstat(load: LoadRow | Path) -> dict[str, int]:
    """The server namespace's TCP counters over one load (``netstat.json`` in its directory),
    or empty."""
    try:
        data = json.loads(((load if isinstance(load, Path) else load_dir(load)) / "netstat.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def tcp_stats(r: LoadRow) -> dict[str, float]:
    """Of one load's server TCP samples: retransmissions (summed over flows), max and mean srtt,
    whether a flow entered Loss (an RTO: ca_state 4), slow start left without a loss."""
    cols = read_csv(load_dir(r) / "tcp.csv")
    if not cols:
        return {}
    per_flow: dict[str, dict[str, float]] = {}
    srtt = [float(x) for x in cols["srtt_ms"] if x]
    ss_exit_no_loss = False
    for flow, retr, sent, mss, ca, ssth in zip(cols["flow"], cols["retrans_total"], cols["bytes_sent"], cols["mss_bytes"],
                                               cols["ca_state"], cols["ssthresh_pkts"]):
        f = per_flow.setdefault(flow, {"retrans": 0.0, "sent": 0.0, "mss": 1448.0, "rto": 0.0})
        f["retrans"] = max(f["retrans"], float(retr or 0))
        f["sent"] = max(f["sent"], float(sent or 0))
        f["mss"] = float(mss or 1448)
        f["rto"] = max(f["rto"], 1.0 if ca == "4" else 0.0)
        if ssth and float(retr or 0) == 0:
            ss_exit_no_loss = True
    retrans = sum(f["retrans"] for f in per_flow.values())
    pkts = sum(f["sent"] / f["mss"] for f in per_flow.values())
    truth = read_csv(load_dir(r) / "truth.csv")
    drops = sum(float(x or 0) for x in truth.get("overflow_drops", []))
    return {"retrans": retrans, "loss_frac": retrans / max(pkts, 1), "srtt_max_ms": max(srtt, default=float("nan")),
            "srtt_mean_ms": float(np.mean(srtt)) if srtt else float("nan"),
            "rto": float(any(f["rto"] for f in per_flow.values())), "ss_exit_no_loss": float(ss_exit_no_loss),
            "overflow_drops": drops}


def mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else float("nan")


def med(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def profile_traces(ctx: RowContext, profiles: dict[str, dict[str, Any]]) -> dict[str, str]:
    """A constant-capacity trace file per profile (``rate``), beside the row's suite spec."""
    names = {}
    for name, prof in profiles.items():
        constant_trace(ctx.out / f"{name}.cbt", rate_bps(prof["rate"]), 600)
        names[name] = f"{name}.cbt"
    return names


def _idle_before_s(params: dict[str, Any], profile: dict[str, Any]) -> float:
    """The wait before each load of a profile: its own ``idle_before_s``, else the row's, else 0."""
    return float(profile.get("idle_before_s", params.get("idle_before_s", 0)) or 0)


def _rrc_note(params: dict[str, Any], profile: str = "3g") -> str:
    """How the 3G profile's radio ran: with the RRC model the row's profile names (``rrc``), else
    the emulator's default (LTE timers), which the note says."""
    p = presence("rrc-3g")
    if not p.present:
        return f"3G profile ran without the 3G RRC model: {p.reason()}"
    prof = params["profiles"].get(profile, {})
    idle_s = _idle_before_s(params, prof)
    idle = f", {idle_s:g} s idle before each load" if idle_s else ", loads back to back"
    if prof.get("rrc") is None:
        return f"3G profile ran with the emulator's default RRC model (lte), not umts: the row sets no rrc{idle}"
    return f"3G profile ran with rrc {_policy_name(prof['rrc'])}{idle}"


def _policy_name(choice: Any) -> str:
    return str(choice["kind"] if isinstance(choice, dict) else choice)


# -- SPDY rows --------------------------------------------------------------------------------------


def _h2_vs_h1_matrices(ctx: RowContext, pages: list[str], scheme: list[str]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    p = ctx.params
    traces = profile_traces(ctx, p["profiles"])
    matrices = []
    for name, prof in p["profiles"].items():
        # The radio keys only when the row sets them: the other rows' scenario ids stay.
        radio = {k: prof[k] for k in ("rrc", "stall") if prof.get(k) is not None}
        for key in ("keep_connections", "server_sysctls"):
            if prof.get(key, p.get(key)):
                radio[key] = prof.get(key, p.get(key))
        idle_s = _idle_before_s(p, prof)
        if idle_s:
            radio["idle_before_s"] = idle_s
        matrices.append({"name": name, "traces": [traces[name]], "pages": pages, "schemes": scheme,
                         "conditions": [{"name": f"{name}-h2", "http": "2", "core_rtt_ms": prof["core_rtt_ms"], **radio},
                                        {"name": f"{name}-h1", "http": "1.1", "core_rtt_ms": prof["core_rtt_ms"],
                                         **radio}]})
    return matrices, traces


def protocol_rto_cause(loads: list[LoadRow], profile: str) -> str:
    """What the server's TCP counters (``netstat.json`` of each load) say of one profile's
    H2 and H1.1 loads: timeouts, those undone as spurious, retransmitted segments. The SPDY
    paper put SPDY's lost advantage on 3G down to spurious timeouts of its one connection after
    radio promotions (§5.5–5.7); without them there is nothing to take H2's lead away."""
    per: dict[str, dict[str, int]] = {}
    for r in loads:
        if not r.ok:
            continue
        cond = split_label(r.label)[2]
        if not cond.startswith(f"{profile}-"):
            continue
        proto = "H2" if cond.endswith("-h2") else "H1.1"
        counts = per.setdefault(proto, {"loads": 0, "read": 0, "rto": 0, "spurious": 0, "retrans": 0})
        counts["loads"] += 1
        stats = _netstat(r)
        if not stats:
            continue
        counts["read"] += 1
        counts["rto"] += stats.get("TcpExtTCPTimeouts", 0)
        counts["spurious"] += stats.get("TcpExtTCPSpuriousRTOs", 0) + stats.get("TcpExtTCPDSACKUndo", 0)
        counts["retrans"] += stats.get("TcpRetransSegs", 0)
    if not any(c["read"] for c in per.values()):
        return ""
    parts = [f"{proto}: {c['rto']} timeout(s) ({c['spurious']} undone as spurious) and {c['retrans']} "
             f"retransmitted segment(s) over {c['read']} load(s)" for proto, c in sorted(per.items()) if c["read"]]
    h2 = per.get("H2", {})
    verdict = (" — H2's one connection never timed out, so the spurious timeouts after promotions that cost "
               "the paper's SPDY its lead (SPDY-3) did not happen here" if h2.get("read") and h2.get("rto") == 0 else "")
    return f"server TCP counters on the {profile} profile: " + "; ".join(parts) + verdict


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


#: truth.csv ``rrc`` states of a demoted UE (nothing can be scheduled until a promotion).
_DEMOTED = ("idle", "fach")
#: tcp_info ca_state TCP_CA_Loss: the flow's retransmission timer fired.
_CA_LOSS = "4"
#: An RTO at most this long after the promotion ended is still the held first flight's, s.
_AFTER_PROMOTION_S = 1.0
#: The server's namespace counters kept per load (netstat.json) that tell timeouts and their undoing.
_RTO_COUNTERS = ("TcpExtTCPTimeouts", "TcpExtTCPSpuriousRTOs", "TcpExtTCPLossUndo", "TcpExtTCPDSACKUndo",
                 "TcpExtTCPDSACKRecv", "TcpExtTCPSynRetrans", "TcpRetransSegs", "TcpExtTCPLossProbes")
#: Linux's initial window, segments: a connection that sent more carried part of the page.
_INITIAL_WINDOW_PKTS = 10
#: The SPDY paper counts retransmissions per run of 20 page loads.
_LOADS_PER_RUN = 20


def _num(text: str) -> float:
    return float(text) if text else float("nan")


def _spdy_load(r: LoadRow) -> dict[str, Any]:
    """One load's radio and TCP facts from its directory: per server connection the mean and max
    cwnd (segments), retransmissions and its first RTO (ca_state Loss: when, ssthresh before and
    after), whether it was kept from an earlier load (sampled before this one's loader started)
    and then its cwnd when it first sent in this load; the UE's RRC state at the load's start and
    its promotion (truth.csv ``rrc``), the packets the emulator dropped, and the server
    namespace's timeout counters (netstat.json)."""
    d = load_dir(r)
    tcp, truth = read_csv(d / "tcp.csv"), read_csv(d / "truth.csv")
    rows_of: dict[str, list[int]] = {}
    for i, flow in enumerate(tcp.get("flow", [])):
        rows_of.setdefault(flow, []).append(i)
    flows: list[dict[str, Any]] = []
    for flow, rows in rows_of.items():
        cwnd = [_num(tcp["cwnd_pkts"][i]) for i in rows]
        loss = [k for k, i in enumerate(rows) if tcp["ca_state"][i] == _CA_LOSS]
        rto = None
        if loss:
            k = loss[0]
            after = [i for i in rows[k:] if tcp["ca_state"][i] != _CA_LOSS]
            # An empty ssthresh is the kernel's "infinite" (not set yet, or restored by an undo).
            rto = {"t_unix_s": _num(tcp["t_unix_s"][rows[k]]),
                   "ssthresh_before": _num(tcp["ssthresh_pkts"][rows[k - 1]]) if k else float("nan"),
                   "ssthresh_after": _num(tcp["ssthresh_pkts"][after[0]]) if after else float("nan"),
                   "left_loss": bool(after)}
        sent = max((_num(tcp["bytes_sent"][i]) for i in rows), default=0.0)
        mss = _num(tcp["mss_bytes"][rows[-1]]) if tcp["mss_bytes"][rows[-1]] else 1448.0
        kept = r.t_start_unix_s is not None and _num(tcp["t_unix_s"][rows[0]]) <= r.t_start_unix_s
        sent_before = _num(tcp["bytes_sent"][rows[0]])
        # The first sample after it sent again: within the first RTT, before any ACK grew it.
        resumed = next((i for i in rows if _num(tcp["bytes_sent"][i]) > sent_before), None)
        flows.append({"flow": flow, "cwnd_mean_pkts": mean([c for c in cwnd if not np.isnan(c)]),
                      "cwnd_max_pkts": max((c for c in cwnd if not np.isnan(c)), default=float("nan")),
                      # Chromium opens spare connections it never uses (< 1 KB sent): not the page's.
                      "carried_page": sent > _INITIAL_WINDOW_PKTS * mss, "sent_bytes": sent, "kept": kept,
                      "resumed_cwnd_pkts": _num(tcp["cwnd_pkts"][resumed]) if kept and resumed is not None
                      else float("nan"),
                      # What the kernel knew when the idle began: its RTO is about srtt + 4·rttvar.
                      "srtt_before_ms": _num(tcp["srtt_ms"][rows[0]]) if kept else float("nan"),
                      "rttvar_before_ms": _num(tcp["rttvar_ms"][rows[0]]) if kept else float("nan"),
                      "retrans": max((_num(tcp["retrans_total"][i]) for i in rows), default=0.0), "rto": rto})
    rrc = truth.get("rrc", [])
    t = [_num(x) for x in truth.get("t_unix_s", [])]
    promoting = next((i for i, v in enumerate(rrc) if v == "promoting"), None)
    # Promoted: the start of the connected stretch in which the UE first received data (a UE
    # that fell back and was promoted again counts both promotions).
    first_data = next((i for i, b in enumerate(truth.get("delivered_bytes", [])) if _num(b) > 0), None)
    connected = None
    if promoting is not None and first_data is not None and first_data > promoting and rrc[first_data] == "connected":
        connected = first_data
        while connected > promoting and rrc[connected - 1] == "connected":
            connected -= 1
    promotions = sum(1 for i in range(len(rrc)) if rrc[i] == "promoting" and (i == 0 or rrc[i - 1] != "promoting")
                     and (connected is None or i < connected))
    drops = sum(_num(x) for x in truth.get("overflow_drops", []) + truth.get("rlc_loss_drops", []) if x)
    counters = _netstat(d) or None
    return {"flows": flows, "rrc_at_start": rrc[0] if rrc else "", "demoted": bool(rrc) and rrc[0] in _DEMOTED,
            "kept": any(f["kept"] and not np.isnan(f["resumed_cwnd_pkts"]) for f in flows),
            "t_promoted_unix_s": t[connected] if connected is not None else None,
            "promotion_ms": (t[connected] - t[promoting]) * 1000 if connected is not None and promoting is not None
            else None, "promotions": promotions, "emulator_drops": drops, "counters": counters}


def _data_retransmissions(load: dict[str, Any]) -> float:
    """Segments of data the server retransmitted in a load: the namespace's RetransSegs less its
    SYN-ACK retransmissions (netstat.json; a held SYN-ACK is the handshake's, not the page's),
    else (no counters) the connections' tcp_info totals, which include them."""
    c = load["counters"]
    if c is not None:
        return float(c.get("TcpRetransSegs", 0) - c.get("TcpExtTCPSynRetrans", 0))
    return float(sum(f["retrans"] for f in load["flows"]))


def _post_demotion_rtos(load: dict[str, Any]) -> list[dict[str, Any]]:
    """The RTOs of a load that started demoted whose timer fired while the promotion held the
    flight, or just after it."""
    if not load["demoted"] or load["t_promoted_unix_s"] is None:
        return []
    limit = load["t_promoted_unix_s"] + _AFTER_PROMOTION_S
    return [f["rto"] for f in load["flows"] if f["rto"] is not None and f["rto"]["t_unix_s"] <= limit]


def _spurious(load: dict[str, Any]) -> tuple[bool, str]:
    """Whether a load's RTOs were spurious, and by what evidence: the kernel undid them (F-RTO or
    DSACK: TCPSpuriousRTOs, TCPLossUndo, TCPDSACKUndo in netstat.json), else the ground truth: the
    emulator dropped no packet of the load (the RRC hold delays, never drops), so nothing it
    retransmitted had been lost."""
    c = load["counters"] or {}
    undone = sum(c.get(k, 0) for k in ("TcpExtTCPSpuriousRTOs", "TcpExtTCPLossUndo", "TcpExtTCPDSACKUndo"))
    if undone:
        return True, "kernel undo (F-RTO/DSACK)"
    if load["emulator_drops"] == 0:
        return True, "no emulator drop"
    return False, ""


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


def _spdy2_checks(ctx: RowContext, summary: dict[str, dict[str, dict[str, Any]]]) -> None:
    """SPDY-2 (Table 2): PLT calibration, H2 vs H1.1 per scheme, cwnd per connection."""
    p, out = ctx.params, ctx.outcome
    g3 = summary.get("3g", {})
    note = _rrc_note(p)
    plts_s = [v["plt_mean_s"] for v in g3.values() if not np.isnan(v["plt_mean_s"])]
    overall = mean(plts_s)
    out.checks.append(Check("3G: mean PLT (calibration)", fmt(overall, "s", 2), "~9–10 s (accept 8–11.5 s, proposed)",
                            8.0 <= overall <= 11.5 if plts_s else None, "no successful 3G load"))
    line = []
    for scheme in p["schemes"]:
        h2, h1 = g3.get(f"{scheme}-h2"), g3.get(f"{scheme}-h1")
        if not h2 or not h1:
            out.checks.append(Check(f"{scheme}: H2 vs H1.1 mean PLT", "–", p["target"][scheme], None,
                                    f"no successful loads of both protocols ({note})"))
            continue
        gain = 1 - h2["plt_mean_s"] / h1["plt_mean_s"]
        ok = 0.0 <= gain <= 0.15 if scheme == "cubic" else abs(gain) <= 0.05
        out.checks.append(Check(f"{scheme}: H2 vs H1.1 mean PLT", f"{fmt(h2['plt_mean_s'], 's', 2)} vs "
                                f"{fmt(h1['plt_mean_s'], 's', 2)} (H2 {fmt(gain * 100, '% faster', 1)})",
                                p["target"][scheme], ok if not np.isnan(gain) else None, note))
        factor = 4.0 if scheme == "cubic" else 2.0
        ratio = h2["cwnd_mean_pkts"] / h1["cwnd_mean_pkts"]
        out.checks.append(Check(f"{scheme}: H2 mean cwnd per connection / H1.1's",  # connections that carried the page
                                f"{fmt(h2['cwnd_mean_pkts'], '', 1)} / {fmt(h1['cwnd_mean_pkts'], '', 1)} segments "
                                f"(×{ratio:.2f})", f"≥ {factor:g}× (paper ×{52.11 / 10.59 if scheme == 'cubic' else 24.16 / 10.45:.1f})",
                                ratio >= factor if not np.isnan(ratio) else None, "no cwnd samples"))
        out.checks.append(Check(f"{scheme}: H1.1 per-connection max cwnd", fmt(h1["cwnd_max_pkts"], "segments"),
                                "~20–25 (paper 22; accept 18–27, proposed)",
                                18 <= h1["cwnd_max_pkts"] <= 27 if not np.isnan(h1["cwnd_max_pkts"]) else None,
                                "no cwnd samples", cause=_connections_cause(h2, h1)))
        out.checks[-2].cause = out.checks[-1].cause
        line.append(f"{scheme}: H2 {fmt(h2['plt_mean_s'], 's', 2)} vs H1.1 {fmt(h1['plt_mean_s'], 's', 2)}, cwnd "
                    f"{fmt(h2['cwnd_mean_pkts'], '', 1)} vs {fmt(h1['cwnd_mean_pkts'], '', 1)}, retrans/20 loads "
                    f"{fmt(h2['retrans_per_20_loads'], '', 1)} vs {fmt(h1['retrans_per_20_loads'], '', 1)}")
    out.testbed = "; ".join(line)
    out.reason = note


#: SPDY §5.6.2: HTTP kept this many connections open at once on average over a page load.
_PAPER_HTTP_CONNECTIONS = 42.6


def _connections_cause(h2: dict[str, Any], h1: dict[str, Any]) -> str:
    """How the page's bytes were spread over connections (the server's TCP samples): the
    window a connection reaches grows with what it carries."""
    if np.isnan(h1.get("bytes_per_connection", np.nan)):
        return ""
    return (f"HTTP/1.1 carried each page over {h1['connections_per_load']:.1f} connection(s), "
            f"{h1['bytes_per_connection'] / 1024:,.0f} KB each, HTTP/2 over {h2['connections_per_load']:.1f} "
            f"({h2['bytes_per_connection'] / 1024:,.0f} KB each); the paper's HTTP kept {_PAPER_HTTP_CONNECTIONS:g} "
            f"connections open at once (85 domains at most), each carrying too little to grow its window far")


def _spdy3_checks(ctx: RowContext, summary: dict[str, dict[str, dict[str, Any]]],
                  loads: list[tuple[tuple[str, str, str], dict[str, Any]]]) -> None:
    """SPDY-3: post-demotion first flights and their RTOs on 3G (on connections kept across the
    idle, when the row keeps them); a short idle's restart at IW; retransmissions 3G vs LTE."""
    p, out = ctx.params, ctx.outcome
    g3 = [x for (prof, _, _), x in loads if prof == "3g"]
    kept = [x for x in g3 if x["kept"]]
    # With kept connections the paper's case is the loads on them; a load's first, fresh
    # connections (each replay's first load) take the promotion in their handshake.
    pool = kept or g3
    demoted = [x for x in pool if x["demoted"]]
    promoted = [x for x in demoted if x["t_promoted_unix_s"] is not None]
    with_rto = [x for x in promoted if _post_demotion_rtos(x)]
    spurious = [(x, why) for x in with_rto for ok, why in [_spurious(x)] if ok]
    reduced = [x for x in with_rto if any(not np.isnan(r["ssthresh_after"]) and
                                          (np.isnan(r["ssthresh_before"]) or r["ssthresh_after"] < r["ssthresh_before"])
                                          for r in _post_demotion_rtos(x))]
    evidence = ("evidence: tcp.csv ca_state 4 (Loss: the retransmission timer fired) per server connection, timed "
                "against truth.csv rrc (promoting → connected); spurious by netstat.json TcpExtTCPSpuriousRTOs / "
                "TCPLossUndo / TCPDSACKUndo, else by no emulator drop in the load")
    promo = mean([x["promotion_ms"] for x in promoted])
    # The handshake's own timeouts (a held SYN-ACK) are not the first flight's, but said beside it.
    handshake = {k: sum((x["counters"] or {}).get(k, 0) for x in promoted)
                 for k in ("TcpExtTCPSynRetrans", "TcpExtTCPTimeouts")}
    states = ", ".join(f"{n} in {s}" for s, n in sorted(Counter(x["rrc_at_start"] for x in demoted).items()))
    value = (f"{len(with_rto)} of {len(promoted)} promoted loads{' on kept connections' if kept else ''} (of "
             f"{len(g3)}; {len(kept)} on kept connections; {len(demoted)} started demoted{': ' + states if states else ''}"
             f", promotion {fmt(promo, 'ms')}; server namespace over those loads: "
             f"{handshake['TcpExtTCPTimeouts']} timeouts, {handshake['TcpExtTCPSynRetrans']} SYN-ACK retransmissions)")
    name = "3G: post-demotion first flights ending in a spurious RTO"
    if not g3:
        out.checks.append(Check(name, "–", "most (> 50 %)", None, "no successful 3G load"))
    elif not promoted:
        out.checks.append(Check(name, value, "most (> 50 %)", None,
                                "no load started with the UE demoted and promoted (truth.csv rrc): the idle before "
                                "each load was shorter than the demotion timers, or the UE sent meanwhile"))
    elif not with_rto and not kept:
        # Zero is not evidence against the paper: its case cannot arise with fresh connections.
        out.checks.append(Check(name, value, "most (> 50 %)", None,
                                "no connection outlives the idle: the loader opens fresh connections for every load "
                                "(a new browser or h2 client; the row sets no keep_connections), so the promotion "
                                "holds the client's SYN (the handshake takes the promotion) and the server's first "
                                "flight leaves after it, its RTO never set by an earlier active period; " + evidence))
    elif not with_rto:
        in_idle = [x for x in promoted if x["rrc_at_start"] == "idle"]
        causes = [f"{len(in_idle)} of {len(promoted)} promotions started in IDLE, where the request itself waits for "
                  f"the promotion and the server holds nothing unacknowledged meanwhile (only from FACH does a small "
                  f"request pass and the response's flight wait)"] if in_idle else []
        causes.append(_tail_probe_cause([x for x in promoted if x not in in_idle], [], promo))
        out.checks.append(Check(name, value, "most (> 50 %)", False,
                                cause="; ".join(c for c in causes if c) + "; " + evidence))
    else:
        frac = len(with_rto) / len(promoted)
        out.checks.append(Check(name, f"{value}; {len(spurious)} spurious "
                                f"({', '.join(sorted({w for _, w in spurious})) or '–'})",
                                "most (> 50 %), shown spurious", frac > 0.5 and len(spurious) == len(with_rto), evidence,
                                cause=_tail_probe_cause(promoted, with_rto, promo)))
        out.checks.append(Check("3G: ssthresh reduced by those RTOs", f"{len(reduced)} of {len(with_rto)}", "most",
                                len(reduced) > len(with_rto) / 2,
                                "modern Linux undoes a spurious RTO's reduction (F-RTO, DSACK), 2012's did not: "
                                "ssthresh is back where it was once the undo is taken"))
    _spdy3_short_idle_check(ctx, [x for (prof, _, _), x in loads if prof == SHORT_IDLE_PROFILE])
    r3 = mean([v["retrans_per_20_loads"] for v in summary.get("3g", {}).values()])
    rl = mean([v["retrans_per_20_loads"] for v in summary.get("lte", {}).values()])
    ratio = r3 / rl if rl else float("nan")
    if summary.get("3g") and summary.get("lte"):
        # The emulator's own drops (residual RLC loss, overflow) say how many were real losses.
        drops = {prof: sum(v["emulator_drops"] for v in summary[prof].values()) for prof in ("3g", "lte")}
        out.checks.append(Check("data retransmissions per 20 loads: 3G / LTE", f"{fmt(r3, '', 1)} / {fmt(rl, '', 1)}"
                                f" (×{fmt(ratio, '', 1)}; packets the emulator dropped: 3G {drops['3g']:g}, "
                                f"LTE {drops['lte']:g})", "LTE > 0 and ~10× fewer (accept 5–20×, proposed; paper "
                                "117.3 / 8.9)", rl > 0 and 5 <= ratio <= 20))
    else:
        out.checks.append(Check("data retransmissions per 20 loads: 3G / LTE", "–", "LTE ~10× fewer, > 0", None,
                                "the row ran no " + ("LTE" if summary.get("3g") else "3G") + " profile"))
    out.testbed = "; ".join(f"{prof} {k}: retrans/20 loads {fmt(v['retrans_per_20_loads'], '', 1)}, post-demotion "
                            f"RTO loads {v['post_demotion_rto_loads']}/{v['demoted_loads']}"
                            for prof, per in summary.items() for k, v in per.items())
    out.reason = _rrc_note(p)


def _kept_rto_ms(load: dict[str, Any]) -> tuple[float, float]:
    """(srtt, srtt + 4·rttvar) of the kept connection that carried the most, when the idle began, ms."""
    kept = [f for f in load["flows"] if f["kept"] and not np.isnan(f["srtt_before_ms"])]
    if not kept:
        return float("nan"), float("nan")
    f = max(kept, key=lambda f: f["sent_bytes"])
    return f["srtt_before_ms"], f["srtt_before_ms"] + 4 * f["rttvar_before_ms"]


def _tail_probe_cause(promoted: list[dict[str, Any]], with_rto: list[dict[str, Any]], promotion_ms: float) -> str:
    """Why a held first flight did not time out: Linux sends a tail-loss probe first (RACK-TLP:
    at min(2·srtt, RTO)) and re-arms the RTO after it, so only an RTO well below the hold fires;
    said with the probes counted (netstat.json) and each connection's srtt when the idle began."""
    without = [x for x in promoted if x not in with_rto]
    if not without:
        return ""
    probes = sum(1 for x in without if (x["counters"] or {}).get("TcpExtTCPLossProbes", 0))
    srtt = [_kept_rto_ms(x) for x in without]
    fired = [_kept_rto_ms(x)[0] for x in with_rto]
    known = [s for s in srtt if not np.isnan(s[0])]
    if not known:
        return f"{probes} of the {len(without)} promoted loads without an RTO sent a tail-loss probe first"
    return (f"{probes} of the {len(without)} promoted loads without an RTO sent a tail-loss probe first "
            f"(TcpExtTCPLossProbes: Linux's TLP fires at min(2·srtt, RTO) and re-arms the RTO after the probe); "
            f"their srtt when the idle began {min(s for s, _ in known):,.0f}–{max(s for s, _ in known):,.0f} ms "
            f"(RTO ≈ {min(r for _, r in known):,.0f}–{max(r for _, r in known):,.0f} ms, the previous load's queue "
            f"still in it) against a {fmt(promotion_ms, 'ms')} hold"
            + (f"; the RTOs fired at srtt {', '.join(f'{s:,.0f}' for s in sorted(fired) if not np.isnan(s))} ms"
               if fired else ""))


#: SPDY-3's profile whose idle is shorter than the 3G DCH tail.
SHORT_IDLE_PROFILE = "3g-short"


def _spdy3_short_idle_check(ctx: RowContext, loads: list[dict[str, Any]]) -> None:
    """SPDY-3: after an idle shorter than the demotion timer, a kept connection restarts at the
    initial window (slow start after idle, when the server has it) and times nothing out."""
    p, out = ctx.params, ctx.outcome
    name = "3G: idles shorter than the demotion timer give cwnd = IW, no RTO"
    prof = p["profiles"].get(SHORT_IDLE_PROFILE)
    kept = [x for x in loads if x["kept"]]
    if prof is None or not kept:
        out.checks.append(Check(name, "–", f"cwnd = IW {_INITIAL_WINDOW_PKTS}, no RTO", None,
                                f"the row ran no '{SHORT_IDLE_PROFILE}' profile with connections kept across the idle"
                                if prof is None or not loads else "no load of the short-idle profile ran on a kept "
                                "connection (keep_connections off, or each replay's first load only)"))
        return
    idle_s = _idle_before_s(p, prof)
    ssai = {**p.get("server_sysctls", {}), **prof.get("server_sysctls", {})}.get("net.ipv4.tcp_slow_start_after_idle")
    cwnds = sorted(f["resumed_cwnd_pkts"] for x in kept for f in x["flows"]
                   if f["kept"] and not np.isnan(f["resumed_cwnd_pkts"]))
    rtos = sum(1 for x in kept if any(f["rto"] for f in x["flows"]))
    demoted = sum(1 for x in kept if x["demoted"])
    at_iw = sum(1 for c in cwnds if c <= _INITIAL_WINDOW_PKTS)
    setting = ssai if ssai is not None else "0 (the schemes' default, the CLAW paper's)"
    value = (f"{len(kept)} loads {idle_s:g} s after the last: cwnd when the kept connection sent again "
             f"{', '.join(f'{c:g}' for c in cwnds) or '–'} ({at_iw} at most IW); {rtos} with an RTO; "
             f"{demoted} started demoted; server tcp_slow_start_after_idle = {setting}")
    note = "cwnd from tcp.csv, the first sample after the kept connection sent again; RRC state from truth.csv"
    out.checks.append(Check(name, value, f"cwnd = IW {_INITIAL_WINDOW_PKTS}, no RTO",
                            bool(cwnds) and at_iw == len(cwnds) and rtos == 0 and demoted == 0, note))


# -- CLAW rows ---------------------------------------------------------------------------------


def _claw_run(ctx: RowContext) -> tuple[list[LoadRow], dict[tuple[str, str, str, str], list[float]]]:
    p = ctx.params
    # Schemes whose mechanism may be missing (vegas): in the matrices when this build has them.
    extra = [s for s in p.get("optional_schemes", []) if presence(s).present]
    matrices = [{**m, "schemes": list(dict.fromkeys([*m["schemes"], *extra]))} for m in p["matrices"]]
    loads = run_spec(ctx, matrices, loader=p["loader"], repetitions=p["repetitions"], synth_seconds=p.get("synth_seconds"),
                     load_timeout_s=p.get("load_timeout_s", 120), max_other_ues=p.get("max_other_ues"))
    return loads, plts(loads)


def _by(pl: dict[tuple[str, str, str, str], list[float]], scheme: str, trace: str | None = None, page: str | None = None,
        cond: str | None = None) -> list[float]:
    return [v for (t, pg, c, s), vs in pl.items() if s == scheme and (trace is None or t.endswith(trace))
            and (page is None or pg == page) and (cond is None or c == cond) for v in vs]


def airtime_of(loads: list[LoadRow], scheme: str, **where: str) -> dict[str, float] | None:
    """Mean airtime split of ``scheme``'s finished loads whose label contains each of ``where``'s
    values (:func:`clawbed.orchestrator.analyze.mean_airtime`)."""
    return mean_airtime(loads, scheme, lambda label: all(v in label for v in where.values()))


def gain_cause(loads: list[LoadRow], scheme: str = "claw", versus: str = "cubic", **where: str) -> str:
    """What the ground truth says about ``scheme``'s gain over ``versus``: how long ``versus``
    held data back while the UE's queue was empty (the most any sender could take off), and
    where the rest of its load went."""
    v, s = airtime_of(loads, versus, **where), airtime_of(loads, scheme, **where)
    if v is None or s is None:
        return ""
    bound = v["window_ms"] / v["plt_ms"] if v["plt_ms"] else float("nan")
    return (f"ground truth (clawbed analyze airtime), mean per load: {versus} held data back with the UE's "
            f"base-station queue empty for {v['window_ms']:.0f} ms of its {v['plt_ms']:.0f} ms PLT "
            f"({bound * 100:.0f} %, the most a faster sender could save), its data waited at the base station "
            f"{v['queued_ms']:.0f} ms and it had nothing to send {v['app_ms']:.0f} ms; {scheme}: held back "
            f"{s['window_ms']:.0f} ms, queued {s['queued_ms']:.0f} ms, nothing to send {s['app_ms']:.0f} ms "
            f"of {s['plt_ms']:.0f} ms")


def timeout_cause(loads: list[LoadRow], scheme: str = "cubic") -> str:
    """What the server's TCP counters and the emulator say of ``scheme``'s loads: how many timed
    out, how many retransmissions, and how many packets the cell dropped — the window collapses
    behind the paper's slow, erratic Cubic, or their absence."""
    mine = [r for r in loads if r.scheme == scheme and r.ok]
    counters = [c for c in (_netstat(r) for r in mine) if c]
    if not counters:
        return ""
    timed_out = sum(1 for c in counters if c.get("TcpExtTCPTimeouts", 0) > 0)
    timeouts = sum(c.get("TcpExtTCPTimeouts", 0) for c in counters)
    spurious = sum(c.get("TcpExtTCPSpuriousRTOs", 0) + c.get("TcpExtTCPDSACKUndo", 0) for c in counters)
    retrans = sum(c.get("TcpRetransSegs", 0) for c in counters)
    drops = sum(tcp_stats(r).get("overflow_drops", 0.0) for r in mine)
    return (f"server TCP counters: {timed_out} of {len(counters)} {scheme} loads timed out ({timeouts} timeout(s), "
            f"{spurious} undone as spurious), {retrans} retransmitted segment(s); the base station dropped "
            f"{drops:.0f} packet(s) of these loads. The paper's erratic Cubic needs timeouts or RTT surges: this "
            f"cell's stall process is off by default (no measured rate; emulator/policies.json)")


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
