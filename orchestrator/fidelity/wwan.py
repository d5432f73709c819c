"""WWAN-1: on high-RTT WWAN links web browsing uses a small fraction of a link that a single
bulk TCP transfer uses well; on a dial-up link of similar rate but low RTT there is no such gap.

Three link profiles, each one emulated cell with one UE at a constant rate (the emulator's
``rate`` mode: the smallest capacity :func:`~.harness.constant_trace` can write is one 1.4 MHz
cell's at MCS 0, 152 kbit/s, above two of the three rates):

- ``gprs``: 39.6 kbit/s down (the paper's "3+1" phone), 13.2 kbit/s up (its one uplink
  timeslot: 39.6 / 3; derived, the paper gives no uplink rate);
- ``cdma1x``: 144 kbit/s down (the paper's handset), 144 kbit/s up (not in the paper; chosen
  equal, requests are a few hundred bytes);
- ``dialup``: 56 kbit/s down (V.90), 33.6 kbit/s up (V.90's upstream, from the standard, not
  the paper), core RTT 120 ms (the paper's 100–150 ms for 64-byte packets), no RRC, no stalls.

The WWAN profiles' high, bursty first-packet latency comes from the emulator's own mechanisms
(values in the row's ``params``):

- the core round trip, 400 ms: the 1 KB FTP times of Tables 2 and 10 (GPRS 1 KB at 13.2 kbit/s
  = 0.61 s, of which 0.20 s is transmission; 1x 0.49 s, of which 0.06 s) leave ≈ 0.4 s for one
  round trip on both links;
- channel access as the RRC policy ``lte`` without DRX: after ``tail_ms`` = 300 ms without
  traffic the UE is idle and the next packet, either way, waits for a promotion drawn from
  quartiles 150/300/600 ms. The tail is chosen below the core round trip (GPRS releases a
  downlink TBF once its buffer empties; the paper gives no timer), so every response of HTTP's
  stop-and-go exchange starts a new burst, and a small packet's round trip after idle pays two
  promotions (uplink access, then the downlink's): 470 ms + two draws puts the paper's "600 ms
  to 3 s" for the first packet of a burst (§2.2, §5: "WWAN links", GPRS and 1x alike; no
  distribution given) at about the 5th and 95th percentiles (683 ms and 3.2 s;
  ``tests/test_fidelity_wwan.py`` checks it);
- link-layer ARQ spikes as the stall process ``poisson``: 600 ms–3 s stalls (WWAN §4.4.2's ARQ
  jitter), one a minute on average (chosen rare: the paper's link was good, C/I > 15 dB, and
  gives no rate).

Measurements, per profile, all through the real parts (kernel TCP in namespaces, the emulator):

- single GETs of 1/5/10/50/100 KB (KB = 1000 bytes, as the paper's throughputs use): one fresh
  TCP connection each with the fidelity flow tool (:mod:`.flows`), Cubic, ``get_gap_s`` apart so
  that each starts a burst. Throughput = bytes / (request sent → last byte), an FTP client's
  transfer time (the handshake is recorded too);
- page loads of four generated pages of Table 1's shapes (mail 11 objects / 36.7 KB, yahoo 16 /
  60.3 KB, amazon 42 / 91.9 KB, cnn 67 / 186.8 KB; two dependency levels; seed 1) served by
  the replay's nginx over HTTPS/HTTP/1.1 and loaded by the replay's h2 loader with
  ``connections`` = 2 HTTP/1.1 connections per host (Mozilla 1.4's default, the paper's
  "HTTP/1.1-default … at most two simultaneous TCP connections"), ``page_gap_s`` apart. Web
  throughput = page bytes / PLT.

What differs from the paper's setup (stated in the outcome's reason): one host per page instead
of 4–6 servers, so no DNS lookups (≈ part of mail.com's 29 % for DNS + handshakes, Fig 4); TLS
(one more round trip per connection); a modern server (initial window 10 instead of Linux
2.4's 2–4 segments, so fewer round trips per object).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from clawbed.orchestrator.fidelity.harness import Cell, RowContext, delays_for, fmt, rate_bps, save_figure
from clawbed.orchestrator.fidelity.results import Check, Outcome

#: Bytes per KB in the paper's sizes and throughputs (amazon: 91.9 KB in 76.4 s = 9.6 kbit/s).
KB_BYTES = 1000

#: Table 1's four sites: (objects with the HTML, KB).
SITES: dict[str, tuple[int, float]] = {"mail": (11, 36.7), "yahoo": (16, 60.3), "amazon": (42, 91.9),
                                       "cnn": (67, 186.8)}
#: Dependency levels of the generated pages (HTML → stylesheets/scripts → their images and
#: fonts); the paper does not give them.
SITE_DEPTH = 2
#: GPRS page times, s (Table 1, virtual hosting: the paper's controlled setup, as ours).
GPRS_PAGE_S: dict[str, float] = {"mail": 34.5, "yahoo": 35.0, "amazon": 76.4, "cnn": 196.3}
#: The paper's single-TCP FTP throughputs, kbit/s, by size in KB (Tables 2 and 10).
PAPER_GET_KBPS: dict[str, dict[int, float]] = {
    "gprs": {1: 13.2, 5: 18.1, 10: 18.8, 50: 29.7, 100: 30.5},
    "cdma1x": {1: 16.3, 5: 23.3, 10: 37.8, 50: 87.5, 100: 94.1},
    "dialup": {1: 29.1, 5: 35.6, 10: 44.3, 50: 46.1, 100: 45.8},
}
#: The paper's web throughputs, kbit/s (Table 11; GPRS from Table 1's sizes and times).
PAPER_WEB_KBPS: dict[str, dict[str, float]] = {
    "gprs": {s: SITES[s][1] * KB_BYTES * 8 / GPRS_PAGE_S[s] / 1000 for s in SITES},
    "cdma1x": {"mail": 34.6, "yahoo": 41.2, "amazon": 38.4, "cnn": 32.8},
    "dialup": {"mail": 37.1, "yahoo": 42.8, "amazon": 43.1, "cnn": 38.5},
}
#: Profiles of the criterion's two sides.
WWAN_PROFILES = ("gprs", "cdma1x")
LOW_RTT_PROFILES = ("dialup",)
#: The criterion's bands (proposed in the table).
WEB_MAX_WWAN = 0.35
WEB_MIN_LOW_RTT = 0.65
GET_MIN = 0.65
RATIO_MIN_WWAN = 2.0
RATIO_MAX_LOW_RTT = 1.3
PAGE_TOL = 0.30
#: The GET the criterion's "FTP" means.
FTP_KB = 100
FLOW_CC = "cubic"
#: First server port of the pages' nginx servers (one per page, all in the core namespace).
WEB_PORT_BASE = 8440


# -- pure parts ---------------------------------------------------------------------------------


def throughput_bps(nbytes: float, seconds: float) -> float:
    """``nbytes`` over ``seconds`` in bit/s; NaN for a non-positive time."""
    return float(nbytes) * 8 / seconds if seconds > 0 else float("nan")


def mean_or_nan(values: list[float]) -> float:
    ok = [v for v in values if v is not None and not np.isnan(v)]
    return float(np.mean(ok)) if ok else float("nan")


def cell_settings(prof: dict[str, Any], *, queue_bytes: int, seed: int = 1) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the UE's settings, the emulator's top-level keys) of one profile: a constant rate each
    way, the core RTT split evenly, and the profile's RRC policy and stall process (``off``
    when it names none)."""
    if "rate" not in prof or "core_rtt_ms" not in prof:
        raise ValueError(f"a WWAN-1 profile needs rate and core_rtt_ms (got {sorted(prof)})")
    ue: dict[str, Any] = {"rate": prof["rate"], "cell": {"queue_limit_bytes": int(queue_bytes)}}
    if prof.get("uplink_rate"):
        ue["uplink_rate"] = prof["uplink_rate"]
    cell = {"rrc": prof.get("rrc") or {"kind": "off"}, "stall": prof.get("stall") or {"kind": "off"}}
    fields = {"mode": "rate", "seed": seed, "delays": delays_for(float(prof["core_rtt_ms"])), "cell": cell}
    return ue, fields


