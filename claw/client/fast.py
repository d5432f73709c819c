"""The compiled CLAW client (``claw/client-rs``, binary ``clawbed-claw-client``) and how the
client's command line chooses it.

``python -m clawbed.claw.client`` runs the **fast** client by default: the same feed,
estimator, rate control, bottleneck detector, feedback and loss flags as the Python
client (:mod:`.daemon`, the **reference**), compiled, at a phone's cost (claw/DESIGN.md,
"The compiled client"). ``--client-impl reference`` (or ``CLAWBED_CLAW_CLIENT=reference``
in the environment) keeps the Python one; so does ``--feed mi2log`` (the byte stream is
decoded by the Python codec only), which is said on stderr.

Each UE keeps its own process, feed connection, feedback socket, marker and log, as
separate phones would. With ``--mark-dev`` this module loads the UE's ACK marker
(:class:`~.marking.AckMarker`, owned here and removed at exit), then runs the fast client
with the marker's pinned map and forwards SIGTERM / SIGINT to it; otherwise it replaces
itself with the fast client (no Python left running).

:func:`reference_replay` runs the reference over a recorded feed with a scripted server's
echoes and returns the merged input the fast client's ``replay`` takes: the test that
compares the two report by report, and the bench, use it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from clawbed.paths import REPO_ROOT

#: The compiled client (``cargo build --release``); ``CLAWBED_CLAW_CLIENT_BIN`` overrides.
BINARY = Path(os.environ.get("CLAWBED_CLAW_CLIENT_BIN") or REPO_ROOT / "target" / "release" / "clawbed-claw-client")
#: Environment setting that picks the client when ``--client-impl`` is not given.
IMPL_ENV = "CLAWBED_CLAW_CLIENT"
IMPLS = ("fast", "reference")
DEFAULT_IMPL = "fast"
#: The fast client reads the feed at most once per this many ms (``--batch-ms``): a wake-up
#: per subframe costs it more than the subframe's work (2.5 % of a core against 0.8 %).
FAST_BATCH_MS = 10


class FastClientError(RuntimeError):
    """The compiled client cannot be used: says why and what to do."""


def chosen_impl(flag: str | None) -> str:
    """The client to run: the flag, else :data:`IMPL_ENV`, else :data:`DEFAULT_IMPL`."""
    value = flag if flag is not None else os.environ.get(IMPL_ENV, DEFAULT_IMPL)
    if value not in IMPLS:
        source = "--client-impl" if flag is not None else IMPL_ENV
        raise FastClientError(f"{source} {value!r}: must be one of {', '.join(IMPLS)}")
    return value


def binary() -> Path:
    """The compiled client's path; raises when it is not built."""
    if not BINARY.is_file():
        raise FastClientError(f"{BINARY} not found: cd {REPO_ROOT} && cargo build --release --locked -p claw-client "
                              f"(or run the reference client: --client-impl reference)")
    return BINARY


def client_flags(args: Any) -> list[str]:
    """The fast client's flags for the client settings in ``args`` (the daemon's parsed
    arguments; the names are the same)."""
    out = ["--ue-id", str(args.ue_id), "--key-file", str(args.key_file), "--period-ms", str(args.period_ms),
           "--variant", args.variant, "--n-antennas", str(args.n_antennas), "--clamp", args.clamp,
           "--idle-timeout-ms", str(args.idle_timeout_ms), "--log-period-ms", str(args.log_period_ms)]
    if not args.bottleneck_detector:
        out.append("--no-bottleneck-detector")
    if args.n_rb is not None:
        out += ["--n-rb", str(args.n_rb)]
    if args.log is not None:
        out += ["--log", str(args.log)]
    return out


