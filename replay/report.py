"""A replay's results: PLT statistics per scheme, the terminal table, and the HTML report.

The statistics and the table need only ``results.jsonl``; the HTML report also reads each
load's time series (``loads/NNN-<scheme>/``, see :mod:`.rundir`) and shows:

1. PLT per scheme (box with every load's point);
2. the server's cwnd vs time (with W_claw and the shadow W_cubic where the scheme's CC reports
   them, and the title says so), one figure per scheme with a menu to select the load (the
   median-PLT load first; the menu names the load shown);
3. the cell's load, ground truth vs the CLAW client's estimate (menu: load);
4. the UE's downlink throughput from the ground truth (menu: load);
5. the packets' RTT as the server's TCP measures it, per flow (menu: load).

``plotly.min.js`` is written once beside ``report.html``, which loads it by relative path:
the report works offline and each figure does not carry 3 MB of JavaScript.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.offline

from clawbed.files import atomic_write
from clawbed.replay.records import LoadRecord
from clawbed.replay.rundir import MANIFEST, read_csv, read_results
from clawbed.tables import TerminalTable

REPORT_HTML = "report.html"
PLOTLY_JS = "plotly.min.js"
#: The scheme every other is compared with.
BASELINE = "cubic"
#: Width of the bins of the throughput and cell-load series, s.
BIN_S = 0.05


@dataclass(frozen=True)
class SchemeStats:
    """PLT statistics of one scheme over its successful loads (ms); None when it has none."""

    scheme: str
    loads: int
    ok: int
    mean_ms: float | None
    median_ms: float | None
    p95_ms: float | None
    worst_ms: float | None
    #: (baseline − this) / baseline of the mean and median PLT, %; None for the baseline
    #: itself or without a baseline.
    mean_reduction_pct: float | None = None
    median_reduction_pct: float | None = None

    @property
    def failed(self) -> int:
        return self.loads - self.ok


def _reduction(baseline: float | None, value: float | None) -> float | None:
    if baseline is None or value is None or baseline <= 0:
        return None
    return 100.0 * (baseline - value) / baseline


def plt_stats(records: Iterable[LoadRecord], baseline: str = BASELINE) -> list[SchemeStats]:
    """Per scheme (in order of first appearance): loads, successes, mean, median, p95 (linear
    interpolation) and worst PLT, and the reduction of mean and median vs ``baseline``."""
    plts: dict[str, list[float]] = {}
    loads: dict[str, int] = {}
    for r in records:
        scheme = r.scheme
        loads[scheme] = loads.get(scheme, 0) + 1
        plts.setdefault(scheme, [])
        if r.measured:
            plts[scheme].append(float(r.plt_ms or 0.0))  # measured: plt_ms is set
    raw: list[SchemeStats] = []
    for scheme, values in plts.items():
        a = np.asarray(values)
        has = a.size > 0
        raw.append(SchemeStats(
            scheme, loads[scheme], int(a.size),
            float(a.mean()) if has else None, float(np.median(a)) if has else None,
            float(np.percentile(a, 95)) if has else None, float(a.max()) if has else None))
    base = next((s for s in raw if s.scheme == baseline), None)
    if base is None:
        return raw
    return [s if s.scheme == baseline else
            SchemeStats(s.scheme, s.loads, s.ok, s.mean_ms, s.median_ms, s.p95_ms, s.worst_ms,
                        _reduction(base.mean_ms, s.mean_ms), _reduction(base.median_ms, s.median_ms))
            for s in raw]


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:+.1f} %"


def stats_table(stats: Sequence[SchemeStats], title: str = "Page load time per scheme",
                baseline: str = BASELINE) -> TerminalTable:
    """The terminal table: loads, mean, median, p95, worst PLT (ms) and the reductions vs
    ``baseline``; short headers and a caption, so that it fits an 80-column terminal."""
    table = TerminalTable(title=title, caption=f"PLT in ms; reduction: vs {baseline}, positive = faster")
    table.add_column("scheme", style="bold")
    table.add_column("loads ok", justify="right")
    for name in ("mean", "median", "p95", "worst"):
        table.add_column(name, justify="right")
    table.add_column("mean reduction", justify="right")
    table.add_column("median reduction", justify="right")
    for s in stats:
        ok = f"{s.ok}/{s.loads}" if s.failed == 0 else f"[red]{s.ok}/{s.loads}[/red]"
        table.add_row(s.scheme, ok, _ms(s.mean_ms), _ms(s.median_ms), _ms(s.p95_ms), _ms(s.worst_ms),
                      _pct(s.mean_reduction_pct), _pct(s.median_reduction_pct))
    return table


# -- time series of one load --------------------------------------------------------------------

def _floats(values: Sequence[str]) -> np.ndarray:
    """CSV text values as floats (empty → NaN)."""
    return np.array([float(v) if v not in ("", "None") else math.nan for v in values], dtype=float)


def _binned(t_s: np.ndarray, values: np.ndarray, bin_s: float, how: str) -> tuple[list[float | None], list[float | None]]:
    """``values`` summed or averaged over bins of ``bin_s`` of ``t_s``; (bin starts, values)."""
    if t_s.size == 0:
        return [], []
    index = np.floor(t_s / bin_s).astype(np.int64)
    index -= index.min()
    sums = np.bincount(index, weights=np.nan_to_num(values))
    if how == "sum":
        out = sums
    else:
        counts = np.bincount(index, weights=~np.isnan(values))
        out = np.divide(sums, counts, out=np.full_like(sums, math.nan), where=counts > 0)
    starts = (np.arange(out.size) + np.floor(t_s.min() / bin_s)) * bin_s
    return _round(starts), _round(out)


def _round(a: np.ndarray, digits: int = 4) -> list[float | None]:
    """Plain (JSON) numbers, NaN as None, so the report's data stay readable text."""
    return [None if math.isnan(x) else round(float(x), digits) for x in a]