def plan(params: dict[str, Any], profile: str) -> tuple[list[int], list[str]]:
    """(GET sizes in KB, sites) to run on ``profile``: the row's, or the ``only`` subset the
    profile has (the quick profile's)."""
    only = (params.get("only") or {}).get(profile, {})
    sizes = [int(s) for s in only.get("get_sizes_kb", params["get_sizes_kb"])]
    sites = list(only.get("sites", params["sites"]))
    unknown = [s for s in sites if s not in SITES]
    if unknown:
        raise ValueError(f"WWAN-1 sites {unknown}: not among Table 1's {list(SITES)}")
    return sizes, sites


def get_throughputs(clients: list[dict[str, Any]]) -> dict[int, dict[str, float]]:
    """Per GET size (KB), from the flow tool's client lines: mean throughput from the request to
    the last byte and from the connect to the last byte (bit/s), and the number of GETs."""
    per: dict[int, dict[str, list[float]]] = {}
    for c in clients:
        if c.get("error") or not c.get("bytes"):
            continue
        kb = int(round(c["bytes"] / KB_BYTES))
        d = per.setdefault(kb, {"request": [], "connect": []})
        d["request"].append(throughput_bps(c["bytes"], c["t_end"] - c["t_connected"]))
        d["connect"].append(throughput_bps(c["bytes"], c["t_end"] - c["t_start"]))
    return {kb: {"bps": mean_or_nan(d["request"]), "with_handshake_bps": mean_or_nan(d["connect"]),
                 "n": float(len(d["request"]))} for kb, d in sorted(per.items())}


