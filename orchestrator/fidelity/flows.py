"""A small TCP flow tool for the fidelity experiments, run inside the namespaces:

    python -m clawbed.orchestrator.fidelity.flows serve --port P [--cc CC]
    python -m clawbed.orchestrator.fidelity.flows fetch --host H --port P --bytes N [--seconds S]
           [--count K] [--gap-s G] [--read-bps R] [--upload]

``serve`` (in the server's namespace) answers each connection's request line ``<bytes>
<seconds> <upload>``: it sends ``bytes`` (or for ``seconds``) of zeros, or with ``upload``
reads what the client sends, then waits for the peer to close and prints one JSON line with
its own ``TCP_INFO`` at the end of the flow (retransmissions, RTOs, DSACKs, bytes sent).
``fetch`` (on the UE) opens ``count`` such flows one after another, ``gap_s`` apart, reading
as fast as it can or at ``read_bps`` (a slow application reader), and prints one JSON line
per flow with its own ``TCP_INFO`` (out-of-order packets received) and the flow's times.
The congestion control is the listening socket's (``--cc``; accepted sockets inherit it).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from typing import Any

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
TCP_INFO = getattr(socket, "TCP_INFO", 11)
CHUNK = 64 * 1024

#: (name, offset, struct format) of the ``struct tcp_info`` fields used (include/uapi/linux/tcp.h).
_FIELDS = (("ca_state", 1, "B"), ("rto_us", 8, "I"), ("snd_mss", 16, "I"), ("unacked", 24, "I"), ("lost", 32, "I"),
           ("retrans", 36, "I"), ("rtt_us", 68, "I"), ("snd_cwnd", 80, "I"), ("total_retrans", 100, "I"),
           ("bytes_acked", 120, "Q"), ("bytes_received", 128, "Q"), ("segs_out", 136, "I"), ("segs_in", 140, "I"),
           ("min_rtt_us", 148, "I"), ("data_segs_in", 152, "I"), ("data_segs_out", 156, "I"),
           ("bytes_sent", 200, "Q"), ("bytes_retrans", 208, "Q"), ("dsack_dups", 216, "I"), ("reord_seen", 220, "I"),
           ("rcv_ooopack", 224, "I"), ("snd_wnd", 228, "I"), ("total_rto", 240, "H"), ("total_rto_recoveries", 242, "H"))


def tcp_info(sock: socket.socket) -> dict[str, Any]:
    """The fields of :data:`_FIELDS` the kernel filled in (a shorter struct leaves some out)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 256)
    out: dict[str, Any] = {}
    for name, offset, fmt in _FIELDS:
        size = struct.calcsize(fmt)
        if offset + size <= len(raw):
            out[name] = struct.unpack_from("<" + fmt, raw, offset)[0]
    return out


def _serve_one(conn: socket.socket, peer: tuple[str, int]) -> None:
    t0 = time.time()
    try:
        line = b""
        while not line.endswith(b"\n"):
            part = conn.recv(256)
            if not part:
                return
            line += part
        want_bytes, seconds, upload = line.decode().split()
        n, limit_s, up = int(want_bytes), float(seconds), upload == "1"
        sent = 0
        if up:
            while conn.recv(CHUNK):
                pass
        else:
            block = bytes(CHUNK)
            deadline = time.monotonic() + limit_s if limit_s > 0 else None
            while (n <= 0 or sent < n) and (deadline is None or time.monotonic() < deadline):
                size = CHUNK if n <= 0 else min(CHUNK, n - sent)
                sent += conn.send(block[:size])
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(CHUNK):  # the peer closes once it read everything: every byte acked
                pass
        info = tcp_info(conn)
        print(json.dumps({"side": "server", "peer": f"{peer[0]}:{peer[1]}", "bytes": sent, "upload": up,
                          "t_start": t0, "t_end": time.time(), **info}), flush=True)
    except OSError as e:
        print(json.dumps({"side": "server", "peer": f"{peer[0]}:{peer[1]}", "error": str(e)}), flush=True)
    finally:
        conn.close()


def serve(port: int, cc: str | None) -> None:
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if cc:
        lsock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
    lsock.bind(("0.0.0.0", port))
    lsock.listen(64)
    print(json.dumps({"side": "server", "listening": port, "cc": cc}), flush=True)
    while True:
        conn, peer = lsock.accept()
        threading.Thread(target=_serve_one, args=(conn, peer), daemon=True).start()


def fetch_one(host: str, port: int, n: int, seconds: float, read_bps: float | None, upload: bool,
              rcvbuf: int | None = None) -> dict[str, Any]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    t0 = time.time()
    sock.connect((host, port))
    t_conn = time.time()
    sock.sendall(f"{n} {seconds} {1 if upload else 0}\n".encode())
    got = 0
    first_byte = None
    if upload:
        block = bytes(CHUNK)
        deadline = time.monotonic() + seconds if seconds > 0 else None
        while (n <= 0 or got < n) and (deadline is None or time.monotonic() < deadline):
            got += sock.send(block if n <= 0 else block[:min(CHUNK, n - got)])
        sock.shutdown(socket.SHUT_WR)
        sock.recv(16)
    else:
        start = time.monotonic()
        while True:
            size = CHUNK if read_bps is None else 4096
            data = sock.recv(size)
            if not data:
                break
            if first_byte is None:
                first_byte = time.time()
            got += len(data)
            if read_bps:
                ahead = got * 8 / read_bps - (time.monotonic() - start)
                if ahead > 0:
                    time.sleep(ahead)
    info = tcp_info(sock)
    sock.close()
    return {"side": "client", "bytes": got, "upload": upload, "t_start": t0, "t_connected": t_conn,
            "connect_ms": (t_conn - t0) * 1000, "t_first_byte": first_byte, "t_end": time.time(), **info}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="flows")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--cc", default=None)
    f = sub.add_parser("fetch")
    f.add_argument("--host", required=True)
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--bytes", type=int, default=0, help="bytes per flow (0: for --seconds)")
    f.add_argument("--sizes", default=None, help="comma-separated bytes of successive flows (overrides --bytes/--count)")
    f.add_argument("--seconds", type=float, default=0.0)
    f.add_argument("--count", type=int, default=1)
    f.add_argument("--gap-s", type=float, default=0.0)
    f.add_argument("--read-bps", type=float, default=None)
    f.add_argument("--rcvbuf", type=int, default=None)
    f.add_argument("--upload", action="store_true")
    a = p.parse_args(argv)
    if a.cmd == "serve":
        serve(a.port, a.cc)
        return 0
    sizes = [int(x) for x in a.sizes.split(",")] if a.sizes else [a.bytes] * a.count
    for i, n in enumerate(sizes):
        if i and a.gap_s:
            time.sleep(a.gap_s)
        try:
            print(json.dumps(fetch_one(a.host, a.port, n, a.seconds, a.read_bps, a.upload, a.rcvbuf)), flush=True)
        except OSError as e:
            print(json.dumps({"side": "client", "error": str(e)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
