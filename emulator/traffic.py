"""Small traffic tools for tests and benchmarks: a paced UDP sender and an in-process UDP sink.

The sender runs as its own process inside a namespace (``Namespace.command``) so that its
pacing does not share an interpreter with the test::

    python -m clawbed.emulator.traffic udp-send --to 10.65.0.1:9000 --rate 30mbit --seconds 3

It prints one JSON line when done: ``{"packets": n, "bytes": n}`` (UDP payload bytes). The
sink opens one socket in each UE namespace from the calling process
(:func:`~clawbed.netns.socket_in_namespace`) and counts what arrives, so 45 UEs need no 45
processes.
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from clawbed.netns import socket_in_namespace

#: IPv4 + UDP header bytes in front of a UDP payload.
UDP_IP_OVERHEAD_BYTES = 28
#: Pacing granularity of the sender, s.
_TICK_S = 0.001


def send_udp(targets: Sequence[tuple[str, int]], rate_bps: int, payload_bytes: int, seconds: float) -> dict[str, int]:
    """Send to every target at ``rate_bps`` (IP bit/s, each) for ``seconds``; return the counts.

    Pacing is by credit: every tick each target earns ``rate × elapsed`` bits and sends the
    whole packets they pay for, so the average rate holds however late the loop wakes.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # A large send buffer absorbs the bursts after a late wake-up instead of failing them.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    payload = bytes(payload_bytes)
    packet_bits = (payload_bytes + UDP_IP_OVERHEAD_BYTES) * 8
    sent_packets = 0
    start = time.monotonic()
    end = start + seconds
    paid_bits = 0.0
    while (now := time.monotonic()) < end:
        due_bits = rate_bps * (now - start) - paid_bits
        while due_bits >= packet_bits:
            for target in targets:
                try:
                    sock.sendto(payload, target)
                    sent_packets += 1
                except (BlockingIOError, ConnectionRefusedError):
                    # ICMP port unreachable from a UE without a listener, or a full buffer:
                    # this packet is lost, as on a real link.
                    pass
            due_bits -= packet_bits
            paid_bits += packet_bits
        time.sleep(_TICK_S)
    sock.close()
    return {"packets": sent_packets, "bytes": sent_packets * payload_bytes}


def send_udp_command(python: str, targets: Sequence[tuple[str, int]], rate: str, payload_bytes: int,
                     seconds: float) -> list[str]:
    """The argv that runs :func:`send_udp` in a new interpreter ``python``."""
    argv = [python, "-m", "clawbed.emulator.traffic", "udp-send", "--rate", rate,
            "--size", str(payload_bytes), "--seconds", str(seconds)]
    for address, port in targets:
        argv += ["--to", f"{address}:{port}"]
    return argv


@dataclass
class _SinkSocket:
    sock: socket.socket
    packets: int = 0
    payload_bytes: int = 0
    #: Packets per source IPv4 address.
    senders: dict[str, int] = field(default_factory=dict)


@dataclass
class UdpSink:
    """UDP sockets bound to ``port`` in each of ``namespaces``, counted by a background thread.

    Use as a context manager; :meth:`counts` gives (packets, payload bytes) per namespace.
    """

    namespaces: Sequence[str]
    port: int
    _sockets: list[_SinkSocket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def __enter__(self) -> UdpSink:
        selector = selectors.DefaultSelector()
        try:
            for ns in self.namespaces:
                sock = socket_in_namespace(ns, socket.AF_INET, socket.SOCK_DGRAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                sock.bind(("0.0.0.0", self.port))
                sock.setblocking(False)
                entry = _SinkSocket(sock)
                self._sockets.append(entry)
                selector.register(sock, selectors.EVENT_READ, entry)
        except BaseException:
            self._close_sockets()
            selector.close()
            raise
        self._thread = threading.Thread(target=self._run, args=(selector,), name="udp-sink", daemon=True)
        self._thread.start()
        return self

    def _run(self, selector: selectors.BaseSelector) -> None:
        buffer = bytearray(65536)
        with selector:
            while not self._stop.is_set():
                for key, _ in selector.select(timeout=0.05):
                    entry: _SinkSocket = key.data
                    while True:
                        try:
                            n, (source, _) = entry.sock.recvfrom_into(buffer)
                        except BlockingIOError:
                            break
                        with self._lock:
                            entry.packets += 1
                            entry.payload_bytes += n
                            entry.senders[source] = entry.senders.get(source, 0) + 1

    def counts(self) -> list[tuple[int, int]]:
        """(packets, payload bytes) received so far, per namespace in order."""
        with self._lock:
            return [(s.packets, s.payload_bytes) for s in self._sockets]

    def senders(self, index: int = 0) -> dict[str, int]:
        """Packets received so far by the socket of namespace ``index``, per source address."""
        with self._lock:
            return dict(self._sockets[index].senders)

    def _close_sockets(self) -> None:
        for s in self._sockets:
            s.sock.close()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._close_sockets()


def _target(text: str) -> tuple[str, int]:
    address, _, port = text.rpartition(":")
    if not address or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not ADDRESS:PORT")
    return address, int(port)


def main(argv: Sequence[str] | None = None) -> None:
    """``udp-send``: the paced sender as a command (see the module docstring)."""
    from clawbed.emulator.config import parse_rate_bps

    parser = argparse.ArgumentParser(prog="python -m clawbed.emulator.traffic")
    sub = parser.add_subparsers(dest="command", required=True)
    send = sub.add_parser("udp-send", help="send paced UDP to every --to target")
    send.add_argument("--to", type=_target, action="append", required=True, help="ADDRESS:PORT (repeatable)")
    send.add_argument("--rate", required=True, help="IP rate per target, e.g. 30mbit")
    send.add_argument("--size", type=int, default=1400, help="UDP payload bytes (default 1400)")
    send.add_argument("--seconds", type=float, required=True)
    args = parser.parse_args(argv)
    try:
        rate_bps = parse_rate_bps(args.rate)
    except ValueError as e:
        parser.error(f"--rate: {e}")
    print(json.dumps(send_udp(args.to, rate_bps, args.size, args.seconds)), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
