"""The CLAW client daemon of one UE (asyncio).

- reads the UE's diag feed (127.0.0.1:<port> of the UE namespace, or of the namespace it
  runs in), says so on ``--ready-file`` once connected (:func:`signal_ready`), and feeds
  :class:`~.core.ClientCore` every message; with ``--feed mi2log``, the same feed as the phone's diag byte stream (HDLC
  frames of log packets, the emulator's port ``diag port + 1`` or a pseudo-terminal /
  serial device), decoded by the diag-log codec (:func:`.feed.mi2log_stream`) into the
  same messages;
- sends each feedback report the core makes (default every 100 ms of diag time, down to
  every subframe) as an HMAC-authenticated UDP datagram (``clawbed.claw.feedback``) to the
  server agent, from the UE namespace;
- reads the agent's echoes: the smoothed RTT becomes the window T (and the ACK-marking
  window), the cwnd-limited flag (held back by the network at W_claw) goes to the
  bottleneck detector;
- turns RLC-loss and BS-overflow events into ACK marks by writing the event's
  CLOCK_MONOTONIC time and kind into the egress BPF program's map (:mod:`.marking`);
- logs its estimates per subframe to a CSV file (:mod:`.estimates`);
- stops cleanly on SIGTERM / SIGINT (log flushed, marker removed, sockets closed) and
  prints one ``claw-client {json}`` line with its counters.

``python -m clawbed.claw.client --help`` for the command line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from clawbed.claw.client.analyzer import Variant
from clawbed.claw.client.cli import check, parser
from clawbed.claw.client.cli import main as main  # the command line, for its users
from clawbed.claw.client.cli import parse_endpoint as parse_endpoint
from clawbed.claw.client.core import ClientConfig, ClientCore, Step
from clawbed.claw.client.estimates import EstimateLog
from clawbed.claw.client.feed import FeedFormatError, LossKind, mi2log_stream
from clawbed.claw.client.limits import DEFAULT_DIAG_PORT
from clawbed.claw.client.limits import FEEDS as FEEDS
from clawbed.claw.feedback import ECHO_BYTES, FeedbackRejected, decode_echo
from clawbed.errors import ClawbedError

#: Shortest key accepted, bytes (HMAC-SHA256 keys should be at least 16 bytes).
#: A loss event older than this when it is read is stamped "now" rather than in the past, s.
MAX_EVENT_LAG_S = 1.0
#: After the feed closed, how long a new connection is tried before the client ends, s.
RECONNECT_TIMEOUT_S = 1.0
#: Longest line the local feed reader accepts, bytes.
MAX_LINE_BYTES = 1 << 20
#: Bytes read from a byte stream at once.
STREAM_READ_BYTES = 1 << 16


class ClientError(ClawbedError):
    """The client cannot start or run: says which input or resource and why."""


class LossMarker(Protocol):
    """Where loss events go (the egress program's map, or a test double)."""

    def note_event(self, kind: LossKind, at_monotonic_ns: int) -> None: ...

    def set_window_ms(self, window_ms: int) -> None: ...


@dataclass
class DaemonConfig:
    """Everything the daemon runs with."""

    client: ClientConfig
    #: The server agent (the feedback's destination).
    server: tuple[str, int]
    key: bytes
    diag_port: int = DEFAULT_DIAG_PORT
    #: The UE namespace (feed and feedback sockets are made there); None: this process's.
    netns: str | None = None
    log_path: Path | None = None
    log_period_ms: int = 1
    connect_timeout_s: float = 10.0
    #: ``json`` or ``mi2log`` (the byte stream on ``mi2log_port``, or ``device``).
    feed: str = "json"
    #: TCP port of the byte stream; None: ``diag_port + 1`` (the emulator's choice).
    mi2log_port: int | None = None
    #: A pseudo-terminal or serial device to read the byte stream from instead of TCP.
    device: Path | None = None
    #: Where to say "ready" once the feed is open (:func:`signal_ready`); None: nowhere.
    ready_file: Path | None = None


@dataclass
class DaemonReport:
    """What the daemon did; printed as its last line."""

    ended_by: str = ""
    counters: dict[str, int] = field(default_factory=dict)
    feedback_sent: int = 0
    feedback_send_errors: int = 0
    echoes_rejected: dict[str, int] = field(default_factory=dict)
    marks_written: int = 0
    feed_reconnects: int = 0
    log_rows: int = 0
    window_ms: int = 0


def _socket(netns: str | None, kind: int) -> socket.socket:
    if netns is None:
        return socket.socket(socket.AF_INET, kind)
    from clawbed.netns import socket_in_namespace
    return socket_in_namespace(netns, socket.AF_INET, kind)


async def _stream_connection(config: DaemonConfig, port: int, what: str) -> tuple[asyncio.StreamReader, Any]:
    """A connection to 127.0.0.1:``port`` (in the UE namespace when given), retrying while
    refused; (reader, closer). ``what`` names the feed in errors."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + config.connect_timeout_s
    where = f"{what} 127.0.0.1:{port}" + (f" in namespace {config.netns}" if config.netns else "")
    while True:
        try:
            sock = _socket(config.netns, socket.SOCK_STREAM)
        except ClawbedError as e:
            raise ClientError(f"{where}: {e}") from e
        sock.setblocking(False)
        try:
            await loop.sock_connect(sock, ("127.0.0.1", port))
            break
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() >= deadline:
                raise ClientError(f"{where}: connection refused for {config.connect_timeout_s} s "
                                  "(is the emulator running with this feed, and is this the UE's "
                                  "namespace?)") from None
            await asyncio.sleep(0.05)
        except OSError as e:
            sock.close()
            raise ClientError(f"{where}: {e.strerror or e}") from e
    reader, writer = await asyncio.open_connection(sock=sock, limit=MAX_LINE_BYTES)
    return reader, writer


async def _json_feed(config: DaemonConfig, on_connected: Callable[[], None]) -> AsyncIterator[dict[str, Any]]:
    """The emulator's JSON-lines feed at 127.0.0.1:``diag_port`` (in the UE namespace when
    given); ``on_connected`` runs once connected, before the first message (which the
    phone's feed timing sends only at its first flush)."""
    port = config.diag_port
    reader, writer = await _stream_connection(config, port, "diag feed")
    on_connected()
    # Whatever has arrived is read at once and split here (a subframe brings ~5 lines).
    partial = b""
    try:
        while True:
            try:
                chunk = await reader.read(STREAM_READ_BYTES)
            except (ConnectionResetError, OSError):
                return
            if not chunk:
                return  # closed; a line cut short (the emulator stopped mid-line) is dropped
            *lines, partial = (partial + chunk).split(b"\n")
            if len(partial) > MAX_LINE_BYTES:
                raise ClientError(f"diag feed 127.0.0.1:{port}: a line longer than {MAX_LINE_BYTES} bytes: "
                                  f"{partial[:120]!r}")
            for line in lines:
                try:
                    message = json.loads(line)
                except ValueError as e:
                    raise ClientError(f"diag feed 127.0.0.1:{port}: not a JSON line ({e}): {line[:120]!r}") from e
                yield message
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _device_reader(path: Path) -> tuple[asyncio.StreamReader, Any]:
    """A reader of a pseudo-terminal / serial device in raw mode; (reader, transport)."""
    import os
    import termios
    import tty
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError as e:
        raise ClientError(f"mi2log device {path}: {e.strerror or e}") from e
    try:
        if os.isatty(fd):
            tty.setraw(fd, termios.TCSANOW)
        handle = os.fdopen(fd, "rb", buffering=0)
    except (OSError, termios.error) as e:
        os.close(fd)
        raise ClientError(f"mi2log device {path}: {e}") from e
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), handle)
    return reader, transport


