"""``clawbed dash``: the dashboards' files, the project's InfluxDB, ingesting runs, flushing spools."""

from __future__ import annotations

from pathlib import Path

import click

from clawbed.dashboards import DEFAULT_BIN_MS
from clawbed.errors import ClawbedError

# The modules behind each command are imported inside it: grafanalib and the InfluxDB client
# take about a second to import, which every other `clawbed` command should not pay.

#: Spool folder inside a run directory (line protocol that could not be written yet).
SPOOL_DIR = "metrics-spool"


@click.group("dash")
def dash() -> None:
    """Metrics in InfluxDB and the Grafana dashboards (see dashboards/README.md)."""


@dash.command()
def build() -> None:
    """Write dashboards/generated/*.json and dashboards/provisioning/ from dashboards/definitions.py."""
    from clawbed.dashboards import definitions

    changed = definitions.build()
    for path in changed:
        click.echo(f"wrote {path}")
    if not changed:
        click.echo("dashboards: every generated file is up to date")


@dash.command()
@click.option("--queries", "runs", multiple=True, metavar="RUN",
              help="Also run every panel's and variable's query against the running InfluxDB over this run's "
                   "time range (repeatable); fails when one returns no data.")
def check(runs: tuple[str, ...]) -> None:
    """Fail when the generated files differ from what dashboards/definitions.py renders."""
    from clawbed.dashboards import definitions
    from clawbed.dashboards.influxdb import InfluxServer
    from clawbed.dashboards.verify import run_time_range_ms, verify

    stale = definitions.stale()
    if stale:
        raise click.ClickException("generated dashboard files are stale (run `clawbed dash build`): "
                                   + ", ".join(str(p) for p in stale))
    click.echo("dashboards: generated files match their source")
    if not runs:
        return
    info = InfluxServer().running()
    if info is None:
        raise click.ClickException("InfluxDB is not running (clawbed dash influx start, then ingest the run)")
    start_ms, end_ms = run_time_range_ms(info.url, list(runs))
    result = verify(info.url, start_ms, end_ms, runs=list(runs))
    for c in result.empty:
        click.echo(f"NO DATA  {c.dashboard}: {c.what}\n         {c.query}" + (f"\n         {c.error}" if c.error else ""))
    if result.empty:
        raise click.ClickException(f"{len(result.empty)} of {len(result.checked)} queries returned no data")
    click.echo(f"dashboards: all {len(result.checked)} queries return data for {', '.join(runs)}")


@dash.group()
def influx() -> None:
    """The project's InfluxDB (127.0.0.1, data under the state folder)."""


@influx.command()
def start() -> None:
    """Start it (or find it running) and create the clawbed database."""
    from clawbed.dashboards.influxdb import InfluxServer

    server = InfluxServer()
    running = server.running()
    info = server.ensure()
    click.echo(f"InfluxDB {'already runs' if running else 'started'}: pid {info.pid}, {info.url} ({server.root})")


@influx.command()
def stop() -> None:
    """Stop it (by the PID it was started with)."""
    from clawbed.dashboards.influxdb import InfluxServer

    pid = InfluxServer().stop()
    click.echo(f"InfluxDB stopped (pid {pid})" if pid else "InfluxDB was not running")


@influx.command()
def status() -> None:
    """Whether it runs, where, and how many spool files wait."""
    from clawbed.dashboards.influxdb import InfluxServer
    from clawbed.dashboards.metrics import registered_spools, spool_files

    server = InfluxServer()
    info = server.running()
    click.echo(f"InfluxDB: pid {info.pid}, {info.url}" if info else "InfluxDB: not running")
    click.echo(f"data: {server.root}")
    waiting = sum(len(spool_files(d)) for d in registered_spools())
    click.echo(f"spooled batches waiting: {waiting}")


@dash.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--scheme", help="Scheme of series outside a replay's loads (an emulator run's flows); default none.")
@click.option("--scenario", help="Scenario tag; default: the trace's synthesis preset or file name.")
@click.option("--trace", help="Trace tag; default: the trace file's name.")
@click.option("--bin-ms", type=int, default=DEFAULT_BIN_MS, show_default=True,
              help="Width of the bins of per-subframe series, ms.")
def ingest(run_dir: Path, scheme: str | None, scenario: str | None, trace: str | None, bin_ms: int) -> None:
    """Write a run directory's series into InfluxDB (started on demand); what cannot be
    written now is spooled into RUN_DIR/metrics-spool/ and written by a later flush."""
    from clawbed.dashboards.influxdb import InfluxError, InfluxServer
    from clawbed.dashboards.ingest import ingest_run
    from clawbed.dashboards.metrics import MetricsWriter

    try:
        url: str | None = InfluxServer().ensure().url
    except InfluxError as e:
        click.echo(f"warning: {e}; spooling everything", err=True)
        url = None
    with MetricsWriter(url, run_dir / SPOOL_DIR) as writer:
        report = ingest_run(run_dir, writer, bin_ms=bin_ms, scheme=scheme, scenario=scenario, trace=trace)
    parts = ", ".join(f"{m} {n}" for m, n in sorted(report.points.items()))
    click.echo(f"{run_dir}: {report.total} points ({parts}); {writer.written} written, {writer.spooled} spooled")


@dash.command()
@click.argument("run_dirs", nargs=-1, type=click.Path(exists=True, file_okay=False, path_type=Path))
def flush(run_dirs: tuple[Path, ...]) -> None:
    """Write spooled metrics (of RUN_DIRS, default every registered spool) to InfluxDB."""
    from clawbed.dashboards.influxdb import InfluxServer
    from clawbed.dashboards.metrics import flush_spools

    info = InfluxServer().ensure()
    dirs = [d / SPOOL_DIR for d in run_dirs] if run_dirs else None
    report = flush_spools(info.url, dirs)
    click.echo(f"flushed {report.files} batches ({report.points} points)"
               + (f"; {report.left} left (InfluxDB went away)" if report.left else ""))
    if report.left:
        raise click.ClickException("not every spooled batch could be written")


def main() -> None:
    """Run ``dash`` on its own (``python -m clawbed.dashboards.cli``), errors as one line."""
    try:
        dash(standalone_mode=True)
    except ClawbedError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
