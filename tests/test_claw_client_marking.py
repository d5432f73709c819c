"""The ACK marker (``claw/bpf/ack_mark_egress.bpf.c`` loaded by ``marking.AckMarker``) on a
veth between two namespaces of the test's own: real TCP ACKs from the "UE" side are
captured on the other side (an AF_PACKET socket, no tcpdump) and their TCP header byte 12
inspected. Event times are written far in the past or at "now" with a long window, so no
assertion depends on how fast anything runs."""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clawbed.claw.bpfobjects import build_command, object_path
from clawbed.claw.client.feed import LossKind
from clawbed.claw.client.marking import OBJECT_NAME, AckMarker, marker_name
from clawbed.netns import Endpoint, Ledger, Namespace, Resources, new_run_id, socket_in_namespace

pytestmark = pytest.mark.root

UE_ADDR, CORE_ADDR = "10.77.0.2", "10.77.0.1"
PORT = 5601
ETH_P_IP = 0x0800


def checksum16(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def tcp_checksum_ok(ip_packet: bytes) -> bool:
    ihl = (ip_packet[0] & 0x0F) * 4
    total_len = struct.unpack("!H", ip_packet[2:4])[0]
    segment = ip_packet[ihl:total_len]
    pseudo = ip_packet[12:20] + struct.pack("!BBH", 0, 6, len(segment))
    return checksum16(pseudo + segment) == 0xFFFF


class Capture:
    """TCP segments from ``src`` seen on ``ifname`` in namespace ``ns``: (byte 12, flags, packet)."""

    def __init__(self, ns: str, ifname: str, src: str) -> None:
        self.sock = socket_in_namespace(ns, socket.AF_PACKET, socket.SOCK_DGRAM)
        self.sock.bind((ifname, ETH_P_IP))
        self.sock.settimeout(0.1)
        self.src = socket.inet_aton(src)
        self.segments: list[tuple[int, int, bytes]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                packet = self.sock.recv(65536)
            except TimeoutError:
                continue
            if len(packet) < 40 or packet[9] != 6 or packet[12:16] != self.src:
                continue
            ihl = (packet[0] & 0x0F) * 4
            with self._lock:
                self.segments.append((packet[ihl + 12], packet[ihl + 13], packet))

    def take(self) -> list[tuple[int, int, bytes]]:
        with self._lock:
            out, self.segments = self.segments, []
        return out

    def take_connection(self, ue_port: int, timeout_s: float = 20.0) -> list[tuple[int, int, bytes]]:
        """Everything captured until the UE's FIN of the connection from ``ue_port`` (the
        capture thread may still be reading the socket's backlog when the transfer ends)."""
        port = struct.pack("!H", ue_port)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if any(f & 0x01 and p[20:22] == port for _, f, p in self.segments):
                    break
            time.sleep(0.01)
        return self.take()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@pytest.fixture
def link(tmp_path: Path) -> Iterator[tuple[Resources, Namespace, Namespace, Path]]:
    with Resources(new_run_id(), tmp_path / "ledger.jsonl") as res:
        ue, core = res.namespace("u"), res.namespace("c")
        res.veth(Endpoint(ue, res.name("vu"), UE_ADDR), Endpoint(core, res.name("vc"), CORE_ADDR))
        yield res, ue, core, tmp_path


def transfer(ue: Namespace, core: Namespace, nbytes: int) -> int:
    """``nbytes`` from the core side to the UE side over TCP (the UE sends the ACKs);
    returns the UE's port of the connection."""
    server = socket_in_namespace(core.name)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((CORE_ADDR, PORT))
    server.listen(1)
    client = socket_in_namespace(ue.name)
    client.settimeout(20)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # many small ACKs
    client.connect((CORE_ADDR, PORT))
    ue_port = client.getsockname()[1]
    conn, _ = server.accept()
    sender = threading.Thread(target=lambda: (conn.sendall(bytes(nbytes)), conn.shutdown(socket.SHUT_WR)))
    sender.start()
    got = 0
    while chunk := client.recv(65536):
        got += len(chunk)
    sender.join()
    for s in (client, conn, server):
        s.close()
    assert got == nbytes
    return ue_port


def acks_of(segments: list[tuple[int, int, bytes]], ue_port: int) -> list[tuple[int, int, bytes]]:
    """The ACKs (not SYN, not RST) of the connection from ``ue_port``."""
    return [s for s in segments if s[1] & 0x10 and not s[1] & 0x06 and s[2][20:22] == struct.pack("!H", ue_port)]


def send_raw_ack(ue: Namespace) -> None:
    """A hand-made TCP ACK (full checksum, CHECKSUM_NONE in the kernel) from the UE side."""
    src, dst = socket.inet_aton(UE_ADDR), socket.inet_aton(CORE_ADDR)
    tcp = bytearray(struct.pack("!HHIIBBHHH", 40000, 9, 1, 1, 5 << 4, 0x10, 1024, 0, 0))
    pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
    struct.pack_into("!H", tcp, 16, 0xFFFF - checksum16(pseudo + bytes(tcp)))
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 1, 0, 64, 6, 0, src, dst))
    struct.pack_into("!H", ip, 10, 0xFFFF - checksum16(bytes(ip)))
    raw = _raw_socket(ue.name)
    raw.sendto(bytes(ip) + bytes(tcp), (CORE_ADDR, 0))
    raw.close()