@dataclass
class LoadSeries:
    """One load's record and its series, times in s since the load's start."""

    record: LoadRecord
    tcp: dict[str, list[str]]
    truth: dict[str, list[str]]
    estimates: dict[str, list[str]]

    @property
    def label(self) -> str:
        r = self.record
        plt = f"{r.plt_ms:,.0f} ms" if r.measured and r.plt_ms is not None else "failed"
        return f"load {r.load} · {r.scheme} · PLT {plt}"

    def since_start(self, unix_s: Sequence[str]) -> np.ndarray:
        """Unix times as s since the page's first connection (else the load's start)."""
        origin = self.record.t_first_flow_unix_s or self.record.t_start_unix_s
        if origin is None:  # the load never started (its scheme's set-up failed): no series
            return np.array([])
        return _floats(unix_s) - float(origin)

    def flows(self) -> dict[str, np.ndarray]:
        """Row indices of ``tcp.csv`` per flow."""
        names = np.array(self.tcp.get("flow", []))
        return {flow: np.flatnonzero(names == flow) for flow in dict.fromkeys(names.tolist())}


def read_load_series(run_dir: Path, record: LoadRecord) -> LoadSeries:
    load_dir = run_dir / record.load_dir
    return LoadSeries(record, read_csv(load_dir / "tcp.csv"), read_csv(load_dir / "truth.csv"),
                      read_csv(load_dir / "estimates.csv"))


def _cwnd_traces(s: LoadSeries) -> list[go.Scatter]:
    traces: list[go.Scatter] = []
    t = s.since_start(s.tcp.get("t_unix_s", []))
    for flow, rows in s.flows().items():
        for column, name, dash in (("cwnd_bytes", "cwnd", "solid"), ("w_claw_bytes", "W_claw", "dash"),
                                   ("w_cubic_bytes", "W_cubic", "dot")):
            y = _floats([s.tcp[column][i] for i in rows]) / 1000.0
            if np.all(np.isnan(y)):
                continue
            traces.append(go.Scatter(x=_round(t[rows]), y=_round(y), mode="lines", line={"dash": dash},
                                     name=f"{name} {flow}"))
    return traces


def _load_traces(s: LoadSeries) -> list[go.Scatter]:
    traces: list[go.Scatter] = []
    if s.truth:
        t = s.since_start(s.truth["t_unix_s"])
        n_rb = _floats(s.truth["n_rb"])
        for column, name in (("total_alloc_rbs", "truth: cell load A_k/N_rb"),
                             ("other_alloc_rbs", "truth: other users' RBs / N_rb")):
            x, y = _binned(t, _floats(s.truth[column]) / n_rb, BIN_S, "mean")
            traces.append(go.Scatter(x=x, y=y, mode="lines", name=name))
    if s.estimates:
        t = s.since_start(s.estimates["unix_s"])
        active = _floats(s.estimates["active"]) > 0
        load = _floats(s.estimates["load"])
        load[~active] = math.nan
        traces.append(go.Scatter(x=_round(t), y=_round(load), mode="lines", name="CLAW estimate L"))
    return traces


