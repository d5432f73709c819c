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
    from clawbed.traces.segments import channel_summary, render_lines
    from clawbed.traces.stats import render_summary, summarize

    trace_ = read_trace(file)
    summary = summarize(trace_)
    # An imported phone log: where its MCS is the log's, inferred or held, per second, and
    # the segments worth replaying.
    channel = channel_summary(trace_)
    if as_json:
        click.echo(json.dumps({**summary, "channel": channel}, indent=2))
    else:
        render_summary(file, summary)
        for line in render_lines(channel) if channel else ():
            click.echo(line)


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
@click.option("--from", "kind", type=click.Choice(["mahimahi", "decoder-csv", "mobileinsight",
                                                   "falcon", "ngscope"]), required=True,
              help="Kind of SOURCE: mobileinsight is a phone diag log (.mi2log/.qmdl); falcon "
                   "and ngscope are control-channel decoder logs.")
@click.option("--bandwidth-mhz", type=float, default=None,
              help="Cell bandwidth. Default: 20, except falcon/ngscope: inferred from the "
                   "largest assignment.")
@click.option("--antennas", type=click.IntRange(1, 2), default=2, show_default=True)
@click.option("--cell", type=click.IntRange(0, 7), default=0, show_default=True,
              help="mobileinsight: serving cell to import (0 = PCell, 1.. = SCells).")
@click.option("--dci", "dci_file", type=ExistingPath,
              help="mobileinsight: a FALCON or NG-Scope log of the same cell, for the other "
                   "users' RBs exactly (otherwise estimated from RSRQ).")
@click.option("--rnti", type=click.IntRange(0, 65535),
              help="falcon/ngscope: the UE's C-RNTI (default: the most active one).")
@click.option("--infer-b173-v48", "infer_v48", is_flag=True,
              help="mobileinsight: read 0xB173 version 48 (no published layout) with v36's, as "
                   "docs/diag-log-format.md §2.5 infers it; the provenance says so.")
@click.option("--segment", help="Keep only START:END, seconds of the import (either may be empty), or "
                                 "'best': the span where the log says most about the cell (trace info lists them).")
@click.option("-o", "--output", type=PathArg, required=True, help="Output trace (.cbt or .csv).")
def import_(source: Path, kind: str, bandwidth_mhz: float | None, antennas: int, cell: int,
            dci_file: Path | None, rnti: int | None, infer_v48: bool, segment: str | None, output: Path) -> None:
    """Import a Mahimahi trace, a decoder's per-subframe CSV, a phone diag log or a DCI log."""
    from clawbed.traces import importers
    from clawbed.traces.io import write_trace
    from clawbed.traces.segments import cut, parse_segment

    if kind not in ("mobileinsight",) and (dci_file is not None or cell != 0 or infer_v48):
        raise InputError("--dci, --cell and --infer-b173-v48 apply to --from mobileinsight only")
    if kind not in ("falcon", "ngscope") and rnti is not None:
        raise InputError("--rnti applies to --from falcon / ngscope only")
    if kind in ("falcon", "ngscope"):
        trace_ = importers.import_dci_log(source, kind=kind, bandwidth_mhz=bandwidth_mhz,
                                          n_antennas=antennas, rnti=rnti)
    else:
        bw = 20.0 if bandwidth_mhz is None else bandwidth_mhz
        if kind == "mobileinsight":
            trace_ = importers.import_mobileinsight(source, bandwidth_mhz=bw, n_antennas=antennas,
                                                    cell=cell, dci_path=dci_file, infer_v48=infer_v48)
        else:
            reader = importers.import_mahimahi if kind == "mahimahi" else importers.import_decoder_csv
            trace_ = reader(source, bandwidth_mhz=bw, n_antennas=antennas)
    cut_note = ""
    if segment is not None:
        of_ms = trace_.duration_ms
        trace_ = cut(trace_, *parse_segment(segment, trace_))
        seg = trace_.metadata["provenance"]["segment"]
        cut_note = f", {seg['from_ms']}–{seg['to_ms']} ms of the import's {of_ms}"
    write_trace(trace_, output)
    mapping = trace_.metadata["provenance"].get("mapping", "")
    click.echo(f"wrote {output} ({trace_.duration_ms} subframes{cut_note}). {mapping}")


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
@click.argument("old_output", metavar="[OUTPUT]", required=False, type=PathArg)
@click.option("-o", "--output", type=PathArg, help="Output trace (.cbt or .csv; the encoding from its suffix).")
def convert(source: Path, old_output: Path | None, output: Path | None) -> None:
    """Convert SOURCE between the binary (.cbt) and CSV (.csv) encodings, into -o OUTPUT.

    The older form with OUTPUT as a second argument still works, with a note: every command
    that writes a file takes it as -o/--output.
    """
    from clawbed.traces.io import read_trace, write_trace

    if old_output is not None and output is not None:
        raise click.UsageError(f"OUTPUT given twice ({old_output} and -o {output}): give -o only")
    if old_output is not None:
        # Kept so scripts written for it go on working; said so, so they move to -o.
        click.echo(f"note: `trace convert SOURCE OUTPUT` is deprecated: use `trace convert {source} -o {old_output}`",
                   err=True)
        output = old_output
    if output is None:
        raise click.UsageError("give the output trace with -o/--output (e.g. -o busy.csv)")
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


@trace.command(name="feed-timing")
@click.argument("logs", nargs=-1, required=True, type=ExistingPath)
@click.option("-o", "--output", type=PathArg, help="Write the whole result (per log, per code) as JSON here.")
def feed_timing(logs: tuple[Path, ...], output: Path | None) -> None:
    """How a phone's diag port delivered LOGS (.mi2log / .qmdl): records per log packet and how
    late each packet went after its last record, per log code, with the packing rule that
    explains them (method: traces/diaglog/feedtiming.py; the shared real logs' result, which
    the emulator's phone feed timing uses: traces/diaglog/phone-feed-timing.json)."""
    from clawbed.traces.diaglog.feedtiming import measure

    result = measure(logs)
    for name, s in result["pooled"].items():
        if not s["packets"]:
            continue
        r, d = s["records_per_packet"], s["delay_ms"]
        tick = f"{s['flush_period_ms']:g} ms" if s["flush_period_ms"] else "none seen"
        click.echo(f"{name}: {s['packets']} packets, {r['p50']:g} records each (median; at most "
                   f"{s['capacity_records']}); sent after the last record p50 {d['p50']:g} ms, p90 {d['p90']:g} ms, "
                   f"max {d['p100']:g} ms; flush tick {tick}")
    if output is not None:
        output.write_text(json.dumps(result, indent=1) + "\n")
        click.echo(f"wrote {output}")
