"""Background flows on the replay's own UE, and what each did during each load.

A replay (``flows`` in its config, ``--flow`` repeatable) or any other run of a cell can add
flows on UE 0 beside the page: bulk, on/off or Poisson downloads from the core namespace
(:class:`~clawbed.replay.network.crosstraffic.UeFlow`, the sender and sink the other UEs'
traffic uses), which share UE 0's base-station queue with the page. Each has its own scheme
(the sender's congestion control, per socket) and its own window settings at the UE: a
receive buffer (``rmem``: SO_RCVBUF on its sink) and DRWA (``drwa``). One DRWA controller
serves UE 0 (:meth:`FlowSet.drwa_select`): the page's connections when the run asks for DRWA,
and the flows that ask for it; the others' ACKs are left alone.

Per load (:meth:`FlowSet.write_load`), each flow's figures over the load's span go into the
load's directory as ``flows.json`` (with every fetch) and ``flows.csv`` (one row a flow):

- ``bytes``: bytes the UE acknowledged (TCP payload), and ``mbit_s`` over the span, from the
  sender's running totals (TCP_INFO every 50 ms, interpolated to the span's ends);
- ``retransmits``: segments the sender retransmitted in the span (TCP_INFO's total_retrans);
- ``snd_wnd_max_bytes``: the largest window the UE advertised to it (what ``rmem``/DRWA cap);
- for on/off and Poisson flows, the transfers (fetches) that started in the span: their
  completion times (connect until the UE's receiver closed: a handshake, the transfer and a
  round trip), and how many were still open or skipped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clawbed.emulator.topology import CellTopology
from clawbed.netns import Resources
from clawbed.replay import drwa
from clawbed.replay.network.crosstraffic import UeFlow, UeFlowSpec, build_ue_flows
from clawbed.replay.rundir import write_csv

#: Columns of a load's ``flows.csv`` (and of the run's, after ``load``).
FLOW_COLUMNS = ("flow", "kind", "scheme", "cc", "rmem", "drwa", "t_start_unix_s", "t_end_unix_s", "bytes", "mbit_s",
                "retransmits", "snd_wnd_max_bytes", "fetches_started", "fetches_done", "fetches_open",
                "fetches_skipped", "fetch_ms_p50", "fetch_ms_p95", "fetch_ms_max")


def _at(rows: list[dict[str, Any]], key: str, t: float) -> float | None:
    """``key`` of the progress lines linearly interpolated at time ``t`` (the first line
    before the first sample, the last after the last); None without lines."""
    if not rows:
        return None
    if t <= rows[0]["t_unix_s"]:
        return float(rows[0][key])
    for a, b in zip(rows, rows[1:]):
        if a["t_unix_s"] <= t <= b["t_unix_s"]:
            span = b["t_unix_s"] - a["t_unix_s"]
            share = (t - a["t_unix_s"]) / span if span > 0 else 1.0
            return float(a[key]) + share * (float(b[key]) - float(a[key]))
    return float(rows[-1][key])


def _percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1, linear between ranks, as numpy's default) of ``values``, or
    None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (pos - low) * (ordered[high] - ordered[low]), 1)


def flow_figures(flow: UeFlow, t0: float, t1: float) -> dict[str, Any]:
    """What ``flow`` did in [t0, t1] (Unix s): the module docstring's figures."""
    progress = flow.progress()
    within = [r for r in progress if t0 <= r["t_unix_s"] <= t1]
    acked = [_at(progress, "bytes_acked", t) for t in (t0, t1)]
    retrans = [_at(progress, "retrans", t) for t in (t0, t1)]
    nbytes = round(acked[1] - acked[0]) if acked[0] is not None and acked[1] is not None else None
    windows = [r["snd_wnd_max"] for r in within if r.get("snd_wnd_max") is not None]
    out: dict[str, Any] = {
        "flow": flow.name, "kind": flow.spec.kind, "scheme": flow.spec.scheme, "cc": flow.cc, "rmem": flow.spec.rmem,
        "drwa": flow.spec.drwa, "t_start_unix_s": t0, "t_end_unix_s": t1, "bytes": nbytes,
        "mbit_s": round(nbytes * 8 / (t1 - t0) / 1e6, 3) if nbytes is not None and t1 > t0 else None,
        "retransmits": round(retrans[1] - retrans[0]) if retrans[0] is not None and retrans[1] is not None else None,
        "snd_wnd_max_bytes": max(windows) if windows else None,
    }
    if flow.spec.kind != "bulk":
        started = [t for t in flow.transfers() if t0 <= t.get("t_start_unix_s", -1.0) <= t1]
        done = [t for t in started if "t_end_unix_s" in t]
        fetch_ms = [round((t["t_end_unix_s"] - t["t_start_unix_s"]) * 1000, 1) for t in done]
        skipped = sum(1 for t in started if t.get("skipped"))
        failed = [t["error"] for t in started if "error" in t]
        out.update(fetches_started=len(started), fetches_done=len(done),
                   fetches_open=len(started) - len(done) - skipped - len(failed), fetches_skipped=skipped,
                   fetch_ms_p50=_percentile(fetch_ms, 0.5), fetch_ms_p95=_percentile(fetch_ms, 0.95),
                   fetch_ms_max=max(fetch_ms) if fetch_ms else None,
                   fetches=[{"bytes": t["bytes"], "t_start_unix_s": t["t_start_unix_s"],
                             "fetch_ms": ms, "retransmits": t.get("retrans")} for t, ms in zip(done, fetch_ms)],
                   fetch_errors=failed)
    return out