def summarise(measured: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per profile: link rate, GET throughput per size, web throughput and mean page time per
    site, the profile's web throughput (mean over its sites) and the FTP / web ratio.

    ``measured[profile]`` holds ``link_bps``, ``gets`` (:func:`get_throughputs`) and ``pages``
    (site → list of (bytes, PLT s) of successful loads)."""
    out: dict[str, dict[str, Any]] = {}
    for name, m in measured.items():
        link = float(m["link_bps"])
        web = {site: mean_or_nan([throughput_bps(b, t) for b, t in loads]) for site, loads in m["pages"].items()}
        page_s = {site: mean_or_nan([t for _, t in loads]) for site, loads in m["pages"].items()}
        web_all = mean_or_nan(list(web.values()))
        ftp = m["gets"].get(FTP_KB, {}).get("bps", float("nan"))
        out[name] = {"link_bps": link, "get_bps": {kb: g["bps"] for kb, g in m["gets"].items()},
                     "web_bps": web, "page_s": page_s, "web_mean_bps": web_all,
                     "web_fraction": web_all / link, "ftp_fraction": ftp / link, "ftp_over_web": ftp / web_all}
    return out


def _isnan(x: float) -> bool:
    return x is None or bool(np.isnan(x))


def criterion_checks(summary: dict[str, dict[str, Any]], missing: dict[str, str] | None = None) -> list[Check]:
    """The criterion's parts as checks; a part whose value is missing is not judged, with the
    reason from ``missing`` (profile or ``profile/site`` → why) or a generic one."""
    missing = missing or {}
    checks: list[Check] = []

    def why(*keys: str) -> str:
        return next((missing[k] for k in keys if k in missing), f"no measurement ({'/'.join(keys)})")

    for prof in (*WWAN_PROFILES, *LOW_RTT_PROFILES):
        s = summary.get(prof)
        wwan = prof in WWAN_PROFILES
        web_name, get_name = f"{prof}: web throughput (mean of sites) / link rate", f"{prof}: {FTP_KB} KB GET throughput / link rate"
        ratio_name = f"{prof}: {FTP_KB} KB GET / web throughput"
        web_target = f"≤ {WEB_MAX_WWAN:.0%} of link" if wwan else f"≥ {WEB_MIN_LOW_RTT:.0%} of link"
        ratio_target = f"≥ {RATIO_MIN_WWAN:g}" if wwan else f"≤ {RATIO_MAX_LOW_RTT:g}"
        if s is None:
            for name, target in ((web_name, web_target), (get_name, f"≥ {GET_MIN:.0%}"), (ratio_name, ratio_target)):
                checks.append(Check(name, "–", target, None, why(prof)))
            continue
        per_site = ", ".join(f"{k} {fmt(v / 1000, digits=1)}" for k, v in s["web_bps"].items())
        frac = s["web_fraction"]
        ok = None if _isnan(frac) else (frac <= WEB_MAX_WWAN if wwan else frac >= WEB_MIN_LOW_RTT)
        checks.append(Check(web_name, f"{fmt(frac * 100, '%', 1)} ({per_site} kbit/s)", web_target, ok,
                            why(prof, f"{prof}/web")))
        ftp = s["ftp_fraction"]
        checks.append(Check(get_name,
                            f"{fmt(ftp * 100, '%', 1)} ({fmt(s['get_bps'].get(FTP_KB, float('nan')) / 1000, 'kbit/s', 1)})",
                            f"≥ {GET_MIN:.0%}", None if _isnan(ftp) else ftp >= GET_MIN, why(prof, f"{prof}/get")))
        ratio = s["ftp_over_web"]
        ok = None if _isnan(ratio) else (ratio >= RATIO_MIN_WWAN if wwan else ratio <= RATIO_MAX_LOW_RTT)
        checks.append(Check(ratio_name, fmt(ratio, digits=2), ratio_target, ok, why(prof, f"{prof}/web", f"{prof}/get")))
    gprs = summary.get("gprs", {}).get("page_s", {})
    for site, paper_s in GPRS_PAGE_S.items():
        t = gprs.get(site, float("nan"))
        lo, hi = paper_s * (1 - PAGE_TOL), paper_s * (1 + PAGE_TOL)
        checks.append(Check(f"gprs: {site} page time vs Table 1", fmt(t, "s", 1),
                            f"{paper_s:g} s ± {PAGE_TOL:.0%} ({lo:.1f}–{hi:.1f} s)",
                            None if _isnan(t) else lo <= t <= hi, why(f"gprs/{site}", "gprs")))
    return checks


# -- the experiment -----------------------------------------------------------------------------


def _run_gets(ctx: RowContext, cell: Cell, sizes_kb: list[int], reps: int, gap_s: float,
              link_bps: float) -> list[dict[str, Any]]:
    """``reps`` rounds of one GET per size (sizes in order), one fresh connection each."""
    sizes = [kb * KB_BYTES for _ in range(reps) for kb in sizes_kb]
    # Each GET at the link rate, with generous room for promotions, stalls and slow start.
    limit_s = 120 + sum(sizes) * 8 / link_bps * 2 + len(sizes) * (gap_s + 15)
    flow = cell.flow(FLOW_CC, sizes=sizes, gap_s=gap_s, timeout_s=limit_s)
    return flow.client


def _run_pages(ctx: RowContext, cell: Cell, sites: list[str], reps: int, gap_s: float, connections: int,
               link_bps: float, server_sysctls: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    """``reps`` rounds of one load per site (sites in order), each a fresh client."""
    from clawbed.claw.schemes import get_scheme
    from clawbed.replay.loaders.runner import LoaderWorker
    from clawbed.replay.pages import generate_page
    from clawbed.replay.webserver import WebServer

    topo = cell.topo
    res = cell.cell.res
    sub = cell.dir / "pages"
    sub.mkdir(parents=True, exist_ok=True)
    scheme = get_scheme(FLOW_CC)()
    scheme.setup(dataclasses.replace(cell.scheme_context(sub), sysctls=server_sysctls))
    loads: dict[str, list[dict[str, Any]]] = {s: [] for s in sites}
    try:
        cell.record_ends()
        servers = {}
        for i, site in enumerate(sites):
            n_objects, kb = SITES[site]
            page = generate_page(int(round(kb * KB_BYTES)), n_objects, SITE_DEPTH, 1, name=f"wwan-{site}")
            site_dir = sub / "sites" / site
            page.materialize(site_dir)
            web = WebServer(res, topo.core.ns, site_dir, str(topo.core.address), "1.1", port=WEB_PORT_BASE + i)
            servers[site] = (page, web, web.url(page.root.path))
        access = next(iter(servers.values()))[1].access  # one CA for the run's servers
        worker = LoaderWorker(res, topo.ues[0].ns, "h2", http1=True, access=access, log_dir=sub,
                              loader_args=["--http1-connections", str(connections)])
        res.callback(worker.close)
        worker.start()
        time.sleep(2.0)  # the worker's imports, and the UE idle before the first load
        for rnd in range(reps):
            for site in sites:
                page, _web, url = servers[site]
                timeout_s = 60 + 6 * page.total_bytes * 8 / link_bps
                t0 = time.time()
                result = worker.load(url, timeout_s)
                t1 = time.time()
                row: dict[str, Any] = {
                    "round": rnd, "site": site, "ok": result.ok,
                    "plt_s": result.plt_ms / 1000 if result.plt_ms else None, "bytes": result.bytes_total,
                    "page_bytes": page.total_bytes, "objects": len(result.objects), "error": result.error,
                    "t0_unix_s": t0, "t1_unix_s": t1,
                    # Each object's start and end (ms from the first request) and body bytes: the
                    # stop-and-go pattern on the two connections.
                    "objects_ms": [[o.start_ms, o.end_ms, o.bytes] for o in result.objects]}
                loads[site].append(row)
                with (sub / "loads.jsonl").open("a") as f:
                    f.write(json.dumps(row) + "\n")
                ctx.log(f"{cell.dir.name} {site} round {rnd + 1}: " + (f"{row['plt_s']:.1f} s" if result.ok
                                                                      else f"failed: {result.error}"))
                time.sleep(gap_s)
        worker.close()
    finally:
        scheme.teardown()
    return loads


def _radio(truth_path: Path, windows: list[tuple[float, float]]) -> dict[str, Any]:
    """Promotions and stalled time in the whole run and within ``windows`` (Unix s), from the
    emulator's ground truth."""
    from clawbed.emulator.truth import read_truth

    try:
        truth = read_truth(truth_path)
        origin_s = truth.header["origin_unix_ns"] / 1e9
        t_ms = np.asarray(truth["t_ms"], dtype=float)
        rrc = np.asarray(truth.ue(0, "rrc")).astype(str)
        stalled = np.asarray(truth.ue(0, "stalled"), dtype=float)
        queued = np.asarray(truth.ue(0, "queue_bytes"), dtype=float)
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"reading the promotions and stalls from {truth_path}: {type(e).__name__}: {e}"}
    starts = t_ms[np.flatnonzero((rrc[1:] == "promoting") & (rrc[:-1] != "promoting")) + 1]
    # The downlink carries data in a subframe when data waits and the UE can be served (at
    # these rates the queue never empties within a packet): Fig 4's "link busy".
    busy = (queued > 0) & (rrc == "connected") & ~(stalled > 0)
    in_loads, load_ms, busy_ms = 0, 0, 0
    for a, b in windows:
        in_loads += int(np.sum((starts >= (a - origin_s) * 1000) & (starts < (b - origin_s) * 1000)))
        inside = (t_ms >= (a - origin_s) * 1000) & (t_ms < (b - origin_s) * 1000)
        load_ms += int(inside.sum())
        busy_ms += int((inside & busy).sum())
    return {"promotions": float(len(starts)), "promotions_in_page_loads": float(in_loads),
            "stalled_ms": float(np.nansum(stalled)), "run_ms": float(len(rrc)),
            "link_busy_fraction_in_page_loads": busy_ms / load_ms if load_ms else float("nan")}


