"""CLI groups of the orchestrator: ``clawbed suite``, ``clawbed results``, ``clawbed regress``
(``clawbed/cli.py`` loads them on first use)."""

from __future__ import annotations

import csv
import json
import sys
import time
from pathlib import Path

import click
from rich.console import Console

from clawbed.errors import InputError
from clawbed.orchestrator import regress as rg
from clawbed.orchestrator.analyze import with_airtime
from clawbed.orchestrator.runner import Executor, make_executor, run_suite
from clawbed.orchestrator.spec import load_spec
from clawbed.orchestrator.store import DEFAULT_SWEEP, Store, default_store_path, iter_csv_rows, read_csv_rows
from clawbed.tables import Column, Listing, TerminalTable, default_format, format_option, markdown_table, styled

_store_option = click.option("--store", "store_path", type=click.Path(path_type=Path), default=None,
                             help="the SQLite result store (default: <runs>/results.sqlite)")
_influx_option = click.option("--influx", "influx_url", default=None,
                              help="also write each load to this InfluxDB (default: $CLAWBED_INFLUX_URL, if set)")
_executor_option = click.option(
    "--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
    help="local: scenarios one after another in this process; ray: each scenario a Ray task on a root worker")
_ray_address_option = click.option(
    "--ray-address", envvar="RAY_ADDRESS", default=None, metavar="HOST:PORT",
    help="the Ray cluster to run on (--executor ray; default: $RAY_ADDRESS, else a local cluster started for "
         "the sweep and stopped after it)")
_inject_option = click.option(
    "--inject-delay-ms", type=float, default=0.0, show_default=True,
    help="slow every load down on purpose: add this many ms to every server → UE packet's core delay (to "
         "measure what a regression check detects; run it into a sweep of its own)")
_rerun_late_option = click.option(
    "--rerun-late/--no-rerun-late", default=True, show_default=True,
    help="load again (up to twice) a load during which the emulator fell behind by more than 1 ms")
_spec_argument = click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path, exists=True,
                                                                             dir_okay=False))


def _executor(name: str, ray_address: str | None) -> Executor:
    """The executor of ``--executor``; ``$RAY_ADDRESS`` counts only for ``ray``, while an
    explicit ``--ray-address`` with ``local`` is an error."""
    source = click.get_current_context().get_parameter_source("ray_address")
    if name != "ray" and source is not click.core.ParameterSource.COMMANDLINE:
        ray_address = None
    return make_executor(name, ray_address)


def _console() -> Console:
    """Standard output's console; when it is not a terminal (CI logs, pipes), wide enough that
    no table cell is cut."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def _suite_name(target: str) -> str:
    """SUITE given as a spec file or a suite's name."""
    path = Path(target)
    return load_spec(path).name if path.is_file() else target


@click.group()
def suite() -> None:
    """Experiment suites: a YAML matrix of scenarios, run resumably into the result store."""


@suite.command("list")
@_spec_argument
@format_option
def suite_list(spec_path: Path, fmt: str | None) -> None:
    """The scenarios of SPEC with their stable ids."""
    spec = load_spec(spec_path)
    Listing(f"suite {spec.name}: {len(spec.scenarios())} scenario(s)", (
        Column("id"), Column("label"), Column("trace", fit="cut", min_width=12, drop=3),
        Column("page", fit="cut", min_width=10, drop=2), Column("condition", fit="wrap", min_width=16, drop=4),
        Column("seed", drop=1), Column("schemes", fit="wrap", min_width=12), Column("repetitions", "reps")),
        [(s.id, s.label, s.trace, s.page, s.condition.model_dump(mode="json", exclude={"name"}, exclude_defaults=True),
          s.seed, list(s.schemes), s.repetitions) for s in spec.scenarios()]).render(fmt)


@suite.command("run")
@_spec_argument
@click.option("--resume", is_flag=True, help="continue the sweep: run only the loads not recorded yet")
@click.option("--only", multiple=True, metavar="ID", help="only this scenario (id prefix or label); repeatable")
@click.option("--sweep", default=DEFAULT_SWEEP, show_default=True, help="name of this campaign in the store")
@_executor_option
@_ray_address_option
@click.option("--runs-dir", "output_root", type=click.Path(path_type=Path), default=None,
              help="folder of the suites' run directories (default: <runs>/suites)")
