"""Read a whole diag log: frames → log packets → decoded messages, with every defect named.

:func:`decode_log` never raises on the content of a log: a bad CRC, a malformed escape, a
cut frame, a log packet whose lengths disagree, a body too short for its layout or a
version with no known layout is counted and recorded as a :class:`Defect` (byte offset of
its frame, log code and version when known), and decoding goes on with the next frame.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawbed.errors import InputError
from clawbed.traces.diaglog.frames import (
    MULTI_SIM_HEADER_BYTES,
    MULTI_SIM_PREFIX,
    Defect,
    FrameStats,
    iter_frames,
)
from clawbed.traces.diaglog.messages import DECODERS, TYPE_NAMES, BodyError

LOG_PACKET = 0x10
#: Frame kinds that are not log packets, by first payload byte.
DEBUG_KINDS = frozenset((0x79, 0x92))  # F3 debug text messages
CUSTOM_PREFIX = b"\xee\xee"            # MobileInsight's app-inserted packets
LOG_HEADER_BYTES = 16                  # cmd, more, len1, len2, code, u64 timestamp
#: Diag timestamps count 1/52 428 800 s (800 × 65 536 per s) from 1980-01-06 00:00:00 UTC
#: (the GPS epoch), without leap seconds, as MobileInsight converts them.
TICKS_PER_S = 52_428_800
GPS_EPOCH_UNIX_S = 315_964_800


def timestamp_unix_s(ticks: int) -> float:
    """Unix time (s) of a diag timestamp."""
    return GPS_EPOCH_UNIX_S + ticks / TICKS_PER_S


def unix_s_to_ticks(unix_s: float) -> int:
    """Diag timestamp of a Unix time (s), to the nearest tick."""
    return round((unix_s - GPS_EPOCH_UNIX_S) * TICKS_PER_S)


@dataclass(frozen=True)
class LogPacket:
    """One decoded log packet: where it was, its code and time, and MobileInsight's fields."""

    offset: int            #: byte offset of its frame in the file
    log_code: int
    ticks: int             #: raw diag timestamp
    message: dict[str, Any]  #: ``type_id``, ``timestamp`` (Unix s), ``log_msg_len``, fields

    @property
    def time_unix_s(self) -> float:
        return timestamp_unix_s(self.ticks)


@dataclass
class DecodeStats:
    """What a log held, counted."""

    bytes: int = 0
    frames: FrameStats = field(default_factory=FrameStats)
    log_packets: int = 0
    debug_frames: int = 0        #: F3 debug/text frames (0x79, 0x92), skipped
    custom_frames: int = 0       #: MobileInsight custom packets (0xEE 0xEE), skipped
    command_frames: int = 0      #: command responses and other kinds, skipped
    multi_sim_unwrapped: int = 0
    other_subscription: int = 0  #: multi-SIM frames of another subscription, skipped
    #: "0xB173 v16" → decoded packets, for the codes decoded here
    decoded: Counter[str] = field(default_factory=Counter)
    #: log code (e.g. "0xB0C0") → packets not decoded here (no decoder), by code
    not_decoded: Counter[str] = field(default_factory=Counter)
    #: "0xB173 v48" → packets of a known code with an unknown version
    unknown_versions: Counter[str] = field(default_factory=Counter)
    defects_by_kind: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        f = self.frames
        return {
            "bytes": self.bytes, "frames": f.frames, "empty_frames": f.empty,
            "bad_crc": f.bad_crc, "bad_escape": f.bad_escape, "short_frames": f.short,
            "truncated_frames": f.truncated, "log_packets": self.log_packets,
            "debug_frames": self.debug_frames, "custom_frames": self.custom_frames,
            "command_frames": self.command_frames, "multi_sim_unwrapped": self.multi_sim_unwrapped,
            "other_subscription": self.other_subscription,
            "decoded": dict(sorted(self.decoded.items())),
            "unknown_versions": dict(sorted(self.unknown_versions.items())),
            "not_decoded": dict(sorted(self.not_decoded.items())),
            "defects_by_kind": dict(sorted(self.defects_by_kind.items())),
        }


@dataclass
class DiagLog:
    """The decoded log packets of a file (codes in ``codes``), its defects and counts."""

    packets: list[LogPacket]
    defects: list[Defect]
    stats: DecodeStats

    def messages(self, log_code: int) -> list[dict[str, Any]]:
        return [p.message for p in self.packets if p.log_code == log_code]


def _version_of(code: int, body: bytes) -> str:
    """"v16" or "v1/22" (packet / sub-packet version) for the stats, from the body."""
    if not body:
        return "v?"
    if code in (0xB193, 0xB063, 0xB087, 0xB0A4) and body[0] == 1 and len(body) > 5:
        return f"v{body[0]}/{body[5]}"
    return f"v{body[0]}"