def radio_cause(radio: dict[str, Any], n_loads: int) -> str:
    """What the ground truth says of a profile's page loads: how much of their time the
    downlink carried data (web throughput / link rate cannot exceed it), and the promotions."""
    busy = radio.get("link_busy_fraction_in_page_loads")
    if busy is None or _isnan(busy) or not n_loads:
        return ""
    return (f"ground truth: the downlink carried data in {busy:.0%} of the page loads' time, with "
            f"{radio.get('promotions_in_page_loads', 0) / n_loads:.1f} promotions a load; the rest is round trips "
            f"the paper's setup had more of (DNS for 3–6 servers, an initial window of 2–4 segments)")


def _figure(ctx: RowContext, summary: dict[str, dict[str, Any]]) -> None:
    fig = go.Figure()
    profiles = list(summary)
    sizes = sorted({kb for s in summary.values() for kb in s["get_bps"]})
    sites = [s for s in SITES if any(s in v["web_bps"] for v in summary.values())]
    for kb in sizes:
        fig.add_trace(go.Bar(x=profiles, y=[summary[p]["get_bps"].get(kb, np.nan) / summary[p]["link_bps"] * 100
                                            for p in profiles], name=f"GET {kb} KB"))
    for site in sites:
        fig.add_trace(go.Bar(x=profiles, y=[summary[p]["web_bps"].get(site, np.nan) / summary[p]["link_bps"] * 100
                                            for p in profiles], name=f"web {site}", marker_pattern_shape="/"))
    fig.add_hline(y=WEB_MAX_WWAN * 100, line_dash="dot", annotation_text="WWAN web ≤ 35 %")
    fig.add_hline(y=GET_MIN * 100, line_dash="dash", annotation_text="GET / dial-up web ≥ 65 %")
    fig.update_layout(title=f"{ctx.row.id}: throughput per profile as % of the link rate — single GETs vs page loads "
                            "(HTTP/1.1, 2 connections)", yaxis_title="% of link rate", barmode="group")
    save_figure(ctx, fig)