@click.option("--run-id-prefix", default="", help="first characters of each run id (e.g. 'or' for manual runs)")
@_store_option
@_influx_option
@_inject_option
@_rerun_late_option
def suite_run(spec_path: Path, resume: bool, only: tuple[str, ...], sweep: str, executor: str,
              ray_address: str | None, output_root: Path | None, run_id_prefix: str, store_path: Path | None,
              influx_url: str | None, inject_delay_ms: float, rerun_late: bool) -> None:
    """Run every scenario of SPEC (one replay each), recording each load as it ends."""
    spec = load_spec(spec_path)
    with Store(store_path, influx_url) as store:
        summary = run_suite(spec, store, sweep=sweep, resume=resume, only=only,
                            executor=_executor(executor, ray_address), output_root=output_root,
                            run_id_prefix=run_id_prefix, inject_delay_ms=inject_delay_ms, rerun_late=rerun_late)
        _print_summary_table(store, spec.name, sweep)
    click.echo(f"{summary.recorded} load(s) recorded, {summary.skipped} already there; timing: "
               f"{summary.late_reruns} load(s) run again because the emulator fell behind, "
               f"{summary.timing_flagged} recorded flagged"
               + (f"; {summary.lost_workers} scenario(s) re-run after their Ray worker died" if summary.lost_workers else "")
               + (f"; failed scenario(s): {', '.join(summary.failed_scenarios)}" if summary.failed_scenarios else ""),
               err=True)
    if summary.failed_scenarios:
        sys.exit(1)


def _print_summary_table(store: Store, suite_name: str, sweep: str) -> None:
    samples = rg.samples_from_loads(store.loads(suite=suite_name, sweep=sweep))
    # A terminal shows what a sweep measured; the late loads' counts and the spread leave a
    # narrow one first (csv when piped has them all).
    columns = [Column("scenario"), Column("scheme"), Column("n_ok", "ok", justify="right"),
               Column("n_failed", "failed", justify="right"),
               Column("n_late", "late", justify="right", drop=3, style=lambda n: "yellow" if n else None),
               Column("late_reruns", "reruns", justify="right", drop=2),
               Column("median_ms", "median ms", justify="right"), Column("mean_ms", "mean ms", justify="right"),
               Column("std_ms", "std ms", justify="right", drop=1)]
    rows = []
    for s in samples.values():
        m = s.summary()
        rows.append((s.label, s.scheme, m["n_ok"], m["n_failed"], s.n_late, s.late_reruns,
                     *(round(m[k], 1) if k in m else None for k in ("median_ms", "mean_ms", "std_ms"))))
    Listing(f"PLT per scenario and scheme — {suite_name} (sweep {sweep})", columns, rows).render(None)


@suite.command("report")
@_spec_argument
@click.option("--sweep", default=DEFAULT_SWEEP, show_default=True)
@_store_option
@click.option("--airtime", is_flag=True,
              help="add where the loads' time went by the ground truth (clawbed analyze airtime): for each "
                   "comparison, the baseline's share queued at the base station, held back by the sender (the "
                   "most a faster sender could save) and with nothing to send")
@click.option("--with-late", is_flag=True,
              help="use the loads the emulator fell behind in too (left out by default, as regress does); on a "
                   "small machine a page that starves the emulator's CPU may have few others")
