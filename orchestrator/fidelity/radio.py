"""Bulk-flow and ping rows on radio states that hold data: the RRC promotion delay of a first
packet after an idle (LTE-3) and outages that outlast the RTO, giving spurious timeouts
(WWAN-3). Registered in :data:`.bulk.EXPERIMENTS`.
"""

from __future__ import annotations

import time

import numpy as np

from clawbed.emulator.truth import read_truth
from clawbed.orchestrator.fidelity.harness import (
    MIB,
    RowContext,
    _rate_cell,
    fmt,
    pct,
)
from clawbed.orchestrator.fidelity.mechanisms import emu_fragment
from clawbed.orchestrator.fidelity.results import Check, Outcome
from clawbed.orchestrator.regress import interval_rank

#: Pings above the tail needed before LTE-3 judges the promotion delay's quartiles.
MIN_QUARTILE_SAMPLES = 20


def rrc_promotion(ctx: RowContext) -> Outcome:
    """LTE-3: pings at intervals around the tail timer; promotion delay of the first packet."""
    p, out = ctx.params, ctx.outcome
    frag = emu_fragment("rrc-lte")
    per: dict[float, list[float]] = {}
    with _rate_cell(ctx, "rrc", p.get("rate", "20mbit"), 3 * MIB, p.get("core_rtt_ms"), cell=frag["cell"]) as cell:
        cell.record_ends()
        for interval in p["intervals_s"]:
            rtts = []
            for _ in range(p["pings_per_interval"]):
                time.sleep(interval)
                r = cell.topo.ues[0].run(["ping", "-n", "-c", "1", "-W", "5", str(cell.topo.core.address)], check=False)
                rtts += [float(x.split("time=")[1].split()[0]) for x in r.stdout.splitlines() if "time=" in x]
            per[interval] = rtts
        bulk = cell.flow("cubic", seconds=p["bulk_seconds"])
        truth = read_truth(cell.truth_path)
    tail_s = frag["cell"]["rrc"]["tail_ms"] / 1000
    # The base is the median ping at the shortest interval (connected all along), not the
    # fastest ping: every ping from a quiet UE waits for its scheduling request's slot and the
    # grant (uplink MAC), a few ms that vary ping to ping at any interval and are not RRC's.
    shortest = min(i for i, v in per.items() if v)
    base = pct(per[shortest], 50)
    above = [r - base for i, v in per.items() if i > tail_s for r in v]
    # Below the tail, each interval's pings against the shortest interval's: the shift (median
    # of pairwise differences) with its exact 95 % interval. Pings spread over a few ms (the SR
    # slot), so two medians of 10 pings differ by 1-2 ms by chance alone; the check fails only
    # when the interval lies wholly above 1 ms.
    below = {i: _shift_ci(v, per[shortest]) for i, v in per.items() if i < tail_s and i != shortest and v}
    out.metrics = {"rtts_by_interval": {str(k): v for k, v in per.items()}, "base_ms": base,
                   "base_interval_s": shortest}
    if above:
        q = [pct(above, x) for x in (25, 50, 75)]
        out.checks.append(Check(f"extra first-packet delay above the tail, median ({len(above)} pings)", fmt(q[1], "ms"),
                                "435 ± 50 ms", abs(q[1] - 435) <= 50))
        enough = len(above) >= MIN_QUARTILE_SAMPLES
        out.checks.append(Check("extra first-packet delay above the tail, p25 / p75", f"{fmt(q[0])} / {fmt(q[2])} ms",
                                "≈ 319 / 558 ms (± 60)", abs(q[0] - 319) <= 60 and abs(q[2] - 558) <= 60 if enough else None,
                                f"{len(above)} pings: quartiles need ≥ {MIN_QUARTILE_SAMPLES} (the full profile has "
                                f"more)"))
    if below:
        worst = max(below, key=lambda i: below[i][0])
        shift, low, high = below[worst]
        interval = f" (95 % CI {low:.1f} … {high:.1f})" if low is not None and high is not None else ""
        out.checks.append(Check(f"added delay below the tail (shift vs {fmt(shortest, 's', 1)} pings)",
                                f"{fmt(shift, 'ms', 1)} at {fmt(worst, 's', 1)}{interval}", "≤ 1 ms",
                                (low if low is not None else shift) <= 1,
                                f"{len(per[worst])} vs {len(per[shortest])} pings"))
    t0 = int((bulk.t0 - truth.header["origin_unix_ns"] / 1e9) * 1000)
    states = truth.ue(0, "rrc")[t0:]
    promotions = int(np.sum(np.diff((np.asarray(states) != "connected").astype(int)) > 0)) if len(states) else 0
    out.checks.append(Check("promotions during a bulk flow", str(promotions), "0", promotions == 0))
    out.testbed = (f"extra delay above tail median {fmt(pct(above, 50), 'ms')}, below at most "
                   f"{fmt(max((b[0] for b in below.values()), default=float('nan')), 'ms', 1)}")
    return out


def _shift_ci(sample: list[float], reference: list[float]) -> tuple[float, float | None, float | None]:
    """(shift, 95 % low, high) of ``sample`` over ``reference``, ms: the Hodges-Lehmann estimate
    (median of all pairwise differences) and its exact distribution-free interval (None ends
    when the samples are too small for one)."""
    diffs = np.sort(np.subtract.outer(np.asarray(sample, float), np.asarray(reference, float)).ravel())
    k = interval_rank(len(sample), len(reference))
    shift = float(np.median(diffs))
    if k == 0:
        return shift, None, None
    return shift, float(diffs[k - 1]), float(diffs[len(diffs) - k])


