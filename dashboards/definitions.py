"""The Grafana dashboards (Cell, Flow, PLT) and provisioning files, as code.

``clawbed dash build`` writes :func:`rendered` into ``dashboards/``; ``clawbed dash check``
(and CI, ``tests/test_dashboards_generated.py``) renders again in memory and fails on any
difference, so the committed JSON always matches this source.

Queries are InfluxQL on the measurements of :mod:`clawbed.dashboards.ingest`. Every query
filters on the template variables ``$run``, ``$scenario`` and ``$scheme`` (multi-valued:
Grafana substitutes a regex alternative, hence ``=~ /^$var$/``) and on ``$timeFilter``.
"""

from __future__ import annotations

import json
from pathlib import Path

from grafanalib._gen import DashboardEncoder
from grafanalib.core import (
    BYTES_FORMAT,
    MILLISECONDS_FORMAT,
    Dashboard,
    GridPos,
    Histogram,
    Table,
    Template,
    Templating,
    Time,
    TimeSeries,
)
from grafanalib.influxdb import InfluxDBTarget

from clawbed.dashboards.influxdb import DATABASE, DEFAULT_PORT

#: The provisioned datasource's uid; every panel and variable names it.
DATASOURCE_UID = "clawbed-influxdb"
DATASOURCE = {"type": "influxdb", "uid": DATASOURCE_UID}
#: Where the dashboards' JSON is inside the Vagrant VM (the repository is synced to /vagrant).
VM_DASHBOARDS_PATH = "/vagrant/dashboards/generated"
HERE = Path(__file__).resolve().parent
GENERATED = HERE / "generated"
PROVISIONING = HERE / "provisioning"

#: The filter every series query carries.
FILTER = '"run" =~ /^$run$/ AND "scenario" =~ /^$scenario$/ AND "scheme" =~ /^$scheme$/ AND $timeFilter'
PANEL_HEIGHT = 8
PANEL_WIDTH = 12


def series(select: str, measurement: str, *, by: str = "", alias: str, ref: str) -> InfluxDBTarget:
    """A time-series target: ``select`` (aggregates) of ``measurement`` per ``$__interval``,
    also grouped by the tags in ``by`` (e.g. ``"ue"``), empty intervals left out."""
    group = ", ".join(["time($__interval)"] + [f'"{tag}"' for tag in by.split(",") if tag])
    return InfluxDBTarget(query=f'SELECT {select} FROM "{measurement}" WHERE {FILTER} GROUP BY {group} fill(none)',
                          alias=alias, datasource=DATASOURCE, rawQuery=True, refId=ref)


def timeseries(title: str, targets: list[InfluxDBTarget], *, slot: int, unit: str = "", description: str = "",
               draw: str = "line") -> TimeSeries:
    """A time-series panel in grid slot ``slot`` (two per row)."""
    return TimeSeries(title=title, description=description, dataSource=DATASOURCE, targets=targets, unit=unit,
                      drawStyle=draw, spanNulls=True, gridPos=_grid(slot), tooltipMode="multi",
                      legendDisplayMode="table", legendCalcs=["mean", "max"])