@format_option
def suite_report(spec_path: Path, sweep: str, store_path: Path | None, airtime: bool, with_late: bool,
                 fmt: str | None) -> None:
    """Each comparison of SPEC's ``paper:`` numbers next to what this testbed measured."""
    from clawbed.orchestrator.report import COLUMNS, airtime_notes, paper_rows

    spec = load_spec(spec_path)
    if not spec.spec.paper:
        raise InputError(f"{spec_path}: the spec has no paper: list of numbers to report")
    with Store(store_path) as store:
        loads = store.loads(suite=spec.name, sweep=sweep)
    rows = paper_rows(spec.spec.paper, rg.samples_from_loads(loads, with_late=with_late))
    columns = list(COLUMNS)
    if airtime:
        columns.append("ground truth (share of PLT)")
        rows = [(*r, note) for r, note in zip(rows, airtime_notes(spec.spec.paper, loads))]
    if fmt == "markdown":
        at = columns.index("scenarios")  # a pattern: shown as code
        click.echo(markdown_table(columns, [(*r[:at], f"`{r[at]}`", *r[at + 1:]) for r in rows]), nl=False)
        return
    # Figures wrap at words; in a narrow terminal the scenario pattern leaves first, then the
    # paper's quotes and the ground truth, each too long to share 80 columns (csv has them).
    fits = {"figure": Column("figure"), "scenarios": Column("scenarios", fit="cut", drop=1),
            "metric": Column("metric", fit="wrap", min_width=14), "paper": Column("paper", fit="wrap", min_width=8),
            "testbed": Column("testbed", fit="wrap", min_width=10), "n": Column("n", fit="wrap", min_width=6),
            "note": Column("note", fit="wrap", min_width=30, drop=2)}
    Listing(f"{spec.name}: the paper's numbers next to the testbed's (sweep {sweep})",
            [fits.get(col) or Column(col.replace(" ", "_"), col, fit="wrap", min_width=24, drop=3) for col in columns],
            [list(r) for r in rows]).render(fmt)


@suite.command("decompose")
@_spec_argument
@click.option("--sweep", default=DEFAULT_SWEEP, show_default=True)
@_store_option
@click.option("--with-late", is_flag=True, help="use the loads the emulator fell behind in too")
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "csv", "json"]), default=None,
              help="default: table on a terminal, csv when piped")
def suite_decompose(spec_path: Path, sweep: str, store_path: Path | None, with_late: bool, fmt: str | None) -> None:
    """Per factor set (trace, page, condition) and scheme: PLT, how much faster than Cubic, the
    server's RTOs per load, the flows' slow-start exits (before any loss / on a loss) and the
    airtime split (orchestrator/decompose.py)."""
    import csv
    import json
    import sys

    from clawbed.orchestrator.decompose import COLUMNS, cell, decompose

    spec = load_spec(spec_path)
    with Store(store_path) as store:
        lines = decompose(store.loads(suite=spec.name, sweep=sweep), with_late=with_late)
    fmt = fmt or ("table" if sys.stdout.isatty() else "csv")
    if fmt == "json":
        click.echo(json.dumps(lines, indent=1))
        return
    if fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow([k for k, _ in COLUMNS])
        writer.writerows([[line[k] for k, _ in COLUMNS] for line in lines])
        return
    rows = [[cell(k, line[k]) for k, _ in COLUMNS] for line in lines]
    if fmt == "markdown":
        click.echo(markdown_table([h for _, h in COLUMNS], rows), nl=False)
        return
    table = TerminalTable(title=f"{spec.name}: where the gap comes from (sweep {sweep})")
    for _, header in COLUMNS:
        table.add_column(header, overflow="fold")
    for r in rows:
        table.add_row(*r)
    _console().print(table)


@click.group()
def results() -> None:
    """The result store: query recorded loads."""