class FlowSet:
    """The background flows of one UE (UE 0: a replay's own), started together; see the
    module docstring."""

    def __init__(self, specs: Sequence[UeFlowSpec], seed: int, ue_index: int = 0) -> None:
        self.specs = list(specs)
        self.flows: list[UeFlow] = build_ue_flows(self.specs, seed, ue_index)
        self.ue_index = ue_index
        #: Every load's rows (``load`` first), for the run's ``flows.csv`` and the summary.
        self.rows: list[dict[str, Any]] = []

    @property
    def wants_drwa(self) -> bool:
        return any(f.spec.drwa for f in self.flows)

    def drwa_select(self, page: bool) -> drwa.FlowSelector | None:
        """Which of the UE's connections DRWA drives: the flows that ask for it, and (``page``)
        every connection that is not a flow's; None: all of them (there are no flows)."""
        if not self.flows:
            return None if page else (lambda flow: False)
        ports = {f.port: f.spec.drwa for f in self.flows}

        def select(flow: tuple[str, int, str, int]) -> bool:
            return ports.get(flow[1], page)  # flow[1]: the UE's port (a flow's receiver's)

        return select

    def start(self, res: Resources, topo: CellTopology) -> None:
        """Start every flow (returns once each receiver listens and each sender runs)."""
        for flow in self.flows:
            flow.start(res, topo)

    def stop(self) -> None:
        for flow in reversed(self.flows):
            flow.stop()

    def start_with_drwa(self, res: Resources, topo: CellTopology, run_dir: Path, page: bool = False) -> drwa.Drwa | None:
        """For a run without a replay's own DRWA (``clawbed emu run``): the UE's DRWA when a
        flow (or ``page``: every other connection) asks for it, attached before the flows'
        first SYN (it reads their window scale there), then the flows."""
        controller = None
        if self.wants_drwa or page:
            ue = topo.ues[self.ue_index]
            controller = drwa.Drwa(netns=ue.ns.name, dev=ue.tun, run_id=res.run_id, run_dir=run_dir,
                                   ue_id=self.ue_index, ledger=res.ledger, log_path=run_dir / "drwa.csv",
                                   select=self.drwa_select(page))
            res.callback(controller.close)
        self.start(res, topo)
        return controller

    def finish(self, out_dir: Path, t0: float, t1: float) -> list[str]:
        """For a run without loads (``clawbed emu run``): every flow's figures over [t0, t1] into
        ``out_dir/flows.json`` and ``flows.csv``, the flows stopped; the summary lines."""
        self.keep(None, self.write_load(out_dir, t0, t1))
        self.stop()
        return self.summary()

    def figures(self, t0: float, t1: float) -> list[dict[str, Any]]:
        """Every flow's figures over [t0, t1] (Unix s)."""
        return [flow_figures(f, t0, t1) for f in self.flows]

    def write_load(self, load_dir: Path, t0: float, t1: float) -> list[dict[str, Any]]:
        """Every flow's figures over one load's span into ``load_dir/flows.json`` and
        ``flows.csv``; returned for :meth:`keep` (a load run again is not kept)."""
        rows = self.figures(t0, t1)
        load_dir.mkdir(parents=True, exist_ok=True)
        (load_dir / "flows.json").write_text(json.dumps(rows, indent=1) + "\n")
        write_csv(load_dir / "flows.csv", FLOW_COLUMNS, rows)
        return rows

    def keep(self, load: int | None, rows: list[dict[str, Any]]) -> None:
        """A kept load's rows, for the run's table (:meth:`write_run`) and :meth:`summary`."""
        self.rows.extend({"load": load, **r} for r in rows)

    def write_run(self, path: Path) -> int:
        """Every load's rows in one CSV (``load`` first)."""
        return write_csv(path, ("load", *FLOW_COLUMNS), self.rows)

    def summary(self) -> list[str]:
        """One line per flow over every load written: bytes, throughput, retransmissions, and
        fetch times for fetch flows."""
        lines = []
        for flow in self.flows:
            rows = [r for r in self.rows if r["flow"] == flow.name and r["bytes"] is not None]
            settings = ", ".join(f"{k}={v}" for k, v in flow.spec.describe().items() if k != "kind")
            if not rows:
                lines.append(f"{flow.name} ({settings}): nothing measured")
                continue
            total = sum(r["bytes"] for r in rows)
            seconds = sum(r["t_end_unix_s"] - r["t_start_unix_s"] for r in rows)
            retrans = sum(r["retransmits"] or 0 for r in rows)
            span = f"{len(rows)} load(s)" if rows[0]["load"] is not None else f"{seconds:.1f} s"
            line = (f"{flow.name} ({settings}): {total:,} B in {span}, "
                    f"{total * 8 / seconds / 1e6 if seconds > 0 else 0:.2f} Mbit/s, {retrans} retransmissions")
            if flow.spec.kind != "bulk":
                times = [f["fetch_ms"] for r in rows for f in r.get("fetches", [])]
                p50, p95 = _percentile(times, 0.5), _percentile(times, 0.95)
                line += (f"; {len(times)} fetches done, median {p50:,.0f} ms, p95 {p95:,.0f} ms"
                         if times else "; no fetch done")
            lines.append(line)
        return lines

    def describe(self) -> list[dict[str, Any]]:
        """What runs, for the manifest."""
        return [f.describe() for f in self.flows]

