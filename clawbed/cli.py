"""The ``clawbed`` command: one CLI, a subcommand group per area of the testbed."""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from clawbed import __version__
from clawbed.errors import ClawbedError, InputError
from clawbed.paths import state_dir
from clawbed.signals import restore_default_signals

#: Each area's command, as "module:object": imported only when that command runs, so that a
#: quick `clawbed trace info` does not pay for the browser, Grafana or InfluxDB libraries.
AREAS = {
    "trace": "clawbed.traces.cli:trace",
    "emu": "clawbed.replay.shell:emu",
    "replay": "clawbed.replay.cli:replay",
    "suite": "clawbed.orchestrator.cli:suite",
    "results": "clawbed.orchestrator.cli:results",
    "regress": "clawbed.orchestrator.cli:regress",
    "dash": "clawbed.dashboards.cli:dash",
    "analyze": "clawbed.orchestrator.analyze:analyze",
    "fidelity": "clawbed.orchestrator.fidelity.cli:fidelity",
    "runs": "clawbed.orchestrator.runs:runs",
}


class AreaGroup(click.Group):
    """The top-level group: the commands of :data:`AREAS` load on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *AREAS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in AREAS:
            module, _, attr = AREAS[name].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, name)


@click.group(cls=AreaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="clawbed")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """clawbed: trace-driven LTE emulation for PHY-informed transport protocols."""
    # `clawbed replay` records its loads in the result store; the store is the orchestrator's,
    # a layer above replay, so the two meet here (the key is replay/cli.py's RECORDER_META).
    ctx.meta["clawbed.replay.recorder"] = _replay_recorder


def _replay_recorder(run: object, warn: Callable[[str], None]) -> object:
    """What records a replay in its runs folder's result store (clawbed.orchestrator.runs)."""
    from clawbed.orchestrator.runs import ReplayRecorder

    return ReplayRecorder.for_run(run, warn)


@cli.command()
@click.argument("target", type=click.Path(path_type=Path, exists=True))
def cleanup(target: Path) -> None:
    """Remove what a killed run left behind, as recorded in its ledger.

    TARGET is a run directory (its ``ledger.jsonl``) or a ledger file. Only what the ledger
    records and still exists is removed: namespaces, links and the processes it started.
    """
    from clawbed.netns import cleanup_from_ledger

    ledger = target / "ledger.jsonl" if target.is_dir() else target
    if not ledger.is_file():
        raise InputError(f"{target}: no ledger.jsonl here (a run directory or a ledger file is expected)")
    removed = cleanup_from_ledger(ledger)
    for item in removed:
        click.echo(f"removed {item}")
    click.echo(f"{ledger}: {len(removed)} leftover(s) removed")


@cli.command("exec", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("run")
@click.argument("role")
@click.argument("argv", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_(run: str, role: str, argv: tuple[str, ...]) -> None:
    """Run a command inside a live run's UE, server or core namespace.

    RUN is the run directory (a path, or its name under the runs folder); ROLE is ue (UE 0;
    ue<i> for UE i), server or core. The namespace comes from the run's record (manifest and
    ledger), never from a name pattern; a run that has ended, or a namespace that is gone, is
    refused. Example: clawbed exec 2026-11-28T23-40-00 ue -- ping -c 3 10.64.0.1
    """
    from clawbed.live import exec_in

    exec_in(run, role, list(argv))


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text (80 columns) or JSON")
@click.option("--sample-s", type=click.FloatRange(min=0.0, max=60.0), default=1.0, show_default=True,
              help="how long to watch steal time and other processes' CPU use (0: not at all)")
def doctor(fmt: str, sample_s: float) -> None:
    """Can this machine hold the emulator's 1 ms clock in real time? CPUs, the kernel's
    preemption model, SCHED_FIFO, frequency scaling, steal time and other busy processes,
    each with what to change, and a verdict: ok, warn or bad (exit status 1 when bad)."""
    import json

    from clawbed.doctor import collect, judge, render

    report = judge(collect(sample_s))
    click.echo(json.dumps(report.to_json(), indent=2) if fmt == "json" else render(report))
    if report.verdict == "bad":
        sys.exit(1)


def _save_traceback(exc: BaseException) -> Path | None:
    """Write an unexpected error's traceback under the state folder, for a bug report;
    None when even that fails (the one-line message still goes out)."""
    try:
        folder = state_dir() / "errors"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        path.write_text(f"clawbed {__version__}: {' '.join(sys.argv)}\n"
                        + "".join(traceback.format_exception(exc)))
        return path
    except OSError:
        return None


def main() -> None:
    """Entry point: every error becomes one line on stderr (exit status 2; 130 when
    interrupted); an unexpected one's traceback goes to a file that the line names."""
    restore_default_signals()
    try:
        status = cli.main(standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except ClawbedError as e:
        click.echo(f"clawbed: error: {e}", err=True)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001 - a bug still gets one line, not a traceback
        saved = _save_traceback(e)
        where = f"; details in {saved}" if saved else ""
        click.echo(f"clawbed: internal error: {type(e).__name__}: {e}{where}", err=True)
        sys.exit(2)
    sys.exit(status if isinstance(status, int) else 0)