@results.command("query")
@click.argument("suite_ref", metavar="[SUITE]", required=False)
@click.option("--scenario", default=None, help="a scenario id prefix or a label substring")
@click.option("--sweep", default=None, help="only this sweep (default: all; a replay's sweep is its run's name)")
@format_option
@_store_option
def results_query(suite_ref: str | None, scenario: str | None, sweep: str | None, fmt: str | None,
                  store_path: Path | None) -> None:
    """Recorded loads of SUITE (a spec file or a suite's name; `replay`: the replays) and/or
    --scenario; without either, every load: suites' and replays' alike."""
    path = store_path or default_store_path()
    if not path.is_file():
        raise InputError(f"--store {path}: no result store there yet")
    with Store(path) as store:
        rows = store.loads(suite=_suite_name(suite_ref) if suite_ref else None, sweep=sweep, scenario=scenario)
    fmt = fmt or default_format()
    if fmt in ("csv", "json"):
        # An export carries each load's airtime split, so a machine without the runs can report it.
        rows = with_airtime(rows)
    if fmt == "json":
        for r in rows:
            click.echo(json.dumps(r.as_dict()))
    elif fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerows(iter_csv_rows(rows))
    else:
        # The terminal's columns: what tells loads apart and what they measured; the rest drops
        # first when it is narrow (csv and json have every column).
        listing = Listing(f"{len(rows)} load(s)", (
            Column("label", "scenario"), Column("scheme"), Column("repetition", "rep"),
            Column("ok"), Column("plt_ms", "PLT ms", justify="right"), Column("suite", drop=4),
            Column("sweep", fit="cut", min_width=10, drop=5), Column("bytes_total", "bytes", justify="right", drop=3),
            Column("protocol", drop=2), Column("error", fit="cut", min_width=12, drop=1)),
            [(r.label, r.scheme, r.repetition, r.ok, r.plt_ms, r.suite, r.sweep, r.bytes_total, r.protocol, r.error or "")
             for r in rows])
        listing.render(fmt)


@results.command("import")
@click.argument("csv_path", metavar="CSV", type=click.Path(path_type=Path))
@_store_option
def results_import(csv_path: Path, store_path: Path | None) -> None:
    """Record the loads of CSV (written by `results query --format csv` on another machine or
    kept from an earlier sweep) in the store; loads it holds already are kept as they are, so
    `suite run --resume` then runs only what neither measured."""
    rows = read_csv_rows(csv_path)
    with Store(store_path) as store:
        added = store.import_rows(rows)
        where = store.path
    sweeps = sorted({(r.suite, r.sweep) for r in rows})
    click.echo(f"{csv_path}: {len(rows)} load(s) of {', '.join(f'{s} (sweep {w})' for s, w in sweeps) or 'nothing'}; "
               f"{added} added to {where}, {len(rows) - added} recorded already")


def _power(suite_name: str, n_pairs: int, sweeps: list[str], threshold: float, json_path: Path | None,
           store_path: Path | None, fmt: str | None) -> None:
    """The detectable-effect table from unchanged reruns in the store."""
    if len(sweeps) < 2:
        raise InputError("--power-from: give at least two sweeps (unchanged reruns of the suite)")
    with Store(store_path) as store:
        samples = []
        for sweep in sweeps:
            loads = store.loads(suite=suite_name, sweep=sweep)
            if not loads:
                raise InputError(f"--power-from: no loads of suite {suite_name} in sweep {sweep!r} of {store.path}")
            samples.append(rg.samples_from_loads(loads))
    rows = rg.power_table(samples, n_pairs=n_pairs, threshold=threshold)
    Listing(f"{suite_name}: the smallest PLT change caught with 95% probability by a paired check of {n_pairs} "
            f"pairs, from the noise of {len(sweeps)} unchanged reruns", (
                Column("label", "scenario"), Column("scheme"),
                Column("pairs_measured", "pairs", justify="right", drop=2),
                Column("noise_rms_log", "noise (RMS log)", justify="right", show=lambda v: f"{v:.3f}", drop=1),
                Column("detectable_ratio", "detectable", justify="right",
                       show=lambda v: f"{v:.3f}" if v else "> 3"),
                Column("power_at_1.10", "power 1.10", justify="right", show=lambda v: f"{v:.0%}"),
                Column("false_alarms_at_1.00", "false alarms", justify="right", show=lambda v: f"{v:.1%}")),
            [(r["label"], r["scheme"], r["pairs_measured"], r["noise_rms_log"], r["detectable_ratio"],
              r["power_at_1.10"], r["false_alarms_at_1.00"]) for r in rows],
            caption=f"regression when CI low > 1 and ratio ≥ {threshold:g}").render(fmt, _console())
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({"suite": suite_name, "sweeps": sweeps, "n_pairs": n_pairs,
                                         "threshold": threshold, "created": time.strftime("%Y-%m-%d %H:%M %Z"),
                                         "rows": rows}, indent=1) + "\n")


