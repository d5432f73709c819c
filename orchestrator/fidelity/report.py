"""``clawbed fidelity report``: one line per row of the table (every ID, run or not): in a
terminal its ID, status, the testbed's figure and the reason, each shortened to fit; as CSV,
JSON or Markdown also the paper's value, the criterion, the run directory, and the kernel
and both ends' sysctls. ``clawbed fidelity show ROW`` prints one row whole, with its checks.
The same as an HTML page with each row's figure (plotly, offline: ``plotly.min.js`` beside
the page)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from clawbed.errors import InputError
from clawbed.orchestrator.fidelity.definitions import load_rows, table_ids
from clawbed.orchestrator.fidelity.results import NOT_RUN, read_rows
from clawbed.tables import Column, Listing, TerminalTable, styled

COLUMNS = ("row", "status", "paper", "testbed", "criterion", "reason", "run dir")
PLOTLY_JS = "plotly.min.js"


def sysctl_summary(sysctls: dict[str, Any]) -> str:
    """``server frto=2 recovery=1 ssai=0 nms=1 rmem=… | ue …``."""
    short = {"tcp_frto": "frto", "tcp_recovery": "recovery", "tcp_slow_start_after_idle": "ssai",
             "tcp_no_metrics_save": "nms", "tcp_rmem": "rmem"}
    parts = []
    for end in ("server", "ue"):
        values = sysctls.get(end)
        if isinstance(values, dict):
            parts.append(f"{end} " + " ".join(f"{s}={values.get(k, '?')}" for k, s in short.items()))
    return " | ".join(parts) or json.dumps(sysctls)[:120]


def report_rows(store_path: Path | None, run: str | None = None) -> list[dict[str, Any]]:
    """Every table ID with its latest recorded result (``not run`` when there is none)."""
    recorded = read_rows(store_path, run)
    defs = load_rows()
    rows = []
    for row_id in table_ids():
        d = defs.get(row_id)
        r = recorded.get(row_id)
        if r is None:
            rows.append({"row_id": row_id, "status": NOT_RUN, "paper": d.paper if d else "", "testbed": "",
                         "criterion": d.criterion if d else "", "reason": "no result in the store"
                         + ("" if d else "; no row definition"), "run_dir": "", "kernel": "", "sysctls": {}, "checks": [],
                         "title": d.title if d else "", "run": ""})
        else:
            rows.append({**r, "title": d.title if d else ""})
    return rows


#: The status colours of the terminal listing.
STATUS_STYLE = {"pass": "green", "fail": "red", "error": "red", "not-emulated": "yellow", "skipped": "cyan"}


def report_listing(rows: list[dict[str, Any]], title: str) -> Listing:
    """The report as a listing: in a table one line per row (ID, status, the testbed's figure and
    the reason, shortened to fit: ``clawbed fidelity show ROW`` has the whole row); in csv, json
    and markdown every field."""
    columns = (Column("row_id", "row"), Column("status", style=styled(STATUS_STYLE)),
               Column("testbed", fit="cut", min_width=16), Column("reason", fit="cut", min_width=16),
               Column("paper", in_table=False), Column("criterion", in_table=False),
               Column("run", in_table=False), Column("run_dir", in_table=False), Column("kernel", in_table=False),
               Column("sysctls", in_table=False), Column("title", in_table=False))
    return Listing(title, columns,
                   [(r["row_id"], r["status"], r["testbed"] or "", r["reason"] or "", r["paper"] or "",
                     r["criterion"] or "", r.get("run") or "", r["run_dir"] or "", r["kernel"] or "",
                     sysctl_summary(r["sysctls"]) if r["sysctls"] else "", r.get("title") or "") for r in rows],
                   caption="clawbed fidelity show ROW: a row whole, with its checks")


def find_row(rows: list[dict[str, Any]], row_id: str) -> dict[str, Any]:
    """The report's row ``row_id`` (any case); an :class:`InputError` listing the IDs otherwise."""
    for r in rows:
        if r["row_id"].lower() == row_id.lower():
            return r
    raise InputError(f"ROW {row_id!r}: no such row of docs/fidelity-table.md (rows: "
                     f"{', '.join(r['row_id'] for r in rows)})")