def run_argv(args: Any, *, ack_map: Path | None) -> list[str]:
    """The fast client's command line for the daemon's parsed arguments."""
    argv = [str(binary()), "run", *client_flags(args), "--server", args.server, "--diag-port", str(args.diag_port),
            "--connect-timeout-s", str(args.connect_timeout_s)]
    if args.netns:
        argv += ["--netns", args.netns]
    if ack_map is not None:
        argv += ["--ack-map", str(ack_map)]
    if args.ready_file is not None:
        argv += ["--ready-file", str(args.ready_file)]
    argv += ["--batch-ms", str(args.batch_ms)]
    return argv


def client_command(cli_args: Sequence[str]) -> list[str]:
    """The process to start for the client command line ``cli_args`` (what ``python -m
    clawbed.claw.client`` takes): the compiled client itself when that is what the launcher
    would run and then only replace itself with (the chosen client is fast, the feed JSON,
    and no ``--mark-dev``, whose marker the launcher would own), saving a Python start per
    client and load; else the launcher. The flags are translated as the launcher does
    (:func:`run_argv`); a command line it refuses is left to the launcher, which says why."""
    from clawbed.claw.client.cli import parser

    launcher = [sys.executable, "-m", "clawbed.claw.client", *cli_args]
    p = parser()
    p.exit_on_error = False

    def refuse(message: str) -> NoReturn:  # quietly: the launcher will say it in the client's log
        raise argparse.ArgumentError(None, message)

    p.error = refuse  # type: ignore[method-assign]
    try:
        args = p.parse_args(list(cli_args))
        if chosen_impl(args.client_impl) != "fast" or args.feed != "json" or args.mark_dev:
            return launcher
        return run_argv(args, ack_map=args.ack_map)
    except (SystemExit, argparse.ArgumentError, FastClientError):
        return launcher