def _grid(slot: int) -> GridPos:
    return GridPos(h=PANEL_HEIGHT, w=PANEL_WIDTH, x=(slot % 2) * PANEL_WIDTH, y=(slot // 2) * PANEL_HEIGHT)


def variables(source: str) -> Templating:
    """``run``, ``scenario`` and ``scheme``, each narrowed by the ones before it; ``run``
    comes from ``source`` (the measurement every run of this dashboard has)."""

    def tag_values(name: str, label: str, query: str) -> Template:
        # refresh 2: re-read on every time-range change, so new runs appear.
        return Template(name=name, label=label, query=query, dataSource=DATASOURCE, multi=True, includeAll=True,
                        refresh=2, sort=1)

    return Templating(list=[
        tag_values("run", "Run", f'SHOW TAG VALUES FROM "{source}" WITH KEY = "run"'),
        tag_values("scenario", "Scenario",
                   f'SHOW TAG VALUES FROM "{source}" WITH KEY = "scenario" WHERE "run" =~ /^$run$/'),
        tag_values("scheme", "Scheme",
                   f'SHOW TAG VALUES FROM "{source}" WITH KEY = "scheme" WHERE "run" =~ /^$run$/ '
                   'AND "scenario" =~ /^$scenario$/'),
    ])


def cell_dashboard() -> Dashboard:
    """The cell: true vs CLAW-estimated load, own RBs, MCS, RSRQ, TB sizes, BS queue."""
    panels = [
        timeseries("Cell load: ground truth vs CLAW estimate", [
            series('mean("load")', "cell", alias="true load (A_k / N_rb)", ref="A"),
            series('mean("load")', "claw", by="ue", alias="CLAW estimate L, UE $tag_ue", ref="B"),
        ], slot=0, unit="percentunit", description="Truth: all RBs allocated over the cell's RBs. CLAW: the "
                                                   "client's L from the diag feed's RSRQ."),
        timeseries("Own RBs per subframe", [
            series('mean("alloc_rbs")', "ue", by="ue", alias="truth S_k, UE $tag_ue", ref="A"),
            series('mean("own_rbs")', "diag", by="ue", alias="diag feed, UE $tag_ue", ref="B"),
            series('mean("other_alloc_rbs")', "cell", alias="other users (truth)", ref="C"),
        ], slot=1, unit="none"),
        timeseries("MCS", [
            series('mean("mcs")', "ue", by="ue", alias="truth, UE $tag_ue", ref="A"),
            series('mean("mcs")', "diag", by="ue", alias="diag feed, UE $tag_ue", ref="B"),
            series('mean("mean_mcs")', "claw", by="ue", alias="CLAW window MCS, UE $tag_ue", ref="C"),
        ], slot=2, unit="none"),
        timeseries("RSRQ", [
            series('mean("rsrq_db")', "cell", alias="truth (noise-free)", ref="A"),
            series('mean("rsrq_db")', "diag", by="ue", alias="diag feed, UE $tag_ue", ref="B"),
        ], slot=3, unit="dB"),
        timeseries("Base-station queue", [
            series('mean("queue_bytes")', "ue", by="ue", alias="mean, UE $tag_ue", ref="A"),
            series('max("queue_bytes_max")', "ue", by="ue", alias="max, UE $tag_ue", ref="B"),
        ], slot=4, unit=BYTES_FORMAT),
        timeseries("Transport block size per subframe", [
            series('mean("tbs_bits") / 8', "ue", by="ue", alias="truth, UE $tag_ue", ref="A"),
            series('mean("tb_bytes")', "diag", by="ue", alias="diag feed, UE $tag_ue", ref="B"),
        ], slot=5, unit=BYTES_FORMAT),
        timeseries("CLAW bottleneck detector", [
            series('mean("cellular")', "claw", by="ue", alias="cellular bottleneck (share), UE $tag_ue", ref="A"),
            series('mean("saturated")', "claw", by="ue", alias="saturated (share), UE $tag_ue", ref="B"),
            series('sum("verdicts")', "claw", by="ue", alias="verdicts, UE $tag_ue", ref="C"),
        ], slot=6, unit="none"),
        timeseries("CLAW RB estimates per window", [
            series('mean("n_s_rbs")', "claw", by="ue", alias="own RBs N_s, UE $tag_ue", ref="A"),
            series('mean("n_f_rbs")', "claw", by="ue", alias="free RBs N_f, UE $tag_ue", ref="B"),
        ], slot=7, unit="none", description="RBs summed over the client's window T (not per subframe)."),
    ]
    return Dashboard(title="clawbed: Cell", uid="clawbed-cell", tags=["clawbed"], panels=panels,
                     templating=variables("cell"), time=Time("now-15m", "now"), refresh="", timezone="browser",
                     schemaVersion=36, description="Ground truth of the emulated cell, the UE's diag feed and "
                                                   "the CLAW client's estimates")


def flow_dashboard() -> Dashboard:
    """The server's flows: cwnd vs W_claw vs W_cubic, srtt, throughput, losses by cause."""
    panels = [
        timeseries("cwnd vs W_claw vs W_cubic", [
            series('mean("cwnd_bytes")', "tcp", by="flow", alias="cwnd $tag_flow", ref="A"),
            series('mean("w_claw_bytes")', "tcp", by="flow", alias="W_claw (CC) $tag_flow", ref="B"),
            series('mean("w_cubic_bytes")', "tcp", by="flow", alias="W_cubic (shadow) $tag_flow", ref="C"),
            series('mean("w_claw_bytes")', "claw", by="ue", alias="W_claw (client estimate) UE $tag_ue", ref="D"),
        ], slot=0, unit=BYTES_FORMAT),
        timeseries("Smoothed RTT", [
            series('mean("srtt_ms")', "tcp", by="flow", alias="srtt $tag_flow", ref="A"),
            series('min("min_rtt_ms")', "tcp", by="flow", alias="min RTT $tag_flow", ref="B"),
        ], slot=1, unit=MILLISECONDS_FORMAT),
        timeseries("Throughput", [
            series('mean("throughput_bps")', "ue", by="ue", alias="delivered to UE $tag_ue (truth)", ref="A"),
            series('mean("delivery_rate_bps")', "tcp", by="flow", alias="TCP delivery rate $tag_flow", ref="B"),
        ], slot=2, unit="bps"),
        timeseries("Losses by cause", [
            series('sum("overflow_drops")', "ue", by="ue", alias="BS queue overflow, UE $tag_ue", ref="A"),
            series('sum("rlc_loss_drops")', "ue", by="ue", alias="wireless (RLC gave up), UE $tag_ue", ref="B"),
            series('non_negative_difference(max("retrans_total"))', "tcp", by="flow",
                   alias="TCP retransmissions $tag_flow", ref="C"),
            series('sum("loss_events")', "claw", by="ue", alias="loss events seen by CLAW, UE $tag_ue", ref="D"),
        ], slot=3, unit="none", draw="bars"),
        timeseries("Delivered packets", [
            series('max("delivered_pkts")', "tcp", by="flow", alias="delivered $tag_flow", ref="A"),
            series('max("lost_pkts")', "tcp", by="flow", alias="lost (in flight) $tag_flow", ref="B"),
        ], slot=4, unit="none"),
    ]
    return Dashboard(title="clawbed: Flow", uid="clawbed-flow", tags=["clawbed"], panels=panels,
                     templating=variables("tcp"), time=Time("now-15m", "now"), refresh="", timezone="browser",
                     schemaVersion=36, description="The server's TCP state per flow and the cell's losses")


def plt_dashboard() -> Dashboard:
    """Page load times: distributions per scheme and scenario, and their history."""
    where = f'{FILTER} AND "ok" = 1'
    panels = [
        Histogram(title="PLT distribution per scheme", dataSource=DATASOURCE, gridPos=_grid(0), targets=[
            InfluxDBTarget(query=f'SELECT "plt_ms" FROM "plt" WHERE {where} GROUP BY "scheme"',
                           alias="$tag_scheme", datasource=DATASOURCE, rawQuery=True, refId="A")]),
        Table(title="PLT per scheme and scenario", dataSource=DATASOURCE, gridPos=_grid(1), unit=MILLISECONDS_FORMAT,
              targets=[InfluxDBTarget(
                  query='SELECT count("plt_ms") AS "loads", mean("plt_ms") AS "mean", median("plt_ms") AS "median", '
                        'percentile("plt_ms", 95) AS "p95", max("plt_ms") AS "worst", mean("ok") AS "success" '
                        f'FROM "plt" WHERE {FILTER} GROUP BY "scheme", "scenario"',
                  format="table", datasource=DATASOURCE, rawQuery=True, refId="A")]),
        timeseries("PLT history (regressions)", [
            series('median("plt_ms")', "plt", by="scheme,scenario", alias="median $tag_scheme, $tag_scenario",
                   ref="A"),
            series('percentile("plt_ms", 95)', "plt", by="scheme,scenario", alias="p95 $tag_scheme, $tag_scenario",
                   ref="B"),
        ], slot=2, unit=MILLISECONDS_FORMAT, draw="points",
            description="Each point: the loads of one interval (a run, at the default range)."),
        timeseries("Loads that failed", [
            series('count("ok") - sum("ok")', "plt", by="scheme", alias="failed $tag_scheme", ref="A"),
        ], slot=3, unit="none", draw="bars"),
        timeseries("Timing integrity: loads the emulator fell behind in", [
            series('count("timing_ok") - sum("timing_ok")', "plt", by="scheme", alias="flagged $tag_scheme", ref="A"),
            series('sum("late_reruns")', "plt", by="scheme", alias="run again $tag_scheme", ref="B"),
        ], slot=4, unit="none", draw="bars",
            description="Flagged: the emulator's timing during the load broke the replay's rule (timing_ok false, "
                        "kept after the re-runs; docs/timing.md: by default its slips summed past 5 ms or one past "
                        "2 ms, --late-rule strict: any slip past 1 ms); run again: loads discarded and loaded again "
                        "for that."),
        timeseries("Timing integrity: the emulator's worst lateness per load", [
            series('max("delivery_err_max_ms")', "plt", by="scheme", alias="delivery error $tag_scheme", ref="A"),
            series('max("subframe_late_max_ms")', "plt", by="scheme", alias="subframe lateness $tag_scheme", ref="B"),
            series('max("steal_pct")', "plt", by="scheme", alias="steal % $tag_scheme", ref="C"),
        ], slot=5, unit=MILLISECONDS_FORMAT,
            description="One slip above 2 ms flags the load (above 1 ms with --late-rule strict); steal: % of the "
                        "machine's CPU time the hypervisor took."),
    ]
    return Dashboard(title="clawbed: PLT", uid="clawbed-plt", tags=["clawbed"], panels=panels,
                     templating=variables("plt"), time=Time("now-30d", "now"), refresh="", timezone="browser",
                     schemaVersion=36, description="Page load times of replays per scheme and scenario")


DASHBOARDS = {"cell": cell_dashboard, "flow": flow_dashboard, "plt": plt_dashboard}


def datasource_yaml(port: int = DEFAULT_PORT) -> str:
    """Grafana's datasource provisioning: the InfluxDB the project starts on 127.0.0.1:``port``."""
    return f"""# Generated by `clawbed dash build` from dashboards/definitions.py: do not edit.
# The InfluxDB that clawbed starts itself (clawbed dash influx start), on the same machine.
apiVersion: 1
datasources:
  - name: clawbed InfluxDB
    uid: {DATASOURCE_UID}
    type: influxdb
    access: proxy
    url: http://127.0.0.1:{port}
    database: {DATABASE}
    isDefault: true
    editable: false
    jsonData:
      dbName: {DATABASE}
      httpMode: GET
"""


def dashboards_yaml() -> str:
    """Grafana's dashboard provisioning: the generated JSON, read where the VM has it."""
    return f"""# Generated by `clawbed dash build` from dashboards/definitions.py: do not edit.
apiVersion: 1
providers:
  - name: clawbed
    folder: clawbed
    type: file
    disableDeletion: true
    allowUiUpdates: false
    updateIntervalSeconds: 30
    options:
      path: {VM_DASHBOARDS_PATH}
"""


def dashboard_json(name: str) -> str:
    """Dashboard ``name`` as the JSON file Grafana provisions (stable key order)."""
    data = json.loads(json.dumps(DASHBOARDS[name]().auto_panel_ids().to_json_data(), cls=DashboardEncoder))
    for variable in data["templating"]["list"]:
        # Grafana's value for "All" is $__all; grafanalib writes a default as text and value.
        variable["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return json.dumps(data, sort_keys=True, indent=2) + "\n"


def rendered() -> dict[Path, str]:
    """Every generated file (path → content)."""
    files = {GENERATED / f"{name}.json": dashboard_json(name) for name in DASHBOARDS}
    files[PROVISIONING / "datasources" / "clawbed.yaml"] = datasource_yaml()
    files[PROVISIONING / "dashboards" / "clawbed.yaml"] = dashboards_yaml()
    return files


def build() -> list[Path]:
    """Write every generated file; return those that changed."""
    changed = []
    for path, text in rendered().items():
        if not path.exists() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(path)
    return changed


def stale() -> list[Path]:
    """Generated files that are missing or differ from what the source renders."""
    return [path for path, text in rendered().items() if not path.exists() or path.read_text() != text]
