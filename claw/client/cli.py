"""The CLAW client's command line, ``python -m clawbed.claw.client``: one parser and one set
of checks for both clients, and the choice between them (:func:`main`): the compiled one
(:mod:`.fast`, the default) or the Python reference (:mod:`.daemon`). Nothing heavy is
imported before the choice, so starting the fast client costs a bare interpreter's start
(a load's set-up waits for it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from clawbed.claw.client.fast import DEFAULT_IMPL, FAST_BATCH_MS, IMPL_ENV, IMPLS, FastClientError, chosen_impl
from clawbed.claw.client.limits import (
    CELL_SIZES_RB,
    DEFAULT_DIAG_PORT,
    DEFAULT_IDLE_TIMEOUT_MS,
    FEEDS,
    MAX_FEEDBACK_PERIOD_MS,
    MIN_FEEDBACK_PERIOD_MS,
    VARIANTS,
)
from clawbed.claw.feedback import read_key
from clawbed.errors import ClawbedError, InputError


def parse_endpoint(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv4 address or a name) → (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT with a port 1..65535")
    return host, int(port)


def parser() -> argparse.ArgumentParser:
    """The client's command line (both clients take it)."""
    p = argparse.ArgumentParser(
        prog="python -m clawbed.claw.client",
        description="The CLAW client of one UE: reads the UE's diag feed, estimates the cell's load and the "
                    "UE's available capacity (W_claw), reports it to the CLAW server agent, and flags the UE's "
                    "TCP ACKs after RLC losses and base-station overflows.",
        epilog="Example (in the UE namespace of an emulated cell): python -m clawbed.claw.client --ue-id 0 "
               "--netns cbab12u0 --server 10.64.0.1:7070 --key-file run/key --n-antennas 2 --log run/claw.csv",
    )
    p.add_argument("--ue-id", type=int, required=True, help="UE id in the feedback reports (0..65535)")
    p.add_argument("--server", required=True, metavar="HOST:PORT", help="the CLAW server agent's UDP address")
    p.add_argument("--key-file", type=Path, required=True,
                   help="file holding the key shared with the server agent (its exact bytes, ≥ 16)")
    p.add_argument("--diag-port", type=int, default=DEFAULT_DIAG_PORT,
                   help=f"diag feed TCP port on 127.0.0.1 in the UE namespace (default {DEFAULT_DIAG_PORT})")
    p.add_argument("--feed", choices=FEEDS, default="json",
                   help="json: the emulator's JSON lines on --diag-port (default); mi2log: the phone's diag byte "
                        "stream (HDLC frames of log packets), on --mi2log-port or from --mi2log-device, decoded by the "
                        "same codec as imported logs; the estimates are the same")
    p.add_argument("--mi2log-port", type=int,
                   help="TCP port of the byte stream on 127.0.0.1 in the UE namespace (default: --diag-port + 1)")
    p.add_argument("--mi2log-device", type=Path,
                   help="read the byte stream from this pseudo-terminal or serial device instead (the emulator's "
                        "diag.mi2log.pty, or a phone's diag port)")
    p.add_argument("--netns", help="UE namespace to open the feed and feedback sockets in "
                                   "(default: the namespace this process runs in)")
    p.add_argument("--period-ms", type=int, default=100,
                   help="feedback period, ms of diag time, 1 (every subframe) .. 10000 (default 100)")
    p.add_argument("--variant", choices=VARIANTS, default=VARIANTS[0],
                   help="claw (own + idle RBs) or cqic (own RBs only, no detector) (default claw)")
    p.add_argument("--no-bottleneck-detector", dest="bottleneck_detector", action="store_false",
                   help="never report a wireline bottleneck (CLAW without its detector, as in the paper's Fig 14; "
                        "hybrid mode stays)")
    p.add_argument("--n-antennas", type=int, choices=[1, 2], default=2,
                   help="the cell's transmit antennas, from its configuration (default 2)")
    p.add_argument("--n-rb", type=int, choices=CELL_SIZES_RB,
                   help="the cell's RBs (default: from the first measurement, RSRQ = N_rb·RSRP/RSSI)")
    p.add_argument("--clamp", choices=["window", "sample"], default="window",
                   help="clamp Eq. 7 on the window's mean L (default; unbiased under RSRQ noise) or on each "
                        "r_k (the spec's rule)")
    p.add_argument("--idle-timeout-ms", type=int, default=DEFAULT_IDLE_TIMEOUT_MS,
                   help=f"no scheduled subframe for this long = radio idle (default {DEFAULT_IDLE_TIMEOUT_MS})")
    p.add_argument("--log", type=Path, help="CSV file for the per-subframe estimates")
    p.add_argument("--log-period-ms", type=int, default=1, help="log one row per this many ms (default 1: every subframe)")
    mark = p.add_argument_group("ACK marking (loss flags)")
    mark.add_argument("--mark-dev", help="load claw/bpf/ack_mark_egress (built by claw/bpf/build.sh) on this "
                                         "device of the UE namespace (needs --netns, --run-id and --run-dir)")
    mark.add_argument("--run-id", help="run id: the marker's bpffs mount is named cb<run id>m<ue id>")
    mark.add_argument("--run-dir", type=Path, help="run directory: the marker's bpffs is mounted inside it")
    mark.add_argument("--ledger", type=Path, help="the run's ledger: the marker's bpffs and tc filter are recorded "
                                                  "there, so `clawbed cleanup` removes them after a crash")
    mark.add_argument("--ack-map", type=Path, help="instead of --mark-dev: the pinned config map of a marker "
                                                   "loaded by someone else")
    p.add_argument("--ready-file", type=Path,
                   help="once the client can do its job (ACK marker attached, feedback socket open, diag feed "
                        "connected), append a line 'ready ue=<id> pid=<pid>' to this file or FIFO (a launcher's "
                        "readiness signal; the first estimate comes later, with the feed's first message)")
    p.add_argument("--connect-timeout-s", type=float, default=10.0,
                   help="how long to retry the diag feed while it refuses (default 10)")
    p.add_argument("--client-impl", choices=IMPLS, default=None,
                   help=f"fast: the compiled client (claw/client-rs, the same outputs at a phone's cost); reference: "
                        f"this Python one (default: ${IMPL_ENV}, else {DEFAULT_IMPL}; --feed mi2log runs the reference)")
    p.add_argument("--batch-ms", type=int, default=FAST_BATCH_MS,
                   help=f"fast client only: read the feed at most once per this many ms (default {FAST_BATCH_MS}; 0: "
                        "as it arrives); the estimates and verdicts are the same, reports and loss flags leave up to "
                        "this much later")
    return p


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[tuple[str, int], bytes]:
    """Check the arguments (errors through ``parser.error``): (the server's address, the key)."""
    if not 0 <= args.ue_id <= 0xFFFF:
        parser.error(f"--ue-id {args.ue_id}: must be 0..65535")
    if not MIN_FEEDBACK_PERIOD_MS <= args.period_ms <= MAX_FEEDBACK_PERIOD_MS:
        parser.error(f"--period-ms {args.period_ms}: must be {MIN_FEEDBACK_PERIOD_MS}..{MAX_FEEDBACK_PERIOD_MS}")
    if not 0 <= args.diag_port <= 65535:
        parser.error(f"--diag-port {args.diag_port}: must be 0..65535")
    if (args.mi2log_port is not None or args.mi2log_device is not None) and args.feed != "mi2log":
        parser.error("--mi2log-port and --mi2log-device need --feed mi2log")
    if args.mi2log_port is not None and not 1 <= args.mi2log_port <= 65535:
        parser.error(f"--mi2log-port {args.mi2log_port}: must be 1..65535")
    if args.mi2log_port is not None and args.mi2log_device is not None:
        parser.error("give --mi2log-port or --mi2log-device, not both")
    if not 0 <= args.batch_ms <= 1000:
        parser.error(f"--batch-ms {args.batch_ms}: must be 0..1000")
    if args.idle_timeout_ms < 1:
        parser.error("--idle-timeout-ms must be at least 1")
    if args.log_period_ms < 1:
        parser.error("--log-period-ms must be at least 1")
    try:
        server = parse_endpoint(args.server)
    except ValueError as e:
        parser.error(f"--server: {e}")
    if args.mark_dev and args.ack_map:
        parser.error("give --mark-dev or --ack-map, not both")
    if args.mark_dev and not (args.netns and args.run_id and args.run_dir):
        parser.error("--mark-dev needs --netns, --run-id and --run-dir")
    if args.ledger and not args.mark_dev:
        parser.error("--ledger records the marker's objects: it needs --mark-dev")
    if args.netns and not Path(f"/var/run/netns/{args.netns}").exists():
        parser.error(f"--netns {args.netns}: no such network namespace")
    try:
        key = read_key(args.key_file)
    except InputError as e:
        parser.error(f"--key-file: {e}")
    return server, key


def main(argv: Sequence[str] | None = None) -> int:
    """Parse and check the command line, then run the chosen client; its exit status."""
    p = parser()
    args = p.parse_args(argv)
    server, key = check(args, p)
    try:
        impl = chosen_impl(args.client_impl)
    except FastClientError as e:
        p.error(str(e))
    if impl == "fast" and args.feed != "json":
        print(f"claw-client: --feed {args.feed} is decoded by the reference client only: running it", file=sys.stderr)
        impl = "reference"
    if impl == "fast":
        from clawbed.claw.client.fast import run_fast
        try:
            return run_fast(args)
        except (FastClientError, ClawbedError) as e:
            print(f"claw-client: error: {e}", file=sys.stderr)
            return 1
    from clawbed.claw.client.daemon import run_reference
    return run_reference(args, server, key)
