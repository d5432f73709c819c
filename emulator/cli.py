"""``clawbed emu …``: run a command behind an emulated LTE cell (like Mahimahi's shells)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import click

from clawbed.emulator.policies import DEFAULT_SCHEDULER, SCHEDULERS

ExistingFile = click.Path(path_type=Path, dir_okay=False, exists=True)
#: How often the wait for the command looks at the emulator, s.
_POLL_S = 0.2


def _rate(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Check a rate flag with the binary's syntax, so ``--rate 12mbps`` fails before anything starts."""
    from clawbed.emulator.config import parse_rate_bps

    if value is not None:
        try:
            parse_rate_bps(value)
        except ValueError as e:
            raise click.BadParameter(str(e), ctx=ctx, param=param) from None
    return value


@click.group()
def emu() -> None:
    """The emulated LTE cell: namespaces, the clawbed-emu process, its diag feed and ground truth."""


@emu.command(context_settings={"allow_interspersed_args": False})
@click.option("--trace", "traces", multiple=True, type=ExistingFile,
              help="PHY trace (.cbt or .csv), mode cell: once for every UE, or once per UE.")
@click.option("--ues", "n_ues", type=click.IntRange(1, 64), default=1, show_default=True, help="Emulated UEs (namespaces).")
@click.option("--mode", type=click.Choice(["cell", "mahimahi", "rate"]),
              help="What drives the downlink. Default: rate with --rate, mahimahi with --mahimahi-trace, else cell.")
@click.option("--mahimahi-trace", "mahimahi_traces", multiple=True, type=ExistingFile,
              help="Mahimahi downlink trace, mode mahimahi: once for every UE, or once per UE.")
@click.option("--uplink-mahimahi-trace", "uplink_mahimahi_traces", multiple=True, type=ExistingFile,
              help="Mahimahi uplink trace (any mode): once for every UE, or once per UE.")
@click.option("--rate", callback=_rate, help="Downlink rate of every UE, mode rate, e.g. 12mbit.")
@click.option("--uplink-rate", callback=_rate, help="Uplink rate of every UE, e.g. 5mbit. Default: the trace's, else unlimited.")
@click.option("--scheduler", type=click.Choice(SCHEDULERS),
              help=f"The cell's scheduler (mode cell). Default {DEFAULT_SCHEDULER}.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True),
              help="Stop everything after this many seconds. Default: when the command exits.")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=1, show_default=True, help="Seed of the cell model.")
@click.option("--core-delay-ms", type=click.FloatRange(0, 10_000), help="Core network one-way delay, each direction, ms. Default 25.")
@click.option("--air-delay-ms", type=click.FloatRange(0, 10_000), help="Air interface delay, ms. Default 1.")
@click.option("--queue-bytes", type=click.IntRange(1, 1 << 30), help="Base-station queue of each UE, bytes. Default 3 MiB.")
@click.option("--rsrq-noise-db", type=click.FloatRange(0, 20), help="RSRQ measurement noise σ, dB. Default 0.5.")
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Output directory. Default: <runs>/emu-<run id>.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(traces: tuple[Path, ...], n_ues: int, mode: str | None, mahimahi_traces: tuple[Path, ...],
        uplink_mahimahi_traces: tuple[Path, ...], rate: str | None,
        uplink_rate: str | None, scheduler: str | None, seconds: float | None, seed: int, core_delay_ms: float | None,
        air_delay_ms: float | None, queue_bytes: int | None, rsrq_noise_db: float | None, out_dir: Path | None,
        command: tuple[str, ...]) -> int:
    """Run COMMAND inside UE 0's namespace behind an emulated cell; stop everything when it exits.

    COMMAND (after `--`; default: your $SHELL) reaches the server side at $CLAWBED_SERVER
    (the core namespace, $CLAWBED_CORE_NETNS: start servers there with `ip netns exec`).
    Exits with COMMAND's status (0 when --seconds ended it). Ctrl-C stops everything; the
    ground truth, diag feed and counters stay in the output directory.

    \b
    clawbed emu run --trace busy.cbt -- ping -c 5 10.64.0.1
    clawbed emu run --rate 12mbit --seconds 30 -- iperf3 -c 10.64.0.1
    clawbed emu run --mahimahi-trace Verizon-LTE-short.down --ues 2
    """
    from clawbed.emulator.process import EmulatedCell
    from clawbed.netns import new_run_id
    from clawbed.paths import runs_dir

    mode = mode or ("rate" if rate else "mahimahi" if mahimahi_traces else "cell")
    per_ue = _per_ue_settings(mode, n_ues, traces, mahimahi_traces, uplink_mahimahi_traces, rate, uplink_rate,
                              queue_bytes)
    run_id = new_run_id()
    out_dir = (out_dir or runs_dir() / f"emu-{run_id}").resolve()
    fields: dict[str, Any] = {"mode": mode, "seed": seed}
    delays = {k: v for k, v in {"core_down_ms": core_delay_ms, "core_up_ms": core_delay_ms,
                                "air_ms": air_delay_ms}.items() if v is not None}
    if delays:
        fields["delays"] = delays
    cell: dict[str, Any] = {}
    if scheduler:
        cell["scheduler"] = scheduler
    if rsrq_noise_db is not None:
        cell["rsrq"] = {"noise_db": rsrq_noise_db}
    if cell:
        fields["cell"] = cell
    argv = list(command) or [os.environ.get("SHELL", "/bin/sh")]

    status: int | None = None
    timed_out = interrupted = False
    with EmulatedCell(n_ues, out_dir, ue=per_ue, run_id=run_id, **fields) as emulated:
        topo, emulator = emulated.topo, emulated.emulator
        ue = topo.ues[0]
        env = dict(os.environ, CLAWBED_SERVER=str(topo.server_address), CLAWBED_CORE_NETNS=topo.core.name,
                   CLAWBED_UE_ADDRESS=str(ue.address), CLAWBED_UE_NETNS=ue.name,
                   CLAWBED_DIAG_PORT=str(emulator.diag_port(0)), CLAWBED_EMU_OUT=str(out_dir))
        click.echo(f"clawbed emu: {n_ues} UE(s) up, mode {mode}; UE 0 {ue.address} in {ue.name}, "
                   f"server side {topo.server_address} in {topo.core.name}, "
                   f"diag feed 127.0.0.1:{emulator.diag_port(0)} in {ue.name}", err=True)
        proc = ue.popen(argv, name="command", interactive=True, env=env)
        deadline = time.monotonic() + seconds if seconds else None
        try:
            while status is None:
                try:
                    status = proc.popen.wait(timeout=_POLL_S)
                except subprocess.TimeoutExpired:
                    emulator.check_alive()
                    if deadline is not None and time.monotonic() >= deadline:
                        click.echo(f"clawbed emu: {seconds} s are over; stopping {argv[0]}", err=True)
                        timed_out = True
                        status = proc.close()
        except KeyboardInterrupt:
            interrupted = True
            proc.close()
        counters = emulated.stop()
    _report(out_dir, n_ues, counters, interrupted)
    if interrupted:
        return 130
    if timed_out or status is None:
        return 0
    # A command killed by signal N exits, as in a shell, with 128 + N.
    return status if status >= 0 else 128 - status


