"""HDLC framing of the Qualcomm diag protocol as MobileInsight's ``.mi2log`` / ``.qmdl`` files hold it.

A file is frames back to back, no file header: ``escape(payload ‖ CRC16-LE) 0x7E``. Escaping
writes 0x7E and 0x7D as ``0x7D, byte ^ 0x20``. The CRC is CRC-16/X.25 over the un-escaped
payload (``shared/docs/diag-log-format.md`` §1). Nothing here raises on outside input: every
defect becomes a :class:`Defect` naming its byte offset.
"""

from __future__ import annotations

import binascii
from collections.abc import Iterator
from dataclasses import dataclass

FLAG = 0x7E
ESCAPE = 0x7D
ESCAPE_XOR = 0x20
FLAG_BYTE = b"\x7e"
#: The wrapper a multi-SIM modem puts before a payload: ``98 01 00 00`` then a u32
#: subscription id (MobileInsight unwraps subscription 1 only).
MULTI_SIM_PREFIX = b"\x98\x01\x00\x00"
MULTI_SIM_HEADER_BYTES = 8
CRC_BYTES = 2

# binascii.crc_hqx is the MSB-first CRC-CCITT (poly 0x1021). X.25 is the same polynomial
# bit-reflected, so it equals the bit-reversed crc_hqx of the bit-reversed bytes (init 0xFFFF
# is its own reversal), then the final XOR. This keeps the CRC at C speed.
_BIT_REVERSED = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def _reverse16(x: int) -> int:
    return int(f"{x:016b}"[::-1], 2)


_REV16_HI = [_reverse16(b << 8) for b in range(256)]
_REV16_LO = [_reverse16(b) for b in range(256)]


def crc16_x25(data: bytes) -> int:
    """CRC-16/X.25 (reflected 0x1021, init 0xFFFF, xorout 0xFFFF) of ``data``."""
    c = binascii.crc_hqx(data.translate(_BIT_REVERSED), 0xFFFF)
    return (_REV16_HI[c >> 8] | _REV16_LO[c & 0xFF]) ^ 0xFFFF


def escape(data: bytes) -> bytes:
    """HDLC-escape ``data`` (0x7D first, so escapes are not escaped twice)."""
    return data.replace(b"\x7d", b"\x7d\x5d").replace(b"\x7e", b"\x7d\x5e")


def encode_frame(payload: bytes) -> bytes:
    """One frame: escaped payload and CRC (little-endian), then the 0x7E terminator."""
    crc = crc16_x25(payload)
    return escape(payload + bytes((crc & 0xFF, crc >> 8))) + FLAG_BYTE


@dataclass(frozen=True)
class Defect:
    """One thing wrong in a log, where it is, and (when known) which message it hit."""

    offset: int              #: byte offset in the file of the frame it is in
    kind: str                #: bad_crc, bad_escape, truncated_frame, short_frame, bad_length, …
    detail: str
    log_code: int | None = None
    version: int | None = None

    def __str__(self) -> str:
        what = ""
        if self.log_code is not None:
            what = f" log 0x{self.log_code:04X}"
            if self.version is not None:
                what += f" version {self.version}"
        return f"byte {self.offset}:{what} {self.kind}: {self.detail}"


@dataclass(frozen=True)
class Frame:
    """A frame that passed its CRC: its un-escaped payload (CRC stripped) and file offset."""

    offset: int
    payload: bytes


def _unescape(piece: bytes) -> bytes | None:
    """Un-escaped bytes of one frame, or None if an escape is malformed (0x7D before
    something other than 0x5D/0x5E, or at the end)."""
    if b"\x7d" not in piece:
        return piece
    out = piece.replace(b"\x7d\x5e", b"\x7e").replace(b"\x7d\x5d", b"\x7d")
    # A 0x7D left over means an escape that is not one of the two (or a cut one). The
    # replacements cannot create a false 0x7D: "7D 5D" → 7D only where it was escaped, so
    # count what the escapes explain instead.
    if out.count(b"\x7d") != piece.count(b"\x7d\x5d"):
        return None
    return out


@dataclass
class FrameStats:
    """Counts of what the framing layer met."""

    frames: int = 0            #: non-empty pieces between terminators
    empty: int = 0             #: empty frames (0x7E 0x7E, a leading 0x7E)
    bad_crc: int = 0
    bad_escape: int = 0
    short: int = 0             #: too short to hold a CRC and one payload byte
    truncated: int = 0         #: bytes after the last terminator (a cut file)


def iter_frames(data: bytes, defects: list[Defect], stats: FrameStats) -> Iterator[Frame]:
    """The frames of ``data`` with a valid CRC, in order; every other piece is counted in
    ``stats`` and named in ``defects``."""
    offset = 0
    pieces = data.split(FLAG_BYTE)
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        start = offset
        offset += len(piece) + 1
        if not piece:
            if i != last:
                stats.empty += 1
            continue
        stats.frames += 1
        if i == last:
            stats.truncated += 1
            defects.append(Defect(start, "truncated_frame",
                                  f"{len(piece)} bytes after the last 0x7E terminator (file cut?)"))
            continue
        raw = _unescape(piece)
        if raw is None:
            stats.bad_escape += 1
            defects.append(Defect(start, "bad_escape", "0x7D not followed by 0x5D or 0x5E"))
            continue
        if len(raw) <= CRC_BYTES:
            stats.short += 1
            defects.append(Defect(start, "short_frame", f"{len(raw)} bytes: no room for payload and CRC"))
            continue
        payload = raw[:-CRC_BYTES]
        crc = raw[-2] | (raw[-1] << 8)
        if crc16_x25(payload) != crc:
            stats.bad_crc += 1
            defects.append(Defect(start, "bad_crc", f"CRC 0x{crc:04X} stored, "
                                  f"0x{crc16_x25(payload):04X} computed over {len(payload)} bytes"))
            continue
        yield Frame(start, payload)
