"""The layouts of CLAW's BPF maps in Python (mirrors ``claw/bpf/claw_maps.h``).

``tests/test_claw_server_maps.py`` checks each format here against the BTF of the built
objects, member by member, so the two cannot drift apart silently.

Times are CLOCK_MONOTONIC nanoseconds (``time.monotonic_ns()``, the clock of
``bpf_ktime_get_ns()``); addresses and ports are kept in network byte order in the maps and
converted at this boundary.
"""

from __future__ import annotations

import enum
import ipaddress
import socket
import struct
from dataclasses import dataclass, fields

#: Names of the pinned maps in a run's bpffs (also the maps' names in the objects).
PEERS_MAP = "claw_peers"
FLOWS_MAP = "claw_flows"
ACK_FLAGS_MAP = "claw_ack_flags"
SHARED_MAPS = (PEERS_MAP, FLOWS_MAP, ACK_FLAGS_MAP)

ACK_WIRELESS = 0x02
ACK_OVERFLOW = 0x04


class Mode(enum.IntEnum):
    """What the client asks for (``claw_peer.mode``)."""

    NONE = 0
    CELLULAR = 1
    SATURATED = 2
    WIRELINE = 3


class Applied(enum.IntEnum):
    """What the CC applied on a flow's last ACK (``claw_flow_stats.applied``)."""

    NO_FEEDBACK = 0
    CELLULAR = 1
    SATURATED = 2
    WIRELINE = 3
    STALE = 4
    RTO = 5


class LossCause(enum.IntEnum):
    NONE = 0
    WIRELESS = 1
    OVERFLOW = 2
    UNFLAGGED = 3


class FlowFlag(enum.IntFlag):
    CWND_LIMITED = 0x01
    CAP_ACTIVE = 0x02
    SHADOW_SLOW_START = 0x04
    CQIC = 0x08
    RELEASED = 0x10
    NETWORK_LIMITED = 0x20


def addr_key(address: str | ipaddress.IPv4Address) -> bytes:
    """The ``claw_peers`` key of a UE: its IPv4 address in network byte order."""
    return socket.inet_aton(str(address))


@dataclass(frozen=True)
class Peer:
    """``struct claw_peer``: the report in force for one UE."""

    updated_ns: int
    stale_after_ns: int
    w_claw_bytes: int
    mode: int
    seq: int
    window_ms: int

    FORMAT = struct.Struct("=QQIIII")

    def pack(self) -> bytes:
        return self.FORMAT.pack(self.updated_ns, self.stale_after_ns, self.w_claw_bytes, int(self.mode),
                                self.seq, self.window_ms)

    @classmethod
    def unpack(cls, data: bytes) -> Peer:
        return cls(*cls.FORMAT.unpack(data))


@dataclass(frozen=True)
class FlowKey:
    """``struct claw_flow_key``: a TCP flow seen from the server (ports in host order here)."""

    ue_addr: str
    server_addr: str
    ue_port: int
    server_port: int

    FORMAT = struct.Struct("=4s4sHH")

    def pack(self) -> bytes:
        return self.FORMAT.pack(socket.inet_aton(self.ue_addr), socket.inet_aton(self.server_addr),
                                socket.htons(self.ue_port), socket.htons(self.server_port))

    @classmethod
    def unpack(cls, data: bytes) -> FlowKey:
        ue, srv, ue_port, srv_port = cls.FORMAT.unpack(data)
        return cls(socket.inet_ntoa(ue), socket.inet_ntoa(srv), socket.ntohs(ue_port), socket.ntohs(srv_port))


@dataclass(frozen=True)
class FlowStats:
    """``struct claw_flow_stats``: what the CC did on a flow's last ACK, and its loss counts."""

    updated_ns: int
    cwnd_limited_ns: int
    acks: int
    loss_wireless: int
    loss_overflow: int
    loss_unflagged: int
    loss_rto: int
    srtt_us: int
    cwnd_pkts: int
    w_cubic_pkts: int
    w_claw_pkts: int
    ssthresh_pkts: int
    mss_bytes: int
    applied: int
    flags: int
    last_loss_cause: int
    peer_seq: int
    loss_cwnd_before_pkts: int
    loss_cwnd_after_pkts: int
    loss_w_cubic_before_pkts: int
    loss_w_cubic_after_pkts: int
    boost_from_pkts: int
    boost_to_pkts: int
    boosts: int
    pacing_rate_Bps: int
    report_seen_ns: int
    report_seen_acks: int
    claw_limited_since_ns: int

    FORMAT = struct.Struct("=7Q16I5Q")

    def pack(self) -> bytes:
        return self.FORMAT.pack(*(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def unpack(cls, data: bytes) -> FlowStats:
        return cls(*cls.FORMAT.unpack(data))

    @property
    def cwnd_limited(self) -> bool:
        return bool(self.flags & FlowFlag.CWND_LIMITED)


@dataclass(frozen=True)
class AckFlags:
    """``struct claw_ack_flags``: the loss flags the UE's ACKs of one flow carried."""

    last_ack_ns: int
    wireless_ns: int
    overflow_ns: int
    acks: int
    wireless_acks: int
    overflow_acks: int

    FORMAT = struct.Struct("=6Q")

    def pack(self) -> bytes:
        return self.FORMAT.pack(*(getattr(self, f.name) for f in fields(self)))

    @classmethod
    def unpack(cls, data: bytes) -> AckFlags:
        return cls(*cls.FORMAT.unpack(data))


#: C struct name → its Python mirror (fields in C order), for the layout test.
LAYOUTS: dict[str, type] = {
    "claw_peer": Peer,
    "claw_flow_key": FlowKey,
    "claw_flow_stats": FlowStats,
    "claw_ack_flags": AckFlags,
}