#: Raw log packet handler: (frame offset, log code, diag ticks, body) → a Defect when the
#: body is unusable, else None.
RawHandler = Callable[[int, int, int, bytes], "Defect | None"]


def decode_bytes(data: bytes, *, codes: Iterable[int] | None = None, subscription: int = 1,
                 on_packet: Callable[[LogPacket], None] | None = None,
                 raw: dict[int, RawHandler] | None = None) -> DiagLog:
    """Decode a whole log held in memory.

    ``codes``: log codes to decode (default every code with a decoder); others are counted.
    ``subscription``: which SIM's frames to keep when a multi-SIM wrapper is present.
    ``on_packet``: called with each packet as decoded (the packets are then not kept).
    ``raw``: log code → handler given the packet's body instead of a decoded dict (the
    columnar readers use it); a Defect it returns is recorded as any other.
    """
    raw = raw or {}
    wanted = (set(DECODERS) if codes is None else set(codes) & set(DECODERS)) | set(raw)
    defects: list[Defect] = []
    stats = DecodeStats(bytes=len(data))
    packets: list[LogPacket] = []
    keep = packets.append if on_packet is None else on_packet
    for frame in iter_frames(data, defects, stats.frames):
        p = frame.payload
        if p[:4] == MULTI_SIM_PREFIX and len(p) >= MULTI_SIM_HEADER_BYTES:
            sub = int.from_bytes(p[4:8], "little")
            if sub != subscription:
                stats.other_subscription += 1
                continue
            stats.multi_sim_unwrapped += 1
            p = p[MULTI_SIM_HEADER_BYTES:]
        if not p:
            stats.command_frames += 1
            continue
        kind = p[0]
        if kind != LOG_PACKET:
            if kind in DEBUG_KINDS:
                stats.debug_frames += 1
            elif p[:2] == CUSTOM_PREFIX:
                stats.custom_frames += 1
            else:
                stats.command_frames += 1
            continue
        stats.log_packets += 1
        if len(p) < LOG_HEADER_BYTES:
            defects.append(Defect(frame.offset, "truncated_packet",
                                  f"log packet of {len(p)} bytes, shorter than its 16-byte header"))
            continue
        len2 = p[4] | (p[5] << 8)
        code = p[6] | (p[7] << 8)
        if len2 != len(p) - 4 or (p[2] | (p[3] << 8)) != len2:
            defects.append(Defect(frame.offset, "bad_length", f"lengths {p[2] | (p[3] << 8)}/{len2} "
                                  f"in the header, {len(p) - 4} in the frame", code))
            if len2 > len(p) - 4 or len2 < LOG_HEADER_BYTES - 4:
                continue
        body = p[LOG_HEADER_BYTES:4 + len2]
        if code not in wanted:
            stats.not_decoded[f"0x{code:04X}"] += 1
            continue
        if code in raw:
            defect = raw[code](frame.offset, code, int.from_bytes(p[8:16], "little"), body)
            if defect is None:
                stats.decoded[f"0x{code:04X} {_version_of(code, body)}"] += 1
            else:
                if defect.kind == "unknown_version":
                    stats.unknown_versions[f"0x{code:04X} {_version_of(code, body)}"] += 1
                defects.append(defect)
            continue
        try:
            fields = DECODERS[code](body)
        except BodyError as e:
            if e.kind == "unknown_version":
                stats.unknown_versions[f"0x{code:04X} {_version_of(code, body)}"] += 1
            defects.append(Defect(frame.offset, e.kind, e.detail, code, e.version))
            continue
        except IndexError:  # a layout read past a body its checks let through: name it
            defects.append(Defect(frame.offset, "truncated_packet", "body ends inside a field",
                                  code, body[0] if body else None))
            continue
        ticks = int.from_bytes(p[8:16], "little")
        stats.decoded[f"0x{code:04X} {_version_of(code, body)}"] += 1
        message = {"log_msg_len": len2, "type_id": TYPE_NAMES[code],
                   "timestamp": timestamp_unix_s(ticks), **fields}
        keep(LogPacket(frame.offset, code, ticks, message))
    for d in defects:
        stats.defects_by_kind[d.kind] += 1
    return DiagLog(packets, defects, stats)


def read_log(path: str | Path, **kwargs: Any) -> DiagLog:
    """Decode the log file at ``path`` (``.mi2log`` or ``.qmdl``: the same framing).
    InputError only when the file cannot be read; its content never raises."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    return decode_bytes(data, **kwargs)