def _throughput_traces(s: LoadSeries) -> list[go.Scatter]:
    if not s.truth:
        return []
    t = s.since_start(s.truth["t_unix_s"])
    x, delivered = _binned(t, _floats(s.truth["delivered_bytes"]), BIN_S, "sum")
    mbps = [None if b is None else round(b * 8 / BIN_S / 1e6, 3) for b in delivered]
    return [go.Scatter(x=x, y=mbps, mode="lines", name="UE downlink delivered (truth)")]


def _rtt_traces(s: LoadSeries) -> list[go.Scatter]:
    t = s.since_start(s.tcp.get("t_unix_s", []))
    return [go.Scatter(x=_round(t[rows]), y=_round(_floats([s.tcp["srtt_ms"][i] for i in rows])), mode="lines",
                       name=f"srtt {flow}") for flow, rows in s.flows().items()]


def _selector_figure(title: str, y_title: str, per_load: Sequence[tuple[str, list[go.Scatter]]],
                     selected: int) -> go.Figure:
    """A figure holding every load's traces, one load visible at a time, chosen from a menu."""
    fig = go.Figure()
    owner: list[int] = []
    for i, (_, traces) in enumerate(per_load):
        for trace in traces:
            trace.visible = i == selected
            fig.add_trace(trace)
            owner.append(i)
    buttons = [{"label": label, "method": "update",
                "args": [{"visible": [o == i for o in owner]}, {"title.text": f"{title} — {label}"}]}
               for i, (label, _) in enumerate(per_load)]
    label = per_load[selected][0] if per_load else "no load"
    fig.update_layout(title={"text": f"{title} — {label}"}, xaxis_title="time since the page's first connection, s",
                      yaxis_title=y_title, height=460, margin={"t": 90},
                      # "active": the menu names the load shown (plotly's default names the first).
                      updatemenus=[{"buttons": buttons, "active": selected, "direction": "down", "x": 0,
                                    "xanchor": "left", "y": 1.16, "yanchor": "top"}] if len(buttons) > 1 else [])
    return fig