#: Linux's floor on the RTO's variance term (TCP_RTO_MIN), ms: RTO ≈ srtt + max(4·rttvar, 200).
RTO_MIN_MS = 200.0


#: TCP_CA_Loss in tcpi_ca_state: the sender is in RTO recovery.
CA_LOSS = 4


def stall_runs(stalled: np.ndarray, t_ms: np.ndarray) -> list[tuple[float, float]]:
    """(start, end) ms of each run of stalled subframes."""
    flags = np.asarray(stalled, dtype=float) > 0
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    return [(float(t_ms[a]), float(t_ms[b - 1]) + 1.0) for a, b in zip(np.flatnonzero(edges == 1),
                                                                          np.flatnonzero(edges == -1))]


def stall_spurious(ctx: RowContext) -> Outcome:
    """WWAN-3: injected outages that hold data; an RTO (later spurious) when an outage outlasts
    the RTO in force when it began, none when it is shorter.

    Judged per outage from the ground truth (the ``stalled`` column: when each outage began and
    ended) against the server's own state sampled just before it (RTO ≈ srtt + max(4·rttvar,
    200 ms), Linux's rule) and whether the sender entered RTO recovery (tcpi_ca_state Loss)
    during it or within one RTT after. The UE's receive window keeps the queue short (a bloated
    queue makes srtt, hence the RTO, seconds long) and below the base station's buffer, so the
    cell drops nothing: the RTOs are spurious by the ground truth."""
    p, out = ctx.params, ctx.outcome
    frag = emu_fragment("stall")
    judged: list[dict[str, float]] = []
    for outage in p["outages_ms"]:
        stall = {**frag["cell"]["stall"], "min_ms": outage, "max_ms": outage,
                 "mean_interval_s": p.get("mean_interval_s", frag["cell"]["stall"]["mean_interval_s"])}
        # The UE's receive buffer bounds the flow below the base station's buffer: no overflow,
        # so the cell loses nothing and every RTO's retransmission is spurious by the truth.
        rmem = int(p.get("ue_rmem_max_bytes", 180_000))
        with _rate_cell(ctx, f"stall-{outage}", p["rate"], int(p.get("queue_bytes", 3 * MIB)), p.get("core_rtt_ms"),
                        ue_rmem=(4096, min(87380, rmem), rmem), cell={"stall": stall}) as cell:
            f = cell.flow("cubic", seconds=p["seconds"])
            truth = read_truth(cell.truth_path)
        s = f.server[0] if f.server else {}
        drops = int(truth.ue(0, "overflow_drops").sum() + truth.ue(0, "rlc_loss_drops").sum())
        origin_ms = truth.header["origin_unix_ns"] / 1e6
        t_s = f.series("t_unix_s") * 1000 - origin_ms  # sample times on the truth's clock, ms
        srtt, rttvar, ca = f.series("srtt_ms"), f.series("rttvar_ms"), f.series("ca_state")
        events = []
        for a, b in stall_runs(truth.ue(0, "stalled"), truth["t_ms"]):
            before = np.flatnonzero((t_s < a) & ~np.isnan(srtt))
            if not len(before) or a < t_s[0] or b > t_s[-1]:
                continue  # not within the flow
            i = before[-1]
            rto = srtt[i] + max(4 * rttvar[i], RTO_MIN_MS)
            after = (t_s >= a) & (t_s <= b + srtt[i])
            events.append({"start_ms": a, "outage_ms": b - a, "rto_ms": float(rto),
                           "rto_fired": bool(np.any(ca[after] == CA_LOSS))})
        judged += events
        out.metrics[str(outage)] = {"total_rto": s.get("total_rto"), "dsack_dups": s.get("dsack_dups"), "drops": drops,
                                    "outages": events}
        longer = [e for e in events if e["outage_ms"] > e["rto_ms"]]
        # Within 20 % of the RTO the timer's exact value (rttvar's update) decides: not judged.
        shorter = [e for e in events if e["outage_ms"] < 0.8 * e["rto_ms"]]
        ok = (drops == 0 and all(e["rto_fired"] for e in longer) and not any(e["rto_fired"] for e in shorter)
              if longer or shorter else None)
        out.checks.append(Check(
            f"outages of {outage} ms: RTO iff longer than the RTO in force, no real loss",
            f"{len(events)} outage(s) in the flow (RTO before them "
            f"{'/'.join(fmt(e['rto_ms']) for e in events) or '–'} ms): RTO in "
            f"{sum(e['rto_fired'] for e in longer)}/{len(longer)} longer, {sum(e['rto_fired'] for e in shorter)}/"
            f"{len(shorter)} shorter; {s.get('total_rto')} RTO(s), {s.get('dsack_dups')} DSACK(s), {drops} drop(s)",
            "RTO for every longer one, none for shorter ones, 0 drops (so every RTO is spurious)", ok,
            "no outage fell within the flow, or all within 20 % of the RTO"))
    out.testbed = "; ".join(f"outage {k} ms: {len(v['outages'])} outage(s), {v['total_rto']} RTO(s), "
                            f"{v['dsack_dups']} DSACK(s), {v['drops']} drop(s)"
                            for k, v in out.metrics.items() if isinstance(v, dict) and "drops" in v)
    return out