def web_vs_bulk(ctx: RowContext) -> Outcome:
    """WWAN-1: single GETs and page loads per link profile; web and GET throughput against the
    link rate (see the module's docstring for the profiles and why)."""
    p, out = ctx.params, ctx.outcome
    measured: dict[str, dict[str, Any]] = {}
    missing: dict[str, str] = {}
    radio: dict[str, Any] = {}
    details: dict[str, Any] = {}
    skipped: list[str] = []
    for name, prof in p["profiles"].items():
        sizes_kb, sites = plan(p, name)
        link = rate_bps(prof["rate"])
        ue, fields = cell_settings(prof, queue_bytes=int(p["queue_bytes"]), seed=int(p.get("seed", 1)))
        clients: list[dict[str, Any]] = []
        loads: dict[str, list[dict[str, Any]]] = {}
        ctx.log(f"{name}: {prof['rate']}, core RTT {prof['core_rtt_ms']} ms, GETs {sizes_kb} KB, sites {sites}")
        cell = Cell(ctx, name, ue=ue, **fields)
        try:
            with cell:
                if sizes_kb:
                    clients = _run_gets(ctx, cell, sizes_kb, int(p["get_repetitions"]), float(p["get_gap_s"]), link)
                if sites:
                    loads = _run_pages(ctx, cell, sites, int(p["page_repetitions"]), float(p["page_gap_s"]),
                                       int(p["connections"]), link, dict(p.get("server_sysctls") or {}))
        except Exception as e:  # noqa: BLE001 - one profile's failure leaves the others' parts judged
            missing[name] = f"the {name} profile failed: {type(e).__name__}: {e}"[:300]
            details[name] = {"error": missing[name]}
            ctx.log(missing[name])
            continue
        windows = [(r["t0_unix_s"], r["t1_unix_s"]) for rows in loads.values() for r in rows]
        radio[name] = _radio(cell.truth_path, windows)
        gets = get_throughputs(clients)
        failed_gets = [str(c["error"]) for c in clients if c.get("error")]
        if FTP_KB not in gets:
            missing[f"{name}/get"] = (f"no {FTP_KB} KB GET completed ({'; '.join(failed_gets[:2])})" if failed_gets
                                      else f"the {'quick' if ctx.quick else 'full'} profile runs no {FTP_KB} KB GET on {name}")
        pages = {site: [(r["page_bytes"], r["plt_s"]) for r in rows if r["ok"] and r["plt_s"]] for site, rows in loads.items()}
        for site in SITES:
            if site not in loads:
                missing[f"{name}/{site}"] = (f"the {'quick' if ctx.quick else 'full'} profile skips {site} on {name} "
                                             f"(a load there takes ≈ {SITES[site][1] * KB_BYTES * 8 / link * 2:.0f}+ s)")
                skipped.append(f"{name}/{site}")
            elif not pages[site]:
                errs = [r["error"] for r in loads[site] if r["error"]]
                missing[f"{name}/{site}"] = f"every load of {site} failed: {errs[0] if errs else 'no PLT'}"
        pages = {s: v for s, v in pages.items() if v}
        if not pages:
            missing[f"{name}/web"] = "no successful page load on this profile"
        measured[name] = {"link_bps": link, "gets": gets, "pages": pages}
        details[name] = {"gets": {str(k): v for k, v in gets.items()}, "failed_gets": failed_gets,
                         "loads": loads, "settings": {"ue": ue, **fields}}
    summary = summarise(measured)
    out.checks.extend(criterion_checks(summary, missing))
    for check in out.checks:
        prof = check.name.split(":", 1)[0]
        if prof in WWAN_PROFILES and ("web throughput" in check.name or "page time" in check.name):
            check.cause = radio_cause(radio.get(prof, {}), sum(len(rows) for rows in details.get(prof, {}).get("loads", {}).values()))
    out.metrics = {
        "summary": {n: {**s, "get_bps": {str(k): v for k, v in s["get_bps"].items()}} for n, s in summary.items()},
        "paper": {"get_kbps": PAPER_GET_KBPS, "web_kbps": PAPER_WEB_KBPS, "gprs_page_s": GPRS_PAGE_S},
        "radio": radio, "details": details, "connections_per_host": p["connections"],
    }
    if summary:
        _figure(ctx, summary)
    out.testbed = "; ".join(
        f"{n}: GET {'/'.join(str(k) for k in s['get_bps'])} KB "
        f"{'/'.join(fmt(v / 1000, digits=1) for v in s['get_bps'].values())} kbit/s, web "
        f"{fmt(s['web_mean_bps'] / 1000, digits=1)} kbit/s ({fmt(s['web_fraction'] * 100, '%')}), FTP/web "
        f"{fmt(s['ftp_over_web'], digits=2)}"
        + (", pages " + "/".join(f"{k} {fmt(v, 's', 1)}" for k, v in s["page_s"].items()) if s["page_s"] else "")
        for n, s in summary.items())
    notes = ["one host per page (no DNS lookups; the paper's sites used 3–6 servers)",
             "HTTPS (a TLS round trip per connection)", "server initial window 10 (Linux 2.4: 2–4)"]
    if skipped:
        notes.append(f"quick profile skips {', '.join(skipped)}")
    out.reason = "differs from the paper: " + "; ".join(notes)
    return out


EXPERIMENTS: dict[str, Callable[[RowContext], Outcome]] = {"wwan_web_vs_bulk": web_vs_bulk}