def row_fields(r: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, text) of one row, in the order ``fidelity show`` prints them."""
    return [("row", f"{r['row_id']}: {r.get('title') or ''}"), ("status", r["status"]),
            ("paper", r["paper"] or ""), ("criterion", r["criterion"] or ""), ("testbed", r["testbed"] or ""),
            ("reason", r["reason"] or ""), ("fidelity run", r.get("run") or ""), ("run dir", r["run_dir"] or ""),
            ("kernel", r["kernel"] or ""), ("sysctls", sysctl_summary(r["sysctls"]) if r["sysctls"] else "")]


def _grid(title: str | None = None) -> TerminalTable:
    """Names beside values, the values wrapped at words: a record, not a table of many columns."""
    grid = TerminalTable(title=title, title_justify="left", box=None, show_header=False, pad_edge=False)
    grid.add_column("field", no_wrap=True, style="bold")
    grid.add_column("value", overflow="fold")
    return grid


def row_tables(r: dict[str, Any]) -> list[TerminalTable]:
    """One row whole for a terminal: its fields (values wrapped at words beside their names),
    then each check as a record of its own (what was measured against what target, the
    verdict, why): check names and causes are sentences, too long for columns side by side."""
    fields = _grid()
    for name, text in row_fields(r):
        fields.add_row(name, text or "–")
    tables = [fields]
    for n, c in enumerate(r["checks"], start=1):
        check = _grid(f"check {n} of {len(r['checks'])}")
        ok = "not evaluated" if c["ok"] is None else ("[green]yes[/green]" if c["ok"] else "[red]no[/red]")
        for name, text in (("check", c["name"]), ("testbed", c["value"]), ("target", c["target"]), ("ok", ok),
                           ("note", c.get("note", "")), ("cause", c.get("cause", ""))):
            if text:
                check.add_row(name, text)
        tables.append(check)
    return tables


def write_html(rows: list[dict[str, Any]], path: Path) -> Path:
    """The report as one HTML page with each row's figure; returns its path."""
    import plotly.offline

    path.parent.mkdir(parents=True, exist_ok=True)
    js = path.parent / PLOTLY_JS
    if not js.is_file():
        js.write_text(plotly.offline.get_plotlyjs())
    colour = {"pass": "#2a7", "fail": "#c33", "not-emulated": "#c90", "skipped": "#39c"}
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>clawbed fidelity report</title>"
             f"<script src='{PLOTLY_JS}'></script><style>body{{font-family:sans-serif;margin:2em;max-width:1400px}}"
             "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:4px;vertical-align:top}"
             "section{margin:2em 0;border-top:1px solid #aaa}.st{font-weight:bold;color:white;padding:2px 6px}"
             "</style></head><body><h1>clawbed fidelity report</h1>",
             "<p>" + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())) + f" — {len(rows)} rows of "
             "docs/fidelity-table.md</p><table><tr>" + "".join(f"<th>{c}</th>" for c in COLUMNS) + "</tr>"]
    for r in rows:
        st = r["status"]
        parts.append("<tr>" + f"<td><a href='#{r['row_id']}'>{r['row_id']}</a></td>"
                     f"<td><span class='st' style='background:{colour.get(st, '#888')}'>{html.escape(st)}</span></td>"
                     + "".join(f"<td>{html.escape(str(r[k] or ''))}</td>" for k in ("paper", "testbed", "criterion", "reason",
                                                                                   "run_dir")) + "</tr>")
    parts.append("</table>")
    for r in rows:
        parts.append(f"<section id='{r['row_id']}'><h2>{r['row_id']}: {html.escape(r.get('title', ''))} — "
                     f"{html.escape(r['status'])}</h2><p><b>Paper:</b> {html.escape(r['paper'] or '')}<br>"
                     f"<b>Criterion:</b> {html.escape(r['criterion'] or '')}<br><b>Testbed:</b> {html.escape(r['testbed'] or '')}"
                     f"<br><b>Reason:</b> {html.escape(r['reason'] or '')}<br><b>Kernel:</b> {html.escape(r['kernel'] or '')}"
                     f"<br><b>Sysctls:</b> {html.escape(sysctl_summary(r['sysctls'] or {}))}"
                     f"<br><b>Run dir:</b> {html.escape(r['run_dir'] or '')}</p>")
        if r["checks"]:
            def why(c: dict[str, Any]) -> str:
                return " — ".join(x for x in (c.get("note", ""), c.get("cause", "")) if x)

            parts.append("<table><tr><th>check</th><th>testbed</th><th>target</th><th>ok</th><th>note</th></tr>"
                         + "".join(f"<tr><td>{html.escape(c['name'])}</td><td>{html.escape(c['value'])}</td>"
                                   f"<td>{html.escape(c['target'])}</td><td>{'–' if c['ok'] is None else ('yes' if c['ok'] else 'no')}"
                                   f"</td><td>{html.escape(why(c))}</td></tr>" for c in r["checks"]) + "</table>")
        fig_path = Path(r["run_dir"]) / "figure.json" if r["run_dir"] else None
        if fig_path is not None and fig_path.is_file():
            import plotly.io

            fig = plotly.io.from_json(fig_path.read_text())
            parts.append(fig.to_html(full_html=False, include_plotlyjs=False))
        parts.append("</section>")
    parts.append("</body></html>")
    path.write_text("\n".join(parts))
    return path
