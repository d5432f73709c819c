"""Where CLAW's gain comes from: a suite's loads grouped by factor set (the scenario's trace and
condition), with, per scheme, the PLT and what the kernel and the ground truth say of each load:

- ``rto``: the server's retransmission timeouts per load (``TcpExtTCPTimeouts`` in the load's
  ``netstat.json``, the server namespace's counters over the load);
- ``ss_exit``: the share of the load's flows that left slow start before any loss — ssthresh set
  in ``tcp.csv`` while the flow had retransmitted nothing and lost nothing (HyStart's exit on a
  delay rise, the early exit CLAW §3 blames); ``loss_exit``: the share that left it on a loss;
- the airtime split (:mod:`clawbed.replay.airtime`): the share of the data phase the UE's
  base-station queue held data (``queued``), the sender held data back (``window``: the only
  time any congestion control can win), or nobody had data (``app``);
- for CLAW, the share of the server's samples in its ``wireline`` mode (the detector's verdict:
  CLAW then runs on Cubic's window) and with no feedback in force.

``clawbed suite decompose SPEC --sweep S`` prints it; the docs' paper-results page holds the
measured table.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawbed.orchestrator.analyze import load_split
from clawbed.orchestrator.store import LoadRow
from clawbed.replay.rundir import read_csv


@dataclass(frozen=True)
class LoadFacts:
    rto: int | None
    ss_exit: float | None
    loss_exit: float | None
    #: Shares of the load's tcp.csv samples in CLAW's wireline and no-feedback modes (None: no
    #: CLAW window in the samples, a kernel CC).
    wireline: float | None = None
    no_feedback: float | None = None


def load_dir(row: LoadRow) -> Path | None:
    if row.run_dir is None or row.load_index is None:
        return None
    return Path(row.run_dir) / "loads" / f"{row.load_index:03d}-{row.scheme}"


def slow_start_exits(tcp: dict[str, list[str]]) -> tuple[int, int, int]:
    """(flows, flows that left slow start before any loss, flows that left it on a loss) of a
    load's ``tcp.csv`` columns."""
    first: dict[str, str] = {}
    flows: set[str] = set()
    for i, flow in enumerate(tcp.get("flow", [])):
        flows.add(flow)
        if flow in first or not tcp["ssthresh_pkts"][i]:
            continue
        clean = all(float(tcp[k][i] or 0) == 0 for k in ("retrans_total", "lost_pkts"))
        first[flow] = "early" if clean else "loss"
    early = sum(1 for v in first.values() if v == "early")
    return len(flows), early, len(first) - early


def load_facts(row: LoadRow) -> LoadFacts:
    folder = load_dir(row)
    if folder is None or not folder.is_dir():
        return LoadFacts(None, None, None)
    rto = None
    netstat = folder / "netstat.json"
    if netstat.is_file():
        rto = int(json.loads(netstat.read_text()).get("TcpExtTCPTimeouts", 0))
    tcp = read_csv(folder / "tcp.csv")
    flows, early, loss = slow_start_exits(tcp)
    modes = [m for m in tcp.get("claw_mode", []) if m]
    share = (lambda mode: modes.count(mode) / len(modes)) if modes else (lambda mode: None)
    return LoadFacts(rto, early / flows if flows else None, loss / flows if flows else None,
                     share("wireline"), share("no_feedback"))


def _mean(values: Iterable[float | None]) -> float:
    kept = [v for v in values if v is not None and not math.isnan(v)]
    return statistics.fmean(kept) if kept else math.nan


def factor_set(label: str) -> str:
    """The factor set of a scenario label ``trace/page/condition/s<seed>``: its trace and condition."""
    trace, page, condition, _seed = label.rsplit("/", 3)
    return f"{trace} · {page} · {condition}"


def decompose(rows: list[LoadRow], *, with_late: bool = False) -> list[dict[str, Any]]:
    """One line per (factor set, scheme): loads, PLT mean and median, the facts' means."""
    groups: dict[tuple[str, str], list[LoadRow]] = defaultdict(list)
    for r in rows:
        if r.ok and r.plt_ms is not None and (with_late or r.timing_ok is not False):
            groups[(factor_set(r.label), r.scheme)].append(r)
    runs: dict[str, Any] = {}
    out = []
    for (factors, scheme), loads in sorted(groups.items()):
        facts = [load_facts(r) for r in loads]
        splits = [s for r in loads if (s := load_split(r, runs)) is not None]
        line: dict[str, Any] = {
            "factors": factors, "scheme": scheme, "loads": len(loads),
            "plt_mean_s": statistics.fmean(r.plt_ms or 0 for r in loads) / 1000,
            "plt_median_s": statistics.median(r.plt_ms or 0 for r in loads) / 1000,
            "rto_per_load": _mean(f.rto for f in facts),
            "ss_exit_early": _mean(f.ss_exit for f in facts),
            "ss_exit_loss": _mean(f.loss_exit for f in facts),
            "claw_wireline": _mean(f.wireline for f in facts),
            "claw_no_feedback": _mean(f.no_feedback for f in facts),
        }
        for key in ("queued", "window", "app"):
            line[f"{key}_share"] = _mean(getattr(s, f"{key}_ms") / s.plt_ms if s.plt_ms else None for s in splits)
        out.append(line)
    by_factors: dict[str, dict[str, float]] = defaultdict(dict)
    for line in out:
        by_factors[line["factors"]][line["scheme"]] = line["plt_mean_s"]
    for line in out:
        cubic = by_factors[line["factors"]].get("cubic")
        line["vs_cubic_pct"] = (100 * (cubic - line["plt_mean_s"]) / cubic if cubic and line["scheme"] != "cubic"
                                else math.nan)
    return out


COLUMNS = (("factors", "factor set"), ("scheme", "scheme"), ("loads", "loads"), ("plt_mean_s", "PLT mean s"),
           ("vs_cubic_pct", "faster than cubic %"), ("rto_per_load", "RTOs/load"),
           ("ss_exit_early", "early SS exit"), ("ss_exit_loss", "SS exit on loss"), ("queued_share", "queued"),
           ("window_share", "held back"), ("app_share", "app"), ("claw_wireline", "CLAW wireline"),
           ("claw_no_feedback", "CLAW no feedback"))


def cell(key: str, value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if key.endswith("_share") or key.startswith(("ss_exit", "claw_")):
            return f"{100 * value:.0f} %"
        return f"{value:+.1f}" if key == "vs_cubic_pct" else f"{value:.2f}"
    return str(value)
