"""``clawbed emu …``: run a command behind an emulated LTE cell (like Mahimahi's shells), with
the same settings a replay takes (replay/settings.py): the scheme on the server side (its
congestion control set explicitly, never the host's default), the UE's stack, the cell's
policies. It lives in the replay layer because a scheme, DRWA and the UE's TCP settings do."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from clawbed.claw.schemes.base import SchemeContext, UeEndpoint, get_scheme, scheme_names
from clawbed.emulator.process import Emulator
from clawbed.emulator.topology import CellTopology
from clawbed.errors import InputError
from clawbed.netns import Resources
from clawbed.replay import drwa, rmem, settings
from clawbed.replay.flows import FlowSet
from clawbed.replay.network.crosstraffic import ue_flow_from
from clawbed.tcpstack import server_overrides, set_both_ends
from clawbed.traces.inputs import ACCEPTED, as_trace
from clawbed.traces.io import read_trace

#: The scheme ``emu run`` sets up when none is named: the kernel's Cubic, set explicitly.
DEFAULT_SCHEME = "cubic"
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


@emu.command(context_settings={"allow_interspersed_args": False},
             epilog="Settings of a replay's own web server, not offered here (emu run runs your servers): "
                    + ", ".join(settings.SETTINGS[n].flag for n in settings.SETTINGS if n not in settings.names("emu"))
                    + " (docs/settings.md).")
@click.option("--trace", "traces", multiple=True, type=ExistingFile,
              help=f"What drives the cell (mode cell): {ACCEPTED}, imported on the fly; once for every UE, "
                   f"or once per UE.")
@click.option("--ues", "n_ues", type=click.IntRange(1, 64), default=1, show_default=True, help="Emulated UEs (namespaces).")
@click.option("--mode", type=click.Choice(["cell", "mahimahi", "rate"]),
              help="What drives the downlink. Default: rate with --rate, mahimahi with --mahimahi-trace, else cell.")
@click.option("--mahimahi-trace", "mahimahi_traces", multiple=True, type=ExistingFile,
              help="Mahimahi downlink trace, mode mahimahi: once for every UE, or once per UE.")
@click.option("--uplink-mahimahi-trace", "uplink_mahimahi_traces", multiple=True, type=ExistingFile,
              help="Mahimahi uplink trace (any mode): once for every UE, or once per UE.")
@click.option("--rate", callback=_rate, help="Downlink rate of every UE, mode rate, e.g. 12mbit.")
@click.option("--schemes", "scheme", default=DEFAULT_SCHEME, show_default=True, metavar="SCHEME",
              help=f"The transport scheme of the server side (one of {', '.join(scheme_names())}): its "
                   f"congestion control becomes the core namespace's default, and its UE part (CLAW's "
                   f"client) runs on every UE.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True),
              help="Stop everything after this many seconds. Default: when the command exits.")
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=1, show_default=True, help="Seed of the cell model.")
@click.option("-o", "--output", "--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help="Output directory. Default: <runs>/emu-<run id>.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@settings.options("emu")
def run(traces: tuple[Path, ...], n_ues: int, mode: str | None, mahimahi_traces: tuple[Path, ...],
        uplink_mahimahi_traces: tuple[Path, ...], rate: str | None, scheme: str, seconds: float | None, seed: int,
        out_dir: Path | None, command: tuple[str, ...], **kwargs: Any) -> int:
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

    shared = settings.take(kwargs, "emu")
    try:
        get_scheme(scheme)
    except InputError as e:
        raise click.BadParameter(str(e), param_hint="--schemes") from None
    mode = mode or ("rate" if rate else "mahimahi" if mahimahi_traces else "cell")
    traces = tuple(as_trace(t, note=lambda m: click.echo(f"clawbed emu: {m}", err=True)) for t in traces)
    fields, ue_fields = settings.emulator_fields(shared)
    if shared.get("uplink_rate") and uplink_mahimahi_traces:
        raise click.UsageError("give --uplink-rate or --uplink-mahimahi-trace, not both")
    per_ue = [{**ue_fields, **s} for s in _per_ue_settings(mode, n_ues, traces, mahimahi_traces,
                                                           uplink_mahimahi_traces, rate)]
    run_id = new_run_id()
    out_dir = (out_dir or runs_dir() / f"emu-{run_id}").resolve()
    fields["mode"], fields["seed"] = mode, seed
    if shared.get("core_rtt_ms") is not None:
        half = shared["core_rtt_ms"] / 2
        fields["delays"] = {**fields.get("delays", {}), "core_down_ms": half, "core_up_ms": half,
                            "ignore_trace_core_delay": True}
    argv = list(command) or [os.environ.get("SHELL", "/bin/sh")]

    status: int | None = None
    timed_out = interrupted = False
    with EmulatedCell(n_ues, out_dir, ue=per_ue, run_id=run_id, **fields) as emulated:
        topo, emulator = emulated.topo, emulated.emulator
        ue = topo.ues[0]
        hosts = hosts_from_settings(emulated.res, topo, emulator, out_dir, scheme, shared,
                                    trace=traces[0] if mode == "cell" and traces else None, seed=seed)
        flows_t0 = time.time()
        env = dict(os.environ, CLAWBED_SERVER=str(topo.server_address), CLAWBED_CORE_NETNS=topo.core.name,
                   CLAWBED_UE_ADDRESS=str(ue.address), CLAWBED_UE_NETNS=ue.name,
                   CLAWBED_DIAG_PORT=str(emulator.diag_port(0)), CLAWBED_EMU_OUT=str(out_dir),
                   CLAWBED_SCHEME=scheme, CLAWBED_SERVER_CC=hosts.server_cc, CLAWBED_RUN_ID=run_id)
        click.echo(f"clawbed emu: run {run_id}: {n_ues} UE(s) up, mode {mode}; UE 0 {ue.address} in {ue.name}, "
                   f"server side {topo.server_address} in {topo.core.name}, "
                   f"diag feed 127.0.0.1:{emulator.diag_port(0)} in {ue.name}", err=True)
        click.echo(f"clawbed emu: scheme {scheme}: congestion control {hosts.server_cc} set as {topo.core.name}'s "
                   f"default; UE tcp_rmem {hosts.ue_rmem}"
                   + (f"; settings {settings.describe(shared)}" if settings.describe(shared) else ""), err=True)
        for line in hosts.stacks:  # what each end's TCP stack setting set (also in tcp-stacks.json)
            click.echo(f"clawbed emu: {line}", err=True)
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
        if hosts.flows.flows:  # their figures over the command's span, into flows.json / flows.csv
            for line in hosts.flows.finish(out_dir, flows_t0, time.time()):
                click.echo(f"clawbed emu: {line}", err=True)
        counters = emulated.stop()
    _report(out_dir, n_ues, counters, interrupted)
    if interrupted:
        return 130
    if timed_out or status is None:
        return 0
    # A command killed by signal N exits, as in a shell, with 128 + N.
    return status if status >= 0 else 128 - status


def _per_ue_settings(mode: str, n_ues: int, traces: tuple[Path, ...], mahimahi_traces: tuple[Path, ...],
                     uplink_mahimahi_traces: tuple[Path, ...], rate: str | None) -> list[dict[str, Any]]:
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
    per_ue: list[dict[str, Any]] = [{} for _ in range(n_ues)]
    if mode == "cell":
        for s, path in zip(per_ue, spread("--trace", traces)):
            s["trace"] = path
    elif mode == "mahimahi":
        for s, path in zip(per_ue, spread("--mahimahi-trace", mahimahi_traces)):
            s["mahimahi_trace"] = path
    if uplink_mahimahi_traces:
        for s, path in zip(per_ue, spread("--uplink-mahimahi-trace", uplink_mahimahi_traces)):
            s["uplink_mahimahi_trace"] = path
    for s in per_ue:
        if rate:
            s["rate"] = rate
    return per_ue


@dataclass
class HostSettings:
    """What ``emu run`` set on the hosts, for its banner."""

    server_cc: str
    ue_rmem: str
    #: One line per end: what its TCP stack setting set (clawbed/tcpstack.py).
    stacks: list[str]
    #: UE 0's background flows (replay/flows.py), running; none without ``--flow``.
    flows: FlowSet


def hosts_from_settings(res: Resources, topo: CellTopology, emulator: Emulator, out_dir: Path, scheme_name: str,
                        shared: dict[str, Any], trace: Path | None, seed: int = 1) -> HostSettings:
    """Set up the scheme on the core namespace (its congestion control the namespace's default,
    the server sysctls) and on every UE (its client), the UEs' receive buffers and DRWA, as a
    replay does; everything made goes on ``res`` and is removed with the run."""
    client_args: list[str] = []
    if trace is not None:  # CLAW's client sizes the cell from the trace's bandwidth and antennas
        header = read_trace(trace)
        client_args = ["--n-rb", str(header.n_rb), "--n-antennas", str(header.n_antennas)]
    client_args += ["--client-impl", shared.get("claw_client") or "fast"]
    endpoints = [UeEndpoint(u.ns, str(u.address), u.index, u.tun, emulator.diag_port(u.index)) for u in topo.ues]
    ctx = SchemeContext(resources=res, run_dir=out_dir, server_ns=topo.core.ns, server_address=str(topo.server_address),
                        server_device=topo.core.tun, ues=endpoints, client_args=client_args,
                        sysctls=server_overrides(shared.get("server_stack") or "current",
                                                 shared.get("server_sysctls")))
    scheme = get_scheme(scheme_name)()
    scheme.setup(ctx)
    scheme.start_clients(ctx)
    cap = rmem.resolve(shared.get("ue_rmem"))
    flows = FlowSet([ue_flow_from(f) for f in shared.get("flows") or []], seed)
    for u in topo.ues:
        if cap is not None:
            cap.apply(u.ns)
        else:
            u.ns.sysctl("net.ipv4.tcp_rmem", " ".join(str(v) for v in rmem.UNCAPPED))
        if shared.get("drwa") and not (u.index == 0 and flows.flows):  # UE 0's with its flows, below
            controller = drwa.Drwa(netns=u.ns.name, dev=u.tun, run_id=f"{res.run_id}{u.index}", run_dir=out_dir,
                                   ledger=res.ledger, log_path=out_dir / f"drwa-ue{u.index}.csv")
            res.callback(controller.close)
    # Both ends' stacks: the server's routes and Cubic's kernel-wide parameters, every UE's TCP.
    applied = set_both_ends(topo.core.ns, topo.core.tun, [(u.ns, u.tun) for u in topo.ues],
                            server_stack=shared.get("server_stack") or "current",
                            ue_stack=shared.get("ue_stack") or "current", ue_sysctls=shared.get("ue_sysctls"),
                            ue_offloads=shared.get("ue_offloads"), server_sysctls=shared.get("server_sysctls"))
    for one in applied:
        res.callback(one.restore)
    # UE 0's background flows, after its stack is set; one DRWA controller for the UE picks the
    # flows that ask for it (and, with --drwa, every other connection).
    if flows.flows:
        flows.start_with_drwa(res, topo, out_dir, page=bool(shared.get("drwa")))
    (out_dir / "tcp-stacks.json").write_text(json.dumps([a.describe() for a in applied], indent=1) + "\n")
    return HostSettings(server_cc=scheme.server_cc, stacks=[a.summary() for a in applied], flows=flows,
                        ue_rmem=" ".join(str(v) for v in (cap.tcp_rmem if cap is not None else rmem.UNCAPPED)))


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

