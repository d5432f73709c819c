"""The ``clawbed`` command: one CLI, a subcommand group per area of the testbed."""

from __future__ import annotations

import sys

import click

from clawbed import __version__
from clawbed.errors import ClawbedError
from clawbed.traces.cli import trace


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="clawbed")
def cli() -> None:
    """clawbed: trace-driven LTE emulation for PHY-informed transport protocols."""


cli.add_command(trace)


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
