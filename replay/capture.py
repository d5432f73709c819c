"""A server-side packet capture without tcpdump: an ``AF_PACKET`` reader of the project's own.

:class:`ServerCapture` runs ``python -m clawbed.replay.capture DEV OUT`` inside a namespace
(an owned process of the run's :class:`~clawbed.netns.Resources`, so Ctrl-C and ``clawbed
cleanup`` stop it). The reader binds a ``SOCK_DGRAM`` packet socket to ``DEV`` — both
directions, the IP packet without any link-layer header — and writes each packet's first
:data:`SNAPLEN` bytes (IPv4 and TCP headers with their options) to a pcap file of link type
``RAW`` (101) with nanosecond kernel timestamps (``SO_TIMESTAMPNS``), readable by any pcap
tool. On SIGTERM it flushes, and writes the kernel's counts (``PACKET_STATISTICS``: packets,
drops) to ``OUT.json``.

What it sees is what tcpdump on the server's device would: the server's TCP segments as its
stack hands them to the device (TSO super-packets of up to 64 KB, each one record whose
original length is the whole), and the UE's ACKs as they arrive.
"""

from __future__ import annotations

import errno
import json
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from types import FrameType

from clawbed.netns import Namespace, Resources

SNAPLEN = 128
ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
SO_TIMESTAMPNS = 35
LINKTYPE_RAW = 101
#: pcap's nanosecond-resolution magic number.
PCAP_MAGIC_NS = 0xA1B23C4D


class ServerCapture:
    """A capture of device ``dev`` of namespace ``ns`` into ``out`` for the life of ``res``."""

    def __init__(self, res: Resources, ns: Namespace, dev: str, out: Path) -> None:
        self.out = Path(out)
        self.proc = res.process(ns.command([sys.executable, "-m", "clawbed.replay.capture", dev, str(self.out)]),
                                name=res.name("cap"), log_path=self.out.with_suffix(".log"))
        # The reader is ready when it has written the pcap header.
        deadline = time.monotonic() + 10
        while not (self.out.is_file() and self.out.stat().st_size >= 24):
            if not self.proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the capture of {dev} in {ns.name} did not start (see {self.out.with_suffix('.log')})")
            time.sleep(0.02)

    def stop(self) -> dict:
        """Stop the reader; its counts (``packets``, ``drops``, ``written``)."""
        self.proc.close()
        try:
            return json.loads(self.out.with_suffix(self.out.suffix + ".json").read_text())
        except (OSError, ValueError):
            return {}


def _capture(dev: str, out: Path) -> None:
    stop = False

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    sock.bind((dev, ETH_P_ALL))
    sock.settimeout(0.2)
    written = 0
    with out.open("wb") as f:
        f.write(struct.pack("<IHHiIII", PCAP_MAGIC_NS, 2, 4, 0, 0, SNAPLEN, LINKTYPE_RAW))
        f.flush()
        while not stop:
            try:
                data, anc, _flags, _addr = sock.recvmsg(SNAPLEN, socket.CMSG_SPACE(16))
            except TimeoutError:
                continue
            except InterruptedError:
                continue
            except OSError as e:
                if e.errno in (errno.ENETDOWN, errno.ENODEV, errno.ENXIO):
                    break  # the device went away (the emulator removes its TUN when it stops)
                raise
            length = len(data)
            sec, nsec = None, None
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = struct.unpack("=qq", cdata[:16])
            if sec is None:
                now = time.time_ns()
                sec, nsec = divmod(now, 1_000_000_000)
            orig = _ip_length(data, length)
            f.write(struct.pack("<IIII", sec, nsec, length, orig))
            f.write(data)
            written += 1
    try:
        packets, drops = struct.unpack("=II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    except OSError:
        packets, drops = None, None
    sock.close()
    Path(str(out) + ".json").write_text(json.dumps({"packets": packets, "drops": drops, "written": written}))


def _ip_length(data: bytes, captured: int) -> int:
    """The packet's length from its IPv4 header (TSO super-packets carry their whole length
    there); the captured length for anything else."""
    if len(data) >= 4 and data[0] >> 4 == 4:
        (total,) = struct.unpack_from("!H", data, 2)
        return max(total, captured)
    return captured


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m clawbed.replay.capture DEVICE OUT.pcap")
    _capture(sys.argv[1], Path(sys.argv[2]))