async def _mi2log_feed(config: DaemonConfig, on_connected: Callable[[], None]) -> AsyncIterator[dict[str, Any]]:
    """The UE's feed as the diag byte stream, decoded into MobileInsight-shaped messages."""
    if config.device is not None:
        reader, closer = await _device_reader(config.device)
    else:
        port = config.mi2log_port if config.mi2log_port is not None else config.diag_port + 1
        reader, closer = await _stream_connection(config, port, "mi2log feed")
    on_connected()
    stream = mi2log_stream()
    try:
        while True:
            try:
                data = await reader.read(STREAM_READ_BYTES)
            except (ConnectionResetError, OSError):
                return
            if not data:
                return
            for message in stream.feed(data):
                yield message
    finally:
        closer.close()
        if isinstance(closer, asyncio.StreamWriter):
            with contextlib.suppress(OSError):
                await closer.wait_closed()


def feed_messages(config: DaemonConfig, on_connected: Callable[[], None] = lambda: None
                  ) -> AsyncIterator[dict[str, Any]]:
    """The UE's diag feed as an async iterator of message dicts; ``on_connected`` runs once
    the feed's connection (or device) is open."""
    if config.feed == "mi2log":
        return _mi2log_feed(config, on_connected)
    return _json_feed(config, on_connected)


