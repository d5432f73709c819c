"""``clawbed trace …``: validate, inspect, synthesize, import, export, convert and plot traces."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from clawbed.errors import InputError

PathArg = click.Path(path_type=Path, dir_okay=False)
ExistingPath = click.Path(path_type=Path, dir_okay=False, exists=True)


@click.group()
def trace() -> None:
    """PHY traces: the per-subframe conditions that drive the emulated cell."""


@trace.command()
@click.argument("files", nargs=-1, required=True, type=PathArg)
@click.option("--quiet", "-q", is_flag=True, help="Print only the count of defects per file.")
def validate(files: tuple[Path, ...], quiet: bool) -> None:
    """Check FILES against the format; report every defect with its file, row and field.

    Exits 1 when any file has a defect.
    """
    from clawbed.traces.validate import validate_file

    bad = 0
    for path in files:
        defects = validate_file(path)
        if not quiet:
            for d in defects:
                click.echo(str(d))
        status = "ok" if not defects else f"{len(defects)} defect(s)"
        click.echo(f"{path}: {status}", err=bool(defects))
        bad += bool(defects)
    sys.exit(1 if bad else 0)


@trace.command()
@click.argument("file", type=ExistingPath)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def info(file: Path, as_json: bool) -> None:
    """Duration, capacity, other users' load and MCS statistics of FILE."""
    from clawbed.traces.io import read_trace
    from clawbed.traces.stats import render_summary, summarize

    summary = summarize(read_trace(file))
    if as_json:
        click.echo(json.dumps(summary, indent=2))
    else:
        render_summary(file, summary)


@trace.command()
@click.option("--preset", help="Scenario preset (see --list).")
@click.option("--seconds", type=click.FloatRange(min=0.001), default=60.0, show_default=True,
              help="Trace duration, s.")
@click.option("--seed", type=int, default=1, show_default=True, help="Random seed (same seed, same trace).")
@click.option("--bandwidth-mhz", type=float, help="Cell bandwidth; default: the preset's.")
@click.option("--antennas", type=click.IntRange(1, 2), help="Transmit antennas; default: the preset's.")
@click.option("--list", "list_presets", is_flag=True, help="List the presets and exit.")
@click.option("-o", "--output", type=PathArg, help="Output trace (.cbt or .csv).")
def synth(preset: str | None, seconds: float, seed: int, bandwidth_mhz: float | None,
          antennas: int | None, list_presets: bool, output: Path | None) -> None:
    """Generate a reproducible scenario trace from a preset."""
    from clawbed.traces.io import write_trace
    from clawbed.traces.synth import PRESETS, synthesize

    if list_presets:
        for name, p in PRESETS.items():
            click.echo(f"{name:14} {p.summary}")
        return
    if preset is None or output is None:
        raise InputError("synth needs --preset and -o/--output (see --list for presets)")
    trace_ = synthesize(preset, duration_ms=round(seconds * 1000), seed=seed,
                        bandwidth_mhz=bandwidth_mhz, n_antennas=antennas)
    write_trace(trace_, output)
    click.echo(f"wrote {output} ({trace_.duration_ms} subframes, preset {preset}, seed {seed})")


@trace.command(name="import")
@click.argument("source", type=ExistingPath)
@click.option("--from", "kind", type=click.Choice(["mahimahi", "decoder-csv"]), required=True,
              help="Kind of SOURCE.")
@click.option("--bandwidth-mhz", type=float, default=20.0, show_default=True,
              help="Cell bandwidth to map a capacity trace onto.")
@click.option("--antennas", type=click.IntRange(1, 2), default=2, show_default=True)
@click.option("-o", "--output", type=PathArg, required=True, help="Output trace (.cbt or .csv).")
def import_(source: Path, kind: str, bandwidth_mhz: float, antennas: int, output: Path) -> None:
    """Import a Mahimahi delivery-opportunity trace or a decoder's per-subframe CSV."""
    from clawbed.traces.importers import import_decoder_csv, import_mahimahi
    from clawbed.traces.io import write_trace

    reader = import_mahimahi if kind == "mahimahi" else import_decoder_csv
    trace_ = reader(source, bandwidth_mhz=bandwidth_mhz, n_antennas=antennas)
    write_trace(trace_, output)
    mapping = trace_.metadata["provenance"].get("mapping", "")
    click.echo(f"wrote {output} ({trace_.duration_ms} subframes). {mapping}")


@trace.command()
@click.argument("file", type=ExistingPath)
@click.option("--mahimahi", "as_mahimahi", is_flag=True, required=True,
              help="Write a Mahimahi delivery-opportunity trace (the UE's capacity alone).")
@click.option("-o", "--output", type=PathArg, required=True)
def export(file: Path, as_mahimahi: bool, output: Path) -> None:
    """Export FILE to another tool's format."""
    from clawbed.traces.importers import export_mahimahi
    from clawbed.traces.io import read_trace

    lines = export_mahimahi(read_trace(file), output)
    click.echo(f"wrote {output} ({lines} delivery opportunities)")


@trace.command()
@click.argument("source", type=ExistingPath)
@click.argument("output", type=PathArg)
def convert(source: Path, output: Path) -> None:
    """Convert between the binary (.cbt) and CSV (.csv) encodings."""
    from clawbed.traces.io import read_trace, write_trace

    write_trace(read_trace(source), output)
    click.echo(f"wrote {output}")


@trace.command()
@click.argument("file", type=ExistingPath)
@click.option("-o", "--output", type=PathArg, required=True, help="PNG file to write.")
@click.option("--start-s", type=float, default=0.0, show_default=True, help="Plot from this time, s.")
@click.option("--seconds", type=float, help="Plot this long, s (default: to the end).")
def plot(file: Path, output: Path, start_s: float, seconds: float | None) -> None:
    """PNG of MCS, other users' load and the implied capacity over time."""
    from clawbed.traces.io import read_trace
    from clawbed.traces.plot import plot_trace

    plot_trace(read_trace(file), output, start_s=start_s, seconds=seconds)
    click.echo(f"wrote {output}")
