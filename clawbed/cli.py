"""The ``clawbed`` command: one CLI, a subcommand group per area of the testbed."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from clawbed import __version__
from clawbed.dashboards.cli import dash
from clawbed.emulator.cli import emu
from clawbed.errors import ClawbedError, InputError
from clawbed.replay.cli import replay
from clawbed.traces.cli import trace


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="clawbed")
def cli() -> None:
    """clawbed: trace-driven LTE emulation for PHY-informed transport protocols."""


cli.add_command(trace)
cli.add_command(emu)
cli.add_command(dash)
cli.add_command(replay)


@cli.command()
@click.argument("target", type=click.Path(path_type=Path, exists=True))
def cleanup(target: Path) -> None:
    """Remove what a killed run left behind, as recorded in its ledger.

    TARGET is a run directory (its ``ledger.jsonl``) or a ledger file. Only what the ledger
    records and still exists is removed: namespaces, links and the processes it started.
    """
    # Importing the BPF loader registers the cleanup of the kinds it records (pins, mounts, qdiscs).
    import clawbed.claw.server.loader  # noqa: F401
    from clawbed.netns import cleanup_from_ledger

    ledger = target / "ledger.jsonl" if target.is_dir() else target
    if not ledger.is_file():
        raise InputError(f"{target}: no ledger.jsonl here (a run directory or a ledger file is expected)")
    removed = cleanup_from_ledger(ledger)
    for item in removed:
        click.echo(f"removed {item}")
    click.echo(f"{ledger}: {len(removed)} leftover(s) removed")


def main() -> None:
    """Entry point: user-facing errors become one line on stderr and exit status 2."""
    try:
        status = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except ClawbedError as e:
        click.echo(f"clawbed: error: {e}", err=True)
        sys.exit(2)
    sys.exit(status if isinstance(status, int) else 0)