@click.command("regress")
@click.argument("spec_path", metavar="[SPEC]", required=False, type=click.Path(path_type=Path, exists=True,
                                                                                 dir_okay=False))
@click.option("--against", "against", default=None, metavar="REV",
              help="A/B on this machine (the default without --baseline): build REV in a git worktree of its own "
                   "(cached by commit under <state>/ab) and run it and the candidate interleaved round by round, "
                   "paired by trace stretch (default REV: the merge base of HEAD with main)")
@click.option("--candidate", "candidate_rev", default=None, metavar="REV",
              help="with --against: the candidate is this commit, built like the base (default: this working tree, "
                   "uncommitted changes included)")
@click.option("--determinism/--no-determinism", default=True, show_default=True,
              help="with --against: also compare the two builds' ground truth on the same trace and seed "
                   "(orchestrator/determinism.py: catches a cell-model change that PLT noise would hide)")
@click.option("--determinism-only", is_flag=True,
              help="with --against: only the determinism check (about a minute, no SPEC needed)")
@click.option("--baseline", "baseline_path", type=click.Path(path_type=Path), default=None,
              help="instead of A/B: compare with this committed baseline JSON (written by --update-baseline on a "
                   "fixed machine, whose fingerprint it records)")
@click.option("--strict-machine", is_flag=True,
              help="with --baseline: refuse (exit status 2) when this machine is not the one the baseline was "
                   "measured on (default: a warning)")
@click.option("--power-from", "power_from", default=None, metavar="SWEEP,SWEEP[,…]",
              help="instead of a check: from these unchanged reruns of SPEC in the store, the smallest PLT change "
                   "each (scenario, scheme) check catches with 95% probability (paired, SPEC's repetitions)")
@click.option("--power-json", "power_json", type=click.Path(path_type=Path), default=None,
              help="with --power-from: also write the table as JSON here")
@click.option("--from-store", is_flag=True, help="with --baseline: compare the results already in the store (no new run)")
@click.option("--sweep", default=None,
              help="the store's sweep to run into / read (default: a new regress-<time> sweep, or ab-<time> for A/B "
                   f"(its sides: <sweep>/base, <sweep>/candidate); with --from-store '{DEFAULT_SWEEP}')")
@click.option("--update-baseline", is_flag=True, help="write the results as the new baseline instead of comparing")
@click.option("--threshold", type=float, default=rg.DEFAULT_THRESHOLD, show_default=True,
              help="regression when the 95% CI of the PLT ratio (current/baseline) lies above 1 and the ratio is at "
                   "least this")
@click.option("--junit", "junit_path", type=click.Path(path_type=Path), default=None, help="write JUnit XML here")
@_executor_option
@_ray_address_option
@click.option("--runs-dir", "output_root", type=click.Path(path_type=Path), default=None)
@click.option("--run-id-prefix", default="")
@_store_option
@_influx_option
@click.option(
    "--inject-delay-ms", type=float, default=0.0, show_default=True,
    help="slow every load down on purpose: add this many ms to every server → UE packet's core delay (to "
         "measure what a regression check detects); with --against, the candidate side's loads only")