def signal_ready(path: Path, ue_id: int) -> None:
    """Append ``ready ue=<id> pid=<pid>`` to ``path`` (a regular file, or a FIFO its reader
    holds open: non-blocking, so a reader that went away is an error rather than a hang);
    one short write, so several clients can share one FIFO. The fast client writes the same."""
    import os
    line = f"ready ue={ue_id} pid={os.getpid()}\n".encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as e:
        raise ClientError(f"--ready-file {path}: {e.strerror or e}") from e


class _EchoProtocol(asyncio.DatagramProtocol):
    def __init__(self, daemon: ClientDaemon) -> None:
        self.daemon = daemon

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.daemon.on_datagram(data)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable while the agent is not up yet: the next report tries again.
        self.daemon.report.feedback_send_errors += 1


class ClientDaemon:
    """The running daemon: owns the feedback socket, the log and (if given) the marker."""

    def __init__(self, config: DaemonConfig, *, marker: LossMarker | None = None) -> None:
        self.config = config
        self.core = ClientCore(config.client)
        self.marker = marker
        self.report = DaemonReport()
        self.log: EstimateLog | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._window_ms = self.core.window_ms

    async def run(self, stop: asyncio.Event) -> DaemonReport:
        """Run until the feed ends or ``stop`` is set."""
        loop = asyncio.get_running_loop()
        sock = _socket(self.config.netns, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            sock.connect(self.config.server)
        except OSError as e:
            sock.close()
            raise ClientError(f"feedback socket to {self.config.server[0]}:{self.config.server[1]}: "
                              f"{e.strerror or e}") from e
        self._transport, _ = await loop.create_datagram_endpoint(lambda: _EchoProtocol(self), sock=sock)
        if self.config.log_path is not None:
            self.log = EstimateLog(self.config.log_path, period_ms=self.config.log_period_ms)
        if self.marker is not None:
            self.marker.set_window_ms(self._window_ms)
        consumer = asyncio.create_task(self._consume())
        stopper = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({consumer, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if consumer in done:
                consumer.result()  # raise what ended it, if anything
                self.report.ended_by = "feed-closed"
            else:
                self.report.ended_by = "signal"
        finally:
            for task in (consumer, stopper):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await consumer
            with contextlib.suppress(asyncio.CancelledError):
                await stopper
            self._apply(self.core.finish())
            self.close()
        return self.report

    async def _consume(self) -> None:
        first = True
        while True:
            # After the feed closed: the emulator stopped (a new connection is refused, or
            # closes at once), or it dropped this reader for falling behind (the feed goes
            # on; the subframes missed are a gap the analyzer handles).
            config = self.config if first else replace(self.config, connect_timeout_s=RECONNECT_TIMEOUT_S)
            got_any = False
            on_connected = self._ready if first else (lambda: None)
            try:
                async for message in feed_messages(config, on_connected):
                    if not got_any and not first:
                        self.report.feed_reconnects += 1
                        print("claw-client: the diag feed closed; reconnected", file=sys.stderr)
                    got_any = True
                    self._handle(message)
            except ClawbedError:
                if first:
                    raise
                return
            if not got_any and not first:
                return
            first = False

    def _ready(self) -> None:
        """The feed is open, and so are the feedback socket, the marker and the log: the
        client can do its job (its first estimate comes with the feed's first message)."""
        if self.config.ready_file is not None:
            signal_ready(self.config.ready_file, self.config.client.ue_id)

    def _handle(self, message: dict[str, Any]) -> None:
        try:
            step = self.core.on_message(message)
        except (FeedFormatError, ValueError, KeyError, TypeError) as e:
            # One malformed message must not end the client; it is counted.
            self.core.counters.bad_messages += 1
            if self.core.counters.bad_messages <= 3:
                print(f"claw-client: skipping a bad diag message: {e}", file=sys.stderr)
            return
        self._apply(step)

    def _apply(self, step: Step) -> None:
        for feedback in step.feedback:
            if self._transport is not None:
                try:
                    self._transport.sendto(feedback.encode(self.config.key))
                    self.report.feedback_sent += 1
                except OSError:
                    self.report.feedback_send_errors += 1
        if self.marker is not None:
            for event in step.events:
                self.marker.note_event(event.kind, _event_monotonic_ns(event.unix_s))
                self.report.marks_written += 1
        if self.log is not None:
            for row in step.rows:
                self.log.write(row)

    def on_datagram(self, data: bytes) -> None:
        """An echo from the server agent (or anything else that reached the socket)."""
        if len(data) != ECHO_BYTES:
            self._reject("malformed")
            return
        try:
            echo = decode_echo(data, self.config.key)
        except FeedbackRejected as e:
            self._reject(e.reason.value)
            return
        if not self.core.on_echo(echo):
            self._reject("other-ue")
            return
        if self.core.window_ms != self._window_ms:
            self._window_ms = self.core.window_ms
            if self.marker is not None:
                self.marker.set_window_ms(self._window_ms)

    def _reject(self, why: str) -> None:
        self.report.echoes_rejected[why] = self.report.echoes_rejected.get(why, 0) + 1

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None
        if self.log is not None:
            self.report.log_rows = self.log.rows
            self.log.close()
            self.log = None
        self.report.counters = asdict(self.core.counters)
        self.report.window_ms = self.core.window_ms


def _event_monotonic_ns(unix_s: float | None) -> int:
    """CLOCK_MONOTONIC time of a diag event stamped ``unix_s`` (the feed's Unix time): now
    minus how long ago it happened (a lag beyond :data:`MAX_EVENT_LAG_S`, or a stamp in
    the future, counts as now)."""
    now = time.monotonic_ns()
    if unix_s is None:
        return now
    lag_ns = time.time_ns() - int(unix_s * 1e9)
    return now - lag_ns if 0 < lag_ns <= MAX_EVENT_LAG_S * 1e9 else now


async def run_daemon(config: DaemonConfig, *, marker: LossMarker | None = None,
                     stop: asyncio.Event | None = None, handle_signals: bool = False) -> DaemonReport:
    """Run a :class:`ClientDaemon` until the feed ends, ``stop`` is set, or (with
    ``handle_signals``) SIGTERM / SIGINT arrive."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        return await ClientDaemon(config, marker=marker).run(stop)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


# -- command line (parsed and checked in :mod:`.cli`) ---------------------------------------------

#: The command line's parser (kept here for its users).
_parser = parser


def config_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> DaemonConfig:
    """Check the arguments (errors through ``parser.error``) and build the config."""
    server, key = check(args, parser)
    return _config(args, server, key)


def _config(args: argparse.Namespace, server: tuple[str, int], key: bytes) -> DaemonConfig:
    first_seq = time.time_ns() // 1_000_000 & 0xFFFFFFFF
    client = ClientConfig(ue_id=args.ue_id, n_antennas=args.n_antennas, n_rb=args.n_rb, variant=Variant(args.variant),
                          bottleneck_detector=args.bottleneck_detector, feedback_period_ms=args.period_ms,
                          idle_timeout_ms=args.idle_timeout_ms,
                          server=f"{server[0]}:{server[1]}", first_seq=first_seq, clamp=args.clamp)
    return DaemonConfig(client=client, server=server, key=key, diag_port=args.diag_port, netns=args.netns,
                        log_path=args.log, log_period_ms=args.log_period_ms, connect_timeout_s=args.connect_timeout_s,
                        feed=args.feed, mi2log_port=args.mi2log_port, device=args.mi2log_device,
                        ready_file=args.ready_file)


def run_reference(args: argparse.Namespace, server: tuple[str, int], key: bytes) -> int:
    """Run this (the reference) client for checked arguments; the exit status."""
    config = _config(args, server, key)
    try:
        with contextlib.ExitStack() as stack:
            marker: LossMarker | None = None
            if args.mark_dev:
                from clawbed.claw.client.marking import AckMarker
                from clawbed.netns import Ledger
                marker = stack.enter_context(AckMarker(netns=args.netns, dev=args.mark_dev, run_id=args.run_id,
                                                       run_dir=args.run_dir, ue_id=args.ue_id,
                                                       ledger=Ledger(args.ledger) if args.ledger else None))
            elif args.ack_map:
                from clawbed.claw.client.marking import AckMarkMap
                marker = stack.enter_context(AckMarkMap(args.ack_map))
            report = asyncio.run(run_daemon(config, marker=marker, handle_signals=True))
    except ClawbedError as e:
        print(f"claw-client: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    print("claw-client " + json.dumps(asdict(report)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