def _median_load(loads: Sequence[LoadSeries]) -> int:
    """Index of the load whose PLT is the median of the successful ones (0 if none succeeded)."""
    ok = [(s.record.plt_ms, i) for i, s in enumerate(loads) if s.record.measured]
    if not ok:
        return 0
    ok.sort()
    return ok[(len(ok) - 1) // 2][1]


def _plt_figure(records: Sequence[LoadRecord], schemes: Sequence[str]) -> go.Figure:
    fig = go.Figure()
    for scheme in schemes:
        ok = [r for r in records if r.scheme == scheme and r.measured]
        fig.add_trace(go.Box(y=[round(float(r.plt_ms or 0), 1) for r in ok], name=scheme, boxpoints="all",
                             jitter=0.4, pointpos=0, boxmean=True,
                             text=[f"load {r.load}" for r in ok], hovertemplate="%{text}: %{y} ms"))
    fig.update_layout(title="Page load time per scheme", yaxis_title="PLT, ms", height=460, showlegend=False)
    return fig


def build_figures(run_dir: Path) -> list[tuple[str, go.Figure]]:
    """(section heading, figure) of every view of the report."""
    records = read_results(run_dir)
    schemes = list(dict.fromkeys(r.scheme for r in records))
    series = [read_load_series(run_dir, r) for r in records]
    figures: list[tuple[str, go.Figure]] = [("Page load time", _plt_figure(records, schemes))]
    for scheme in schemes:
        mine = [s for s in series if s.record.scheme == scheme]
        per_load = [(s.label, _cwnd_traces(s)) for s in mine]
        # Titled by the series it has: W_claw and W_cubic only where the scheme's CC reports them.
        shown = dict.fromkeys(str(t.name).split(" ")[0] for _, traces in per_load for t in traces)
        what = ", ".join(("server cwnd" if name == "cwnd" else name) for name in shown) or "server cwnd"
        figures.append((f"Server cwnd vs time, {scheme}",
                        _selector_figure(f"{scheme}: {what}", "window, kB", per_load, _median_load(mine))))
    default = next((i for i, s in enumerate(series) if s.estimates), 0)
    for heading, title, y_title, make in (
            ("Cell load: ground truth vs CLAW estimate", "cell load", "fraction of the cell's RBs", _load_traces),
            ("Throughput", "UE downlink throughput", "Mbit/s", _throughput_traces),
            ("Packet RTT", "RTT measured by the server's TCP", "srtt, ms", _rtt_traces)):
        figures.append((heading, _selector_figure(title, y_title, [(s.label, make(s)) for s in series],
                                                  default if make is _load_traces else _median_load(series))))
    return figures


def _timing_section(records: Sequence[LoadRecord], manifest: dict[str, Any]) -> str:
    """Timing integrity: how many loads the emulator fell behind in, and a row per flagged one."""
    measured = [r for r in records if r.timing_ok is not None]
    flagged = [r for r in records if r.timing_ok is False]
    reruns = int(manifest.get("late_reruns", sum(r.late_reruns for r in records)))

    def ms(v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}"

    rows = "".join(
        f"<tr><td>{r.load} {html.escape(r.scheme)}</td><td>{ms(r.subframe_late_max_ms)}</td>"
        f"<td>{ms(r.subframe_late_p999_ms)}</td><td>{ms(r.delivery_err_max_ms)}</td>"
        f"<td>{ms(r.delivery_err_p999_ms)}</td><td>{ms(r.steal_pct)}</td></tr>" for r in flagged)
    table = ("<table><tr><th>flagged load</th><th>subframe lateness max, ms</th><th>p99.9</th>"
             f"<th>delivery error max, ms</th><th>p99.9</th><th>steal, %</th></tr>{rows}</table>" if flagged else "")
    worst = max((r.delivery_err_max_ms or 0.0 for r in measured), default=None)
    return (f"<section><h2>Timing integrity</h2><p>{len(measured)} load(s) measured, "
            f"<b>{len(flagged)} flagged</b> (the emulator fell behind by more than 1 ms), {reruns} load(s) run "
            f"again because of it; worst delivery error {ms(worst)} ms.</p>{table}</section>")


def write_report(run_dir: Path) -> Path:
    """Write ``report.html`` (and ``plotly.min.js`` once) into ``run_dir``; return the report's path."""
    run_dir = Path(run_dir)
    js = run_dir / PLOTLY_JS
    if not js.exists():
        with atomic_write(js, "w") as f:
            f.write(plotly.offline.get_plotlyjs())
    manifest = json.loads((run_dir / MANIFEST).read_text()) if (run_dir / MANIFEST).is_file() else {}
    records = read_results(run_dir)
    stats = plt_stats(records)
    sections = []
    for heading, fig in build_figures(run_dir):
        sections.append(f"<section><h2>{html.escape(heading)}</h2>"
                        f"{fig.to_html(full_html=False, include_plotlyjs=False)}</section>")
    rows = "".join(
        f"<tr><td>{html.escape(s.scheme)}</td><td>{s.ok}/{s.loads}</td><td>{_ms(s.mean_ms)}</td>"
        f"<td>{_ms(s.median_ms)}</td><td>{_ms(s.p95_ms)}</td><td>{_ms(s.worst_ms)}</td>"
        f"<td>{_pct(s.mean_reduction_pct)}</td><td>{_pct(s.median_reduction_pct)}</td></tr>" for s in stats)
    timing = _timing_section(records, manifest)
    config = manifest.get("config", {})
    summary = ", ".join(f"{k} {html.escape(str(v))}" for k, v in config.items() if v is not None)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>clawbed replay {html.escape(run_dir.name)}</title>
<script src="{PLOTLY_JS}"></script>
<style>body{{font-family:sans-serif;margin:2em;max-width:1200px}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}} td:first-child{{text-align:left}}
section{{margin-top:2em}}</style></head>
<body><h1>clawbed replay {html.escape(run_dir.name)}</h1>
<p>{summary}</p>
<p>status: {html.escape(str(manifest.get("status", "?")))}; {len(records)} load(s).</p>
<table><tr><th>scheme</th><th>loads ok</th><th>mean PLT, ms</th><th>median</th><th>p95</th><th>worst</th>
<th>mean reduction vs {BASELINE}</th><th>median reduction vs {BASELINE}</th></tr>{rows}</table>
{timing}
{"".join(sections)}
</body></html>
"""
    out = run_dir / REPORT_HTML
    with atomic_write(out, "w") as f:
        f.write(page)
    return out