@_rerun_late_option
@format_option
def regress(spec_path: Path | None, against: str | None, candidate_rev: str | None, determinism: bool,
            determinism_only: bool, baseline_path: Path | None, strict_machine: bool, power_from: str | None,
            power_json: Path | None, from_store: bool, sweep: str | None, update_baseline: bool,
            threshold: float, junit_path: Path | None, executor: str, ray_address: str | None,
            output_root: Path | None, run_id_prefix: str,
            store_path: Path | None, influx_url: str | None, inject_delay_ms: float, rerun_late: bool,
            fmt: str | None) -> None:
    """Compare every (scenario, scheme) PLT distribution of SPEC between the candidate and a
    base revision run on this machine (A/B, the default), or with a committed BASELINE; exit
    status 1 on a significant regression (or a determinism difference)."""
    if determinism_only:
        if baseline_path is not None or power_from is not None:
            raise click.UsageError("--determinism-only compares two builds: not with --baseline or --power-from")
        _regress_ab(None, against, candidate_rev, True, sweep, threshold, junit_path, output_root, run_id_prefix,
                    store_path, influx_url, inject_delay_ms, rerun_late, fmt)
        return
    if spec_path is None:
        raise click.UsageError("give SPEC (or --determinism-only)")
    spec = load_spec(spec_path)
    fewest = min(s.repetitions for s in spec.scenarios())
    if power_from is not None:
        _power(spec.name, fewest, [s.strip() for s in power_from.split(",") if s.strip()], threshold, power_json,
               store_path, fmt)
        return
    if fewest < rg.MIN_LOADS:
        raise InputError(f"{spec_path}: repetitions: {fewest} — a regression check needs at least {rg.MIN_LOADS} loads "
                         f"per scenario and scheme (fewer can never show a change at {rg.CONFIDENCE:.0%})")
    if baseline_path is None:
        for flag, given in (("--from-store", from_store), ("--update-baseline", update_baseline),
                            ("--strict-machine", strict_machine)):
            if given:
                raise click.UsageError(f"{flag} is for the committed-baseline mode: give --baseline")
        if executor != "local":
            raise click.UsageError("--executor: the A/B mode runs both sides on this machine (local)")
        _regress_ab(spec_path, against, candidate_rev, determinism, sweep, threshold, junit_path, output_root,
                    run_id_prefix, store_path, influx_url, inject_delay_ms, rerun_late, fmt)
        return
    if against is not None or candidate_rev is not None:
        raise click.UsageError("--against/--candidate (A/B) and --baseline are two modes: give one")
    from clawbed.orchestrator.ab import fingerprint_differences, machine_fingerprint

    here = machine_fingerprint()
    if not update_baseline:
        _, baseline = rg.read_baseline(baseline_path)
        recorded = rg.baseline_machine(baseline_path)
        differs = fingerprint_differences(recorded, here) if recorded is not None else []
        if recorded is None or differs:
            why = (f"it was measured on another machine ({'; '.join(differs)})" if differs
                   else "it does not record the machine it was measured on")
            message = (f"--baseline {baseline_path}: {why}: this machine's speed is in the verdict (use the A/B mode, "
                       "--against REV, on a runner that is not the baseline's)")
            if strict_machine:
                raise InputError(message + "; refused (--strict-machine)")
            click.echo(f"warning: {message}", err=True)
    sweep = sweep or (DEFAULT_SWEEP if from_store else f"regress-{time.strftime('%Y%m%dT%H%M%S')}")
    with Store(store_path, influx_url) as store:
        if not from_store:
            run_suite(spec, store, sweep=sweep, resume=True, executor=_executor(executor, ray_address),
                      output_root=output_root, run_id_prefix=run_id_prefix, inject_delay_ms=inject_delay_ms,
                      rerun_late=rerun_late)
        labels = {s.label for s in spec.scenarios()}
        current = {k: v for k, v in rg.samples_from_loads(store.loads(suite=spec.name, sweep=sweep)).items()
                   if v.label in labels}
    if not current:
        raise InputError(f"no results of suite {spec.name} in sweep {sweep!r} of the store")
    if update_baseline:
        rg.write_baseline(baseline_path, spec.name, current, threshold=threshold, machine=here)
        click.echo(f"baseline written: {baseline_path} ({len(current)} scenario×scheme entries; machine "
                   f"{json.dumps(here)})", err=True)
        return
    comparisons = rg.compare(current, baseline, threshold=threshold)
    _print_comparisons(f"PLT regression check — {spec.name} vs {baseline_path.name}", comparisons, threshold,
                       ("current ms", "baseline ms"), fmt)
    reruns = sum(s.late_reruns for s in current.values())
    late = sum(c.n_late_current for c in comparisons)
    click.echo(f"timing: {reruns} load(s) run again because the emulator fell behind; {late} load(s) left out "
               "because every attempt did (column late: now/baseline)", err=True)
    _finish(spec.name, comparisons, threshold, junit_path, [])