def _raw_socket(ns: str) -> socket.socket:
    result: dict[str, socket.socket] = {}

    def make() -> None:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        with open(f"/var/run/netns/{ns}") as f:
            assert libc.setns(f.fileno(), 0x40000000) == 0
        result["s"] = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)

    t = threading.Thread(target=make)
    t.start()
    t.join()
    return result["s"]


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    """claw/bpf/build.sh is the one build path (the marker never compiles)."""
    proc = subprocess.run(build_command(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert object_path(OBJECT_NAME).stat().st_size > 0


def test_acks_are_marked_only_within_the_window_after_an_event(link: tuple) -> None:
    res, ue, core, run_dir = link
    dev = res.name("vu")
    capture = Capture(core.name, res.name("vc"), UE_ADDR)
    marker = AckMarker(netns=ue.name, dev=dev, run_id=res.run_id, run_dir=run_dir, ue_id=0, ledger=res.ledger)
    res.callback(marker.close)
    assert marker.bpffs.path == run_dir / f"cb{res.run_id}m0"
    assert [e["kind"] for e in res.ledger.entries()][-2:] == ["bpffs", "tc-filter"]
    try:
        # No event yet: nothing marked.
        port = transfer(ue, core, 2_000_000)
        acks = acks_of(capture.take_connection(port), port)
        assert len(acks) >= 5
        assert all(b12 & 0x06 == 0 for b12, _, _ in acks)

        # An overflow "now" with a 60 s window: every ACK of the next transfer says 0x04.
        marker.set_window_ms(60_000)
        marker.note_event(LossKind.OVERFLOW, time.monotonic_ns())
        port = transfer(ue, core, 2_000_000)
        during = acks_of(capture.take_connection(port), port)
        assert len(during) >= 5
        assert all(b12 & 0x06 == 0x04 for b12, _, _ in during)
        # The data offset (upper nibble) still describes the segment: 20 bytes .. its length.
        assert all(20 <= (b12 >> 4) * 4 <= len(p) - 20 for b12, _, p in during)
        stats = marker.stats()
        assert stats.marked_overflow >= len(during) and stats.marked_wireless == 0
        assert stats.rewrite_errors == 0

        # Both kinds now; a hand-made ACK with a full checksum keeps a valid one.
        marker.note_event(LossKind.WIRELESS, time.monotonic_ns())
        send_raw_ack(ue)
        deadline = time.monotonic() + 10
        raw: list = []
        while not raw and time.monotonic() < deadline:
            raw = [s for s in capture.take() if s[2][20:22] == struct.pack("!H", 40000)]
            time.sleep(0.02)
        assert raw, "the hand-made ACK was not captured"
        b12, _, packet = raw[0]
        assert b12 == 0x50 | 0x06
        assert tcp_checksum_ok(packet)

        # An event earlier than the one held does not replace it (the latest wins) ...
        marker.note_event(LossKind.WIRELESS, time.monotonic_ns() - 10_000_000_000)
        send_raw_ack(ue)
        deadline = time.monotonic() + 10
        raw = []
        while not raw and time.monotonic() < deadline:
            raw = [s for s in capture.take() if s[2][20:22] == struct.pack("!H", 40000)]
            time.sleep(0.02)
        assert raw and raw[0][0] == 0x50 | 0x06
        # ... and once the window (now 100 ms) has passed since both events, nothing is marked.
        marker.set_window_ms(100)
        time.sleep(0.3)
        port = transfer(ue, core, 1_000_000)
        after = acks_of(capture.take_connection(port), port)
        assert len(after) >= 5
        assert all(b12 & 0x06 == 0 for b12, _, _ in after)
    finally:
        capture.close()
        marker.close()

    # Closed: no filter, no qdisc, no mount, no directory.
    filters = subprocess.run(["tc", "-n", ue.name, "filter", "show", "dev", dev, "egress"],
                             capture_output=True, text=True).stdout
    qdiscs = subprocess.run(["tc", "-n", ue.name, "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
    assert "bpf" not in filters and "clsact" not in qdiscs
    assert str(marker.bpffs.path) not in Path("/proc/mounts").read_text()
    assert not marker.bpffs.path.exists()
    marker.close()  # idempotent


def test_marker_refuses_an_unknown_device(link: tuple) -> None:
    res, ue, _, run_dir = link
    with pytest.raises(Exception, match="nosuchdev"):
        AckMarker(netns=ue.name, dev="nosuchdev", run_id=res.run_id, run_dir=run_dir, ue_id=0)
    assert not (run_dir / f"cb{res.run_id}m0").exists()


def test_two_ues_markers_do_not_collide(link: tuple) -> None:
    """One bpffs per UE (cb<rid>m<ue>): two markers of one run, each removing only its own."""
    res, ue, core, run_dir = link
    one = AckMarker(netns=ue.name, dev=res.name("vu"), run_id=res.run_id, run_dir=run_dir, ue_id=1)
    try:
        two = AckMarker(netns=core.name, dev=res.name("vc"), run_id=res.run_id, run_dir=run_dir, ue_id=2)
        assert {one.name, two.name} == {marker_name(res.run_id, 1), marker_name(res.run_id, 2)}
        two.close()
        assert one.bpffs.path.exists() and not two.bpffs.path.exists()
        one.note_event(LossKind.OVERFLOW, time.monotonic_ns())  # still loaded and writable
    finally:
        one.close()
    assert not one.bpffs.path.exists()


def test_a_killed_clients_marker_is_removed_from_its_ledger(link: tuple) -> None:
    """A marker whose owner died without closing it: the ledger's entries (through the
    shared module's registered cleanup) remove its filter and its bpffs."""
    from clawbed.netns import cleanup_from_ledger

    res, ue, _, run_dir = link
    dev = res.name("vu")
    ledger = Ledger(run_dir / "client-ledger.jsonl")  # the marker's entries only, not the link's
    marker = AckMarker(netns=ue.name, dev=dev, run_id=res.run_id, run_dir=run_dir, ue_id=3, ledger=ledger)
    marker._close_maps()  # the process "died": nothing of it closes the filter or the mount
    removed = " | ".join(cleanup_from_ledger(ledger.path))
    assert "tc egress filter on" in removed and f"bpffs {marker.name}" in removed, removed
    filters = subprocess.run(["tc", "-n", ue.name, "filter", "show", "dev", dev, "egress"],
                             capture_output=True, text=True).stdout
    assert "bpf" not in filters
    assert str(marker.bpffs.path) not in Path("/proc/mounts").read_text()
