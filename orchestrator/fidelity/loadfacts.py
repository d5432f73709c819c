"""What a page-load row's loads say, read back from the result store and each load's directory:
PLTs by scenario and scheme, the server's TCP samples and namespace counters, the ground truth's
airtime split, the small statistics the rows share, and the causes a check gives from them (a
scheme's gain over another, its timeouts). :mod:`.pageloads` runs the rows; :mod:`.spdy` reads
the SPDY rows' radio facts on top of these.
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import numpy as np

from clawbed.orchestrator.analyze import mean_airtime
from clawbed.orchestrator.store import LoadRow


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