def _print_comparisons(title: str, comparisons: list[rg.Comparison], threshold: float,
                       medians: tuple[str, str], fmt: str | None) -> None:
    """The verdicts as a listing: a table fitting the terminal, or csv/json/markdown (``--format``)."""
    colour = {"ok": "green", "improved": "cyan", "regression": "red", "missing": "red", "new-failures": "red",
              "too-few-loads": "red"}

    def ms(v: float | None) -> str:
        return f"{v:,.0f}" if v is not None else "–"

    def ratio(v: float | None) -> str:
        return f"{v:.3f}" if v is not None else "–"

    columns = (
        Column("scenario"), Column("scheme"),
        Column("verdict", style=styled(colour)),
        Column(medians[0].replace(" ", "_"), medians[0], justify="right", show=ms, drop=4),
        Column(medians[1].replace(" ", "_"), medians[1], justify="right", show=ms, drop=4),
        Column("test", drop=3), Column("ratio", show=ratio),
        Column("ci_low", in_table=False), Column("ci_high", in_table=False),
        Column("ci", "95% CI", in_data=False, drop=1),
        Column("n_current", in_table=False), Column("n_base", in_table=False),
        Column("n", in_data=False, drop=2),
        Column("late_current", in_table=False), Column("late_base", in_table=False),
        Column("late", in_data=False, drop=2),
        Column("note", fit="wrap", min_width=16))
    rows = [(c.label, c.scheme, c.verdict, c.current_median_ms, c.baseline_median_ms, c.method, c.ratio,
             c.ci_low, c.ci_high,
             f"[{c.ci_low:.3f}, {c.ci_high:.3f}]" if c.ci_low is not None and c.ci_high is not None else "–",
             c.n_current, c.n_baseline, f"{c.n_current}/{c.n_baseline}",
             c.n_late_current, c.n_late_baseline, f"{c.n_late_current}/{c.n_late_baseline}", c.note or "")
            for c in comparisons]
    Listing(title, columns, rows,
            caption=f"ratio: Hodges–Lehmann of the loads paired by trace stretch, else of all load pairs; exact 95% "
                    f"CI; regression when CI low > 1 and ratio ≥ {threshold:g}").render(fmt, _console())


def _finish(suite_name: str, comparisons: list[rg.Comparison], threshold: float, junit_path: Path | None,
            other_checks: list[tuple[str, str, bool, str]]) -> None:
    """JUnit XML if asked; exit status 1 when a check (or one of ``other_checks``: class name,
    name, passed, detail) failed."""
    if junit_path is not None:
        junit_path.parent.mkdir(parents=True, exist_ok=True)
        junit_path.write_bytes(rg.junit_xml(suite_name, comparisons, threshold, other_checks))
    failed = ([f"{c.label} {c.scheme} ({c.verdict})" for c in comparisons if c.failed]
              + [f"{name} ({detail})" for _, name, ok, detail in other_checks if not ok])
    total = len(comparisons) + len(other_checks)
    if failed:
        click.echo(f"{len(failed)} check(s) failed: " + ", ".join(failed), err=True)
        sys.exit(1)
    click.echo(f"all {total} check(s) passed", err=True)


