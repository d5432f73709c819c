"""The ``clawbed`` command: one CLI, a subcommand group per area of the testbed."""

from __future__ import annotations

import importlib
import os
import sys
import time
import traceback
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
    "emu": "clawbed.emulator.cli:emu",
    "replay": "clawbed.replay.cli:replay",
    "suite": "clawbed.orchestrator.cli:suite",
    "results": "clawbed.orchestrator.cli:results",
    "regress": "clawbed.orchestrator.cli:regress",
    "dash": "clawbed.dashboards.cli:dash",
    "analyze": "clawbed.orchestrator.analyze:analyze",
    "fidelity": "clawbed.orchestrator.fidelity.cli:fidelity",
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
def cli() -> None:
    """clawbed: trace-driven LTE emulation for PHY-informed transport protocols."""


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
