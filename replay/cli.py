"""``clawbed replay``: load a page N times per scheme over the emulated cell, interleaved, and
report PLT per scheme (terminal table + ``report.html`` in the run directory)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from clawbed.claw.schemes.base import scheme_names
from clawbed.paths import REPO_ROOT, runs_dir
from clawbed.replay import pages, settings
from clawbed.replay.lateness import DEFAULT_LATE_RULE, LATE_RULES
from clawbed.replay.network.crosstraffic import parse_cross_traffic, parse_other_ues
from clawbed.replay.report import plt_stats, stats_table, write_report
from clawbed.replay.run import HTTP_VERSIONS, LOADERS, Replay, ReplayConfig, ReplayEvent, describe_lateness
from clawbed.traces.inputs import ACCEPTED

DEFAULT_TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
#: ``ctx.meta`` key of what records a replay in the result store, set by the CLI layer
#: (replay sits below the orchestrator, which owns the store): called with the run and a
#: warning printer, it returns an object with ``load_done(record)`` and ``finish(status, error)``.
RECORDER_META = "clawbed.replay.recorder"


@click.command("replay")
@click.option("--trace", "trace", type=click.Path(path_type=Path), default=DEFAULT_TRACE, show_default=True,
              help=f"what drives the cell: {ACCEPTED}, imported on the fly")
@click.option("--page", default="profile", show_default=True,
              help="a named page (profile, image-2mb, set-01..set-20), a recorded site: mahimahi:DIR[@URL], "
                   "or a folder of your own files: dir:PATH[@INDEX] (INDEX default index.html)")
@click.option("--schemes", default="claw,cubic", show_default=True,
              help=f"comma-separated schemes, loaded in turn: {', '.join(scheme_names())}")
@click.option("--runs", type=int, default=5, show_default=True, help="loads per scheme")
@click.option("--http", "http_version", type=click.Choice(HTTP_VERSIONS), default="2", show_default=True,
              help="HTTP version nginx offers (TLS either way)")
@click.option("--loader", type=click.Choice(LOADERS), default="browser", show_default=True,
              help="headless Chromium, or an HTTP/2 client that fetches the page's objects")
@click.option("--wireline-rate", help="wireline bottleneck between core and server, e.g. 20mbit (default: none)")
@click.option("--wired-delay-ms", type=float, default=0.0, show_default=True,
              help="netem delay on the wired link to the server, each way (without netem in the kernel: "
                   "added to the emulator's core delay, said so)")
@click.option("--wired-jitter-ms", type=float, default=0.0, show_default=True,
              help="netem jitter of that delay (needs netem in the kernel)")
@click.option("--wired-loss", "wired_loss_pct", type=float, default=0.0, show_default=True,
              help="netem random loss on the wired link, % (needs netem in the kernel)")
@click.option("--wired-reorder", "wired_reorder_pct", type=float, default=0.0, show_default=True,
              help="netem reordering on the wired link, % of packets (needs netem and a delay)")
@click.option("--seed", type=int, default=1, show_default=True, help="seed of the cell model and the page")
@click.option("--name", help="run directory name under the runs folder (default: the start time)")
@click.option("--runs-dir", "output_root", type=click.Path(path_type=Path), default=None,
              help="folder of run directories (default: $CLAWBED_RUNS or <repo>/runs); its results.sqlite "
                   "records each load as it ends (clawbed runs, clawbed results query replay)")
@click.option("--load-timeout-s", type=float, default=60.0, show_default=True,
              help="a load taking longer fails")
@click.option("--cross-traffic", "cross_traffic", multiple=True, metavar="bulk:N|onoff:N",
              help="wired cross traffic through the wireline bottleneck (needs --wireline-rate): N iperf3 "
                   "flows, or N on/off web-like senders, from a host of its own; repeatable")
@click.option("--other-ues", "other_ues", metavar="N[:scheme]",
              help=f"N more UEs in the cell, each with a bulk download using a scheme of its own "
                   f"({', '.join(scheme_names())}; default cubic)")
@click.option("--align-trace/--no-align-trace", default=True, show_default=True,
              help="start every load of a round at the same point of the trace (rounds spread over it), so "
                   "the schemes meet the same channel; off: each load meets the trace where the run has got to")
@click.option("--inject-delay-ms", type=float, default=0.0, show_default=True,
              help="a deliberate slowdown: add this many ms to every server → UE packet's core delay (to "
                   "calibrate a regression check)")
@click.option("--rerun-late/--no-rerun-late", default=True, show_default=True,
              help="load again (up to twice) a load during which the emulator fell behind (--late-rule) "
                   "(with --keep-connections it is kept, flagged: a rerun would be a warm load)")
@click.option("--capture-server", is_flag=True,
              help="capture the server's device into <run dir>/server.pcap (for `clawbed analyze bandwidth`)")
@click.option("--idle-before-s", type=float, default=0.0, show_default=True,
              help="wait this long before each load, nothing sent, so the UE's radio demotes (the SPDY paper "
                   "loads pages 60 s apart)")
@click.option("--keep-connections", is_flag=True,
              help="one browser for every load (a new tab each, cache off), so connections opened by a load "
                   "carry the next, idle in between (browser loader, one scheme)")
@click.option("--reserve-cpu/--no-reserve-cpu", "reserve_cpu", default=None,
              help="run the emulator's clock and writer on a CPU of their own, the run's other processes on the "
                   "rest (default: with 4 CPUs or more; on fewer the rest are starved, see replay/cpus.py)")
@click.option("--loader-off-cell-cpu", is_flag=True,
              help="pin the emulator's cell thread to the last CPU and keep the loader (the browser) off it, the "
                   "rest anywhere: fewer late subframes on 2-3 CPUs, the browser on fewer CPUs (replay/cpus.py)")
@click.option("--late-rule", type=click.Choice(tuple(LATE_RULES)), default=DEFAULT_LATE_RULE, show_default=True,
              help="which loads count as late (rerun, or flagged): " + "; ".join(
                  f"{r.name}: {r.help}" for r in LATE_RULES.values()) + " (docs/timing.md)")
@click.option("--trace-sched", is_flag=True,
              help="trace the scheduler during each load (a tracefs instance of the run's own) and attribute "
                   "each late subframe to who ran instead of the cell thread: sched.json per load, "
                   "sched-causes.json per run (docs/timing.md)")
@settings.options("replay")
def replay(trace: Path, page: str, schemes: str, runs: int, http_version: str, loader: str,
           wireline_rate: str | None, wired_delay_ms: float, wired_jitter_ms: float, wired_loss_pct: float,
           wired_reorder_pct: float, seed: int, name: str | None, output_root: Path | None, load_timeout_s: float,
           cross_traffic: tuple[str, ...], other_ues: str | None, align_trace: bool, inject_delay_ms: float,
           rerun_late: bool, capture_server: bool, idle_before_s: float, keep_connections: bool,
           reserve_cpu: bool | None, late_rule: str, trace_sched: bool, loader_off_cell_cpu: bool,
           **kwargs: Any) -> None:
    """Load PAGE RUNS times per scheme over the cell of TRACE, the schemes interleaved (A B A B …).

    Every load is appended to the run directory as it ends (results.jsonl/.csv and its time
    series under loads/), so Ctrl-C keeps every finished load and still writes the report.
    """
    shared = {k: v for k, v in settings.take(kwargs, "replay").items() if v is not None}
    config = ReplayConfig(
        trace=trace, page=page, schemes=[s.strip() for s in schemes.split(",") if s.strip()], runs=runs,
        http_version=http_version, loader=loader,
        wireline_rate=wireline_rate, wired_delay_ms=wired_delay_ms, wired_jitter_ms=wired_jitter_ms,
        wired_loss_pct=wired_loss_pct, wired_reorder_pct=wired_reorder_pct, seed=seed, name=name,
        load_timeout_s=load_timeout_s, output_root=output_root or runs_dir(),
        cross_traffic=[parse_cross_traffic(c) for c in cross_traffic],
        other_ues=parse_other_ues(other_ues) if other_ues is not None else [], align_trace=align_trace,
        inject_delay_ms=inject_delay_ms, rerun_late=rerun_late,
        capture_server=capture_server, idle_before_s=idle_before_s,
        keep_connections=keep_connections, reserve_emulator_cpu=reserve_cpu, late_rule=late_rule,
        trace_sched=trace_sched, loader_off_cell_cpu=loader_off_cell_cpu, **shared)
    console = Console(stderr=True)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=False)
    task = progress.add_task("setting up the cell and the web server", total=len(config.plan()))
    recorder: Any = None

    def on_event(event: ReplayEvent) -> None:
        if event.kind == "load-start":
            progress.update(task, description=f"load {(event.load or 0) + 1}/{event.total_loads}: {event.scheme}")
        elif event.kind == "load-done" and event.record is not None:
            r = event.record
            # The loader and the protocol its load really used: "h2" alone read as the h2 loader.
            outcome = (f"PLT {r.plt_ms:,.0f} ms, {r.bytes_total or 0:,} bytes, {config.loader} loader over "
                       f"{r.protocol or 'an unreported protocol'}"
                       if r.measured and r.plt_ms is not None else f"[red]failed: {r.error}[/red]")
            late = "" if r.timing_ok is not False else f" [yellow]timing flagged: {describe_lateness(r)}[/yellow]"
            progress.console.print(f"  load {r.load:>3} {r.scheme:<6} {outcome}{late}")
            progress.advance(task)
            if recorder is not None:  # after the line: the store's write never holds it back
                recorder.load_done(r)
        elif event.kind == "note":
            progress.console.print(f"  {event.message}")
        elif event.kind == "ready" and event.message:  # what the run made: namespaces, PIDs
            progress.console.print(f"  {event.message}")
        elif event.kind == "warning":
            progress.console.print(f"  [yellow]warning:[/yellow] {event.message}")

    run = Replay(config, on_event=on_event)
    make_recorder = click.get_current_context().meta.get(RECORDER_META)
    if make_recorder is not None:
        recorder = make_recorder(run, lambda m: progress.console.print(f"  [yellow]warning:[/yellow] {m}"))
    console.print(f"replay {run.name} (run id {run.run_id}): {config.page} on {config.trace.name}, schemes {', '.join(config.schemes)}, "
                  f"{config.runs} load(s) each, {config.loader} loader, "
                  f"{pages.describe_protocol(run.page, config.http_version)}")
    if settings.describe(config.settings()):
        console.print(f"settings: {settings.describe(config.settings())}")
    started = time.monotonic()
    interrupted = False
    status, error = "failed", None
    try:
        with progress:
            run.run()
        status = "complete"
    except KeyboardInterrupt:
        interrupted = True
        status, error = "interrupted", f"interrupted after {len(run.records)} load(s)"
    except BaseException as e:
        error = f"{type(e).__name__}: {e}"
        raise
    finally:
        if recorder is not None:
            recorder.finish(status, error)
    elapsed = time.monotonic() - started
    out = run.run_dir.path
    if run.records:
        Console().print(stats_table(plt_stats(run.records), title=f"PLT per scheme — {run.name}"))
        report = write_report(out)
        flagged = sum(1 for r in run.records if r.timing_ok is False)
        # What the loads really used (the header says what was offered).
        used: dict[str, int] = {}
        for r in run.records:
            used[r.protocol or "unknown"] = used.get(r.protocol or "unknown", 0) + 1
        console.print("protocol of the loads: " + ", ".join(f"{p} ({n} load(s))" for p, n in used.items()))
        for line in run.flows.summary():  # the background flows on the UE (flows.csv in the run directory)
            console.print(f"flow {line}")
        console.print(f"{len(run.records)} load(s) in {elapsed:.0f} s; timing: {run.late_reruns} load(s) run again "
                      f"because the emulator fell behind, {flagged} kept flagged; report: {report}")
    if interrupted:
        console.print(f"interrupted: {len(run.records)} finished load(s) kept in {out}; everything else removed")
        raise click.exceptions.Abort()