def _per_ue_settings(mode: str, n_ues: int, traces: tuple[Path, ...], mahimahi_traces: tuple[Path, ...],
                     uplink_mahimahi_traces: tuple[Path, ...], rate: str | None, uplink_rate: str | None,
                     queue_bytes: int | None) -> list[dict[str, Any]]:
    """Each UE's settings from the flags; a flag given once applies to every UE."""

    def spread(flag: str, values: tuple[Path, ...]) -> list[Path]:
        if not values:
            raise click.UsageError(f"mode {mode} needs {flag}")
        if len(values) not in (1, n_ues):
            raise click.UsageError(f"{flag} was given {len(values)} times for {n_ues} UEs: give it once or once per UE")
        return list(values) * n_ues if len(values) == 1 else list(values)

    if mode != "cell" and traces:
        raise click.UsageError(f"--trace is for mode cell, not mode {mode}")
    if mode != "mahimahi" and mahimahi_traces:
        raise click.UsageError(f"--mahimahi-trace is for mode mahimahi, not mode {mode}")
    if mode != "rate" and rate:
        raise click.UsageError(f"--rate is for mode rate, not mode {mode}")
    if mode == "rate" and not rate:
        raise click.UsageError("mode rate needs --rate")
    if uplink_rate and uplink_mahimahi_traces:
        raise click.UsageError("give --uplink-rate or --uplink-mahimahi-trace, not both")
    settings: list[dict[str, Any]] = [{} for _ in range(n_ues)]
    if mode == "cell":
        for s, path in zip(settings, spread("--trace", traces)):
            s["trace"] = path
    elif mode == "mahimahi":
        for s, path in zip(settings, spread("--mahimahi-trace", mahimahi_traces)):
            s["mahimahi_trace"] = path
    if uplink_mahimahi_traces:
        for s, path in zip(settings, spread("--uplink-mahimahi-trace", uplink_mahimahi_traces)):
            s["uplink_mahimahi_trace"] = path
    for s in settings:
        if rate:
            s["rate"] = rate
        if uplink_rate:
            s["uplink_rate"] = uplink_rate
        if queue_bytes:
            s["cell"] = {"queue_limit_bytes": queue_bytes}
    return settings


def _report(out_dir: Path, n_ues: int, counters: dict[str, Any], interrupted: bool) -> None:
    """Where the run's files are, and what each UE's downlink carried."""
    how = "interrupted" if interrupted else "stopped"
    click.echo(f"clawbed emu: {how} after {counters.get('emulated_ms', 0) / 1000:.1f} s of emulated time", err=True)
    for i, ue in enumerate(counters.get("engine", {}).get("ues", [])):
        down = ue["downlink"]
        click.echo(f"  UE {i} downlink: {down['delivered']['packets']} packets, {down['delivered']['bytes']} bytes delivered; "
                   f"{down['dropped_overflow']['packets']} overflow drops, {down['dropped_rlc']['packets']} RLC losses", err=True)
    diag = "diag-ue0.jsonl" + (f" … diag-ue{n_ues - 1}.jsonl" if n_ues > 1 else "")
    click.echo(f"  output in {out_dir}/:\n"
               f"    ground truth  truth.cbcol   (clawbed.emulator.truth.read_truth)\n"
               f"    packet log    packets.cbcol (clawbed.emulator.truth.read_packets)\n"
               f"    diag feed     {diag}\n"
               f"    counters      counters.json\n"
               f"    config, log   emulator.json, emulator.log", err=True)