def _regress_ab(spec_path: Path | None, against: str | None, candidate_rev: str | None, determinism: bool,
                sweep: str | None, threshold: float, junit_path: Path | None, output_root: Path | None,
                run_id_prefix: str, store_path: Path | None, influx_url: str | None, inject_delay_ms: float,
                rerun_late: bool, fmt: str | None) -> None:
    """The A/B mode (orchestrator/ab.py): build the base (and a --candidate commit), run SPEC
    on both sides interleaved, compare; with ``spec_path`` None only the determinism check."""
    from clawbed.orchestrator import ab
    from clawbed.orchestrator import determinism as det
    from clawbed.paths import runs_dir

    if threshold < 1:
        raise InputError(f"--threshold {threshold}: must be >= 1 (a PLT ratio)")
    if against is None:
        how, base_commit = ab.default_base()
    else:
        how, base_commit = f"--against {against}", ab.resolve_commit(against)
    say = lambda text: click.echo(text, err=True)  # noqa: E731 — progress goes to stderr, tables to stdout
    base = ab.prepare_tree(base_commit, say=say)
    candidate = (ab.prepare_tree(ab.resolve_commit(candidate_rev, flag="--candidate"), say=say)
                 if candidate_rev is not None else ab.working_tree())
    for name, built in (("base", base), ("candidate", candidate)):
        if not built.same_requirements:
            say(f"warning: the {name} ({built.commit[:12]}) pins other Python packages in requirements.lock than this "
                "venv has; its code runs with this venv's packages")
    say(f"A/B: base {base.describe()} ({how}); candidate {candidate.describe()}"
        + (f"; the candidate's loads slowed by {inject_delay_ms:g} ms (--inject-delay-ms)" if inject_delay_ms else ""))
    sweep = sweep or f"ab-{time.strftime('%Y%m%dT%H%M%S')}"
    suite_name = load_spec(spec_path).name if spec_path is not None else "determinism"
    root = ((output_root or runs_dir() / "suites") / suite_name / sweep).resolve()
    plan = ab.AbPlan(spec_path or Path("-"), base, candidate, sweep, root, inject_delay_ms=inject_delay_ms,
                     rerun_late=rerun_late, run_id_prefix=run_id_prefix)
    other_checks: list[tuple[str, str, bool, str]] = []
    determinism_result: dict[str, object] | None = None
    comparisons: list[rg.Comparison] = []
    summary = ab.AbSummary()
    if determinism:
        sides = {name: ab.Side(name, built, root / f"determinism-{name}.log")
                 for name, built in (("base", base), ("candidate", candidate))}
        try:
            result = det.check(sides, root / "determinism")
        finally:
            for s in sides.values():
                s.close()
        determinism_result = result.to_json()
        Listing(f"emulator determinism: {result.trace}, seed {result.seed} — the base's build against the "
                "candidate's", (Column("scenario"), Column("ok", "verdict", show=lambda v: "same" if v else "differs",
                                                          style=lambda v: "green" if v else "red"),
                                Column("detail", "what was compared", fit="wrap", min_width=20)),
                [(d.scenario, d.ok, d.detail) for d in result.differences]).render(fmt, _console())
        other_checks += [("emulator.determinism", f"determinism {d.scenario}", d.ok, d.detail)
                         for d in result.differences]
    if spec_path is not None:
        with Store(store_path, influx_url) as store:
            summary = ab.run_ab(plan, store, say=say)
            spec = load_spec(spec_path)
            labels = {s.label for s in spec.scenarios()}
            sides_samples = {side: {k: v for k, v in rg.samples_from_loads(
                store.loads(suite=spec.name, sweep=ab.side_sweep(sweep, side))).items() if v.label in labels}
                for side in ab.SIDES}
        comparisons = rg.compare(sides_samples["candidate"], sides_samples["base"], threshold=threshold)
        _print_comparisons(f"PLT regression check — {spec.name}: candidate {candidate.commit[:12]}"
                           f"{'+' if candidate.dirty else ''} vs base {base.commit[:12]}, interleaved on this machine",
                           comparisons, threshold, ("candidate ms", "base ms"), fmt)
        say(f"A/B: {summary.loads['base']} base and {summary.loads['candidate']} candidate load(s) in "
            f"{summary.wall_s:.0f} s; {summary.late_reruns['base']}/{summary.late_reruns['candidate']} run again because "
            f"the emulator fell behind (base/candidate); store sweeps {ab.side_sweep(sweep, 'base')}, "
            f"{ab.side_sweep(sweep, 'candidate')}")
        for side, label, r, why in summary.failed_rounds:  # the verdicts see them as fewer pairs or failures
            say(f"warning: round {r} of {label} failed on the {side} side: {why}")
    ab.write_result(root / "ab.json", plan, summary, comparisons, threshold, determinism_result)
    say(f"A/B result: {root / 'ab.json'}")
    _finish(suite_name, comparisons, threshold, junit_path, other_checks)
