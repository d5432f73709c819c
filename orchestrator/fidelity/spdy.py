"""The SPDY paper's page-load rows (SPDY-1/2/3/5), their parts: the network profiles and the
H2-vs-H1.1 matrices a row's suite runs, one load's radio and TCP facts (RRC promotion, cwnd per
connection, RTOs and their undoing), and the checks of SPDY-2 and SPDY-3 with the causes they
give. The rows themselves are in :mod:`.pageloads`.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from clawbed.orchestrator.fidelity.harness import RowContext, constant_trace, fmt, rate_bps
from clawbed.orchestrator.fidelity.loadfacts import _netstat, load_dir, mean, read_csv, split_label
from clawbed.orchestrator.fidelity.mechanisms import presence
from clawbed.orchestrator.fidelity.results import Check
from clawbed.orchestrator.store import LoadRow


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
