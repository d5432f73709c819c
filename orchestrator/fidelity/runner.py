"""Running rows: for each selected ID of the table, its definition, the mechanisms it needs
(checked now), its experiment, and its result in the row's directory and the store.

A row whose definition is missing, whose mechanisms are not in this build, or that is left
out of the quick profile still gets its line (``error``, ``not-emulated``, ``skipped``): the
report never drops an ID. An experiment that raises is recorded as ``error`` with the message
and the run goes on with the next row.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from clawbed.errors import ClawbedError
from clawbed.orchestrator.fidelity import endpoints
from clawbed.orchestrator.fidelity.definitions import RowDef, load_rows
from clawbed.orchestrator.fidelity.harness import RowContext
from clawbed.orchestrator.fidelity.mechanisms import presence
from clawbed.orchestrator.fidelity.results import ERROR, NOT_EMULATED, SKIPPED, Outcome, record_row
from clawbed.paths import runs_dir

#: Run ids of the fidelity runs' namespaces start with this (``cbf…``).
RUN_ID_PREFIX = "f"


def experiment_for(name: str) -> Callable[[RowContext], Outcome]:
    from clawbed.orchestrator.fidelity import bulk, pageloads, realcells, reallogs, wwan

    table = {**bulk.EXPERIMENTS, **pageloads.EXPERIMENTS, **wwan.EXPERIMENTS, **realcells.EXPERIMENTS,
             **reallogs.EXPERIMENTS}
    if name not in table:
        raise ClawbedError(f"experiment {name!r} is not defined (known: {', '.join(sorted(table))})")
    return table[name]


def run_row(row: RowDef | None, row_id: str, run_dir: Path, *, run: str, quick: bool, store_path: Path | None,
            console: Console) -> Outcome:
    """Run one row into ``run_dir/<ID>/`` and the store; return its outcome."""
    started = time.time()
    out_dir = run_dir / row_id
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = "quick" if quick else "full"
    if row is None:
        outcome = Outcome(status=ERROR, reason=f"no row definition {row_id}.yaml in orchestrator/fidelity/rows/")
        record_row(store_path, run=run, row_id=row_id, profile=profile, paper="", criterion="", outcome=outcome,
                   run_dir=str(out_dir), started=started)
        return outcome
    outcome = Outcome(kernel=endpoints.kernel())
    ctx = RowContext(row=row, params=row.parameters(quick), out=out_dir, quick=quick, run_id_prefix=RUN_ID_PREFIX,
                     store_path=store_path, sweep=run, console=console, outcome=outcome)
    missing = [presence(m) for m in row.needs if not presence(m).present]
    absent_optional = [presence(m) for m in row.optional if not presence(m).present]
    outcome.metrics["mechanisms"] = {m: asdict(presence(m)) for m in [*row.needs, *row.optional]}
    if missing:
        outcome.status = NOT_EMULATED
        outcome.reason = "; ".join(p.reason() for p in missing)
    elif quick and row.quick_skip:
        outcome.status = SKIPPED
        outcome.reason = f"not in the quick profile: {row.quick_skip} (the full profile runs it, ~{row.full_minutes:g} min)"
    else:
        console.print(f"[bold]{row_id}[/bold] {row.title} ({profile})")
        try:
            experiment_for(row.experiment)(ctx)
            outcome.judge()
            if absent_optional:
                note = "; ".join(f"without {p.reason()}" for p in absent_optional)
                outcome.reason = " | ".join(x for x in (outcome.reason, note) if x)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - one row's failure is recorded, the run goes on
            outcome.status = ERROR
            outcome.reason = f"{type(e).__name__}: {e}"[:600]
            (out_dir / "error.txt").write_text(traceback.format_exc())
    if not outcome.sysctls and outcome.status not in (NOT_EMULATED, SKIPPED):
        try:
            outcome.sysctls = endpoints.probe(ctx.run_id(), out_dir)
        except (ClawbedError, OSError) as e:
            outcome.sysctls = {"error": str(e)}
    elif not outcome.sysctls:
        outcome.sysctls = {"note": "the row did not run: no namespaces of its own"}
    (out_dir / "row.json").write_text(json.dumps({"row": row.model_dump(), "profile": profile, "outcome": asdict(outcome)},
                                                 indent=1, default=str))
    record_row(store_path, run=run, row_id=row_id, profile=profile, paper=row.paper, criterion=row.criterion,
               outcome=outcome, run_dir=str(out_dir), started=started)
    colour = {"pass": "green", "fail": "red", "not-emulated": "yellow", "skipped": "cyan"}.get(outcome.status, "red")
    console.print(f"  {row_id}: [{colour}]{outcome.status}[/] {outcome.testbed} {('— ' + outcome.reason) if outcome.reason else ''}")
    return outcome


def run_rows(ids: list[str], *, quick: bool, store_path: Path | None = None, name: str | None = None,
             output_root: Path | None = None, console: Console | None = None) -> tuple[str, Path, dict[str, Outcome]]:
    """Run the rows ``ids`` (in order); return the run's name, directory and outcomes."""
    console = console or Console(stderr=True)
    name = name or f"fidelity-{'quick' if quick else 'full'}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir = ((output_root or runs_dir() / "fidelity") / name).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = load_rows()
    outcomes: dict[str, Outcome] = {}
    t0 = time.time()
    for row_id in ids:
        outcomes[row_id] = run_row(rows.get(row_id), row_id, run_dir, run=name, quick=quick, store_path=store_path,
                                   console=console)
    (run_dir / "run.json").write_text(json.dumps({"run": name, "profile": "quick" if quick else "full", "rows": ids,
                                                  "wall_s": time.time() - t0, "kernel": endpoints.kernel(),
                                                  "statuses": {k: v.status for k, v in outcomes.items()}}, indent=1))
    return name, run_dir, outcomes