def run_fast(args: Any) -> int:
    """Run the fast client for the daemon's parsed (and checked) arguments; its exit status."""
    if not args.mark_dev:
        argv = run_argv(args, ack_map=args.ack_map)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(argv[0], argv)  # nothing of Python stays running
    from clawbed.claw.client.marking import AckMarker
    from clawbed.netns import Ledger
    with AckMarker(netns=args.netns, dev=args.mark_dev, run_id=args.run_id, run_dir=args.run_dir, ue_id=args.ue_id,
                   ledger=Ledger(args.ledger) if args.ledger else None) as marker:
        # It ends with this process, which owns the marker (a killed launcher leaves no client).
        child = subprocess.Popen([*run_argv(args, ack_map=marker.config_pin), "--exit-with-parent"])

        def forward(signum: int, _frame: object) -> None:
            child.send_signal(signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            return child.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if child.poll() is None:
                child.kill()
                child.wait()


# -- the reference over a recorded feed, with a scripted server ---------------------------------

@dataclass
class EchoScript:
    """A deterministic server agent for a replay: each report is echoed ``srtt`` ms of diag
    time after it was made, with an srtt that steps through ``srtt_ms`` every ``step_ms``;
    the flow exists after ``flow_after_ms`` (cwnd 0 before), is cwnd-limited except in
    every third ``limited_ms`` stretch; every ``other_ue_every``-th report also gets an
    echo for another UE, every ``bad_mac_every``-th one a corrupted echo first."""

    srtt_ms: tuple[int, ...] = (60, 90, 45, 120)
    step_ms: int = 1500
    flow_after_ms: int = 200
    limited_ms: int = 700
    other_ue_every: int = 10
    bad_mac_every: int = 17

    def echoes(self, report: Any, start_ms: int, key: bytes) -> list[tuple[int, bytes]]:
        from clawbed.claw.feedback import Echo
        since = report.diag_time_ms - start_ms
        srtt = self.srtt_ms[(since // self.step_ms) % len(self.srtt_ms)]
        due = report.diag_time_ms + srtt
        echo = Echo(report.ue_id, report.seq, srtt * 1000 + 300, 20 if since >= self.flow_after_ms else 0,
                    (since // self.limited_ms) % 3 != 2)
        out: list[tuple[int, bytes]] = []
        if report.seq % self.bad_mac_every == 0:
            data = bytearray(echo.encode(key))
            data[-1] ^= 0xFF
            out.append((due, bytes(data)))
        out.append((due, echo.encode(key)))
        if report.seq % self.other_ue_every == 0:
            out.append((due, Echo((report.ue_id + 1) & 0xFFFF, report.seq, 1000, 1, True).encode(key)))
        return out


@dataclass
class ReferenceRun:
    """What the reference client did over a feed: the input for the fast client's replay
    (the feed's lines with the echoes where they arrived), its estimates log, its reports
    (datagrams in hex) and counters."""

    merged: list[bytes] = field(default_factory=list)
    log_text: str = ""
    reports: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    echoes_rejected: dict[str, int] = field(default_factory=dict)


def reference_replay(lines: Iterable[bytes], config: Any, key: bytes, script: EchoScript, log_path: Path,
                     *, log_period_ms: int = 1) -> ReferenceRun:
    """The reference client (:class:`~.core.ClientCore`, as its daemon drives it) over the
    feed's ``lines``, with ``script``'s echoes delivered once the feed's diag time reaches
    them; see :class:`ReferenceRun`."""
    from dataclasses import asdict

    from clawbed.claw.client.core import ClientCore, Step
    from clawbed.claw.client.estimates import EstimateLog
    from clawbed.claw.client.feed import FeedFormatError
    from clawbed.claw.feedback import FeedbackRejected, decode_echo

    core = ClientCore(config)
    run = ReferenceRun()
    pending: list[tuple[int, int, bytes]] = []  # (due ms, order, datagram)
    start_ms: int | None = None
    order = 0
    with EstimateLog(log_path, period_ms=log_period_ms) as log:
        def apply(step: Step) -> None:
            nonlocal start_ms, order
            for row in step.rows:
                log.write(row)
            for report in step.feedback:
                run.reports.append(report.encode(key).hex())
                if start_ms is None:
                    start_ms = report.diag_time_ms
                for due, data in script.echoes(report, start_ms, key):
                    pending.append((due, order, data))
                    order += 1

        def deliver(data: bytes) -> None:
            run.merged.append(json.dumps({"echo_hex": data.hex()}).encode())
            try:
                echo = decode_echo(data, key)
            except FeedbackRejected as e:
                run.echoes_rejected[e.reason.value] = run.echoes_rejected.get(e.reason.value, 0) + 1
                return
            if not core.on_echo(echo):
                run.echoes_rejected["other-ue"] = run.echoes_rejected.get("other-ue", 0) + 1

        for line in lines:
            now = core.decoder.clock.latest_ms
            if now is not None and pending:
                due = sorted(p for p in pending if p[0] <= now)
                pending[:] = [p for p in pending if p[0] > now]
                for _, _, data in due:
                    deliver(data)
            run.merged.append(line)
            try:
                message = json.loads(line)
                step = core.on_message(message)
            except (FeedFormatError, ValueError, KeyError, TypeError):
                core.counters.bad_messages += 1
                continue
            apply(step)
        apply(core.finish())
    run.log_text = log_path.read_text()
    run.counters = asdict(core.counters)
    return run


def fast_replay(merged: Sequence[bytes], flags: Sequence[str], workdir: Path) -> tuple[str, list[str], dict[str, Any]]:
    """The fast client over ``merged`` (a :class:`ReferenceRun`'s input) with client
    ``flags``: (its estimates log, its reports in hex, its report line's fields)."""
    feed = workdir / "fast-input.jsonl"
    feed.write_bytes(b"".join(line.rstrip(b"\n") + b"\n" for line in merged))
    log, reports = workdir / "fast-estimates.csv", workdir / "fast-reports.hex"
    done = subprocess.run([str(binary()), "replay", "--input", str(feed), "--log", str(log),
                           "--feedback-out", str(reports), *flags], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise FastClientError(f"clawbed-claw-client replay exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    last = done.stdout.strip().splitlines()[-1]
    return log.read_text(), reports.read_text().split(), json.loads(last.removeprefix("claw-client "))
