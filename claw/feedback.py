"""The CLAW feedback channel: client → server reports and server → client echoes, over UDP.

Wire format (all integers big-endian, network order), version 1:

Feedback (client → server), 76 bytes:

======  =====  =================  ==========================================================
offset  size   field              meaning
======  =====  =================  ==========================================================
0       1      version            1
1       1      kind               1 = feedback
2       2      ue_id              the UE's id, set at set-up
4       4      seq                strictly increasing per (UE, key); replay protection
8       8      diag_time_ms       t = 10·SFN + subframe, unwrapped across the 10240 ms cycle
16      4      w_claw_bytes       CLAW's window for the flow towards this UE, bytes
20      4      load_ppm           cell load L over the window, parts per million (0..1e6)
24      4      n_f_rbs            available RBs N_f over the window (RBs per subframe, summed)
28      4      n_t_rbs            total RBs N_t = N_rb · T over the window
32      4      window_ms          the window T used, ms
36      1      flags              bit 0 saturated, bit 1 bottleneck is wireline
37      3      reserved           0
40      4      (padding)          0
44      32     hmac               HMAC-SHA256 over bytes 0..43 with the key shared at set-up
======  =====  =================  ==========================================================

Echo (server → client), 56 bytes: version, kind = 2, ue_id, seq (the feedback it answers),
srtt_us (u32), cwnd_packets (u32), flags (bit 0: the flow was "cwnd-limited" during the last
window — held back by the network at CLAW's window, claw/DESIGN.md), 7 reserved bytes, then
HMAC-SHA256 over bytes 0..23.

Why fixed-size binary with a MAC and a sequence number: the server acts on every accepted
report by setting a congestion window, so a forged, replayed or corrupted report must be
rejected cheaply and counted, never partially parsed.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass
from pathlib import Path

from clawbed.errors import InputError

VERSION = 1
KIND_FEEDBACK = 1
KIND_ECHO = 2
MAC_BYTES = 32

_FEEDBACK_BODY = struct.Struct("!BBHIQIIIIIB3x4x")
_ECHO_BODY = struct.Struct("!BBHIIIB7x")
FEEDBACK_BYTES = _FEEDBACK_BODY.size + MAC_BYTES
ECHO_BYTES = _ECHO_BODY.size + MAC_BYTES

#: Inclusive ranges a server accepts; anything else is counted as out-of-range.
MAX_W_CLAW_BYTES = 1 << 30
MAX_WINDOW_MS = 10_000
LOAD_PPM_SCALE = 1_000_000

#: Shortest key accepted (HMAC-SHA256 keys shorter than this are guessable).
MIN_KEY_BYTES = 16

FLAG_SATURATED = 0x01
FLAG_WIRELINE = 0x02
ECHO_FLAG_CWND_LIMITED = 0x01


class Rejection(enum.Enum):
    """Why a datagram was refused; the server counts each kind."""

    MALFORMED = "malformed"        # wrong length, version or kind
    BAD_MAC = "bad-mac"            # HMAC does not verify
    REPLAYED = "replayed"          # sequence not newer than the last accepted
    OUT_OF_RANGE = "out-of-range"  # a field outside its valid range


class FeedbackRejected(Exception):
    """A datagram that must not be acted on, with the reason."""

    def __init__(self, reason: Rejection, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class Feedback:
    """One client report (see the module docstring for units and ranges)."""

    ue_id: int
    seq: int
    diag_time_ms: int
    w_claw_bytes: int
    load: float
    n_f_rbs: int
    n_t_rbs: int
    window_ms: int
    saturated: bool
    wireline: bool

    def encode(self, key: bytes) -> bytes:
        flags = (FLAG_SATURATED if self.saturated else 0) | (FLAG_WIRELINE if self.wireline else 0)
        body = _FEEDBACK_BODY.pack(
            VERSION, KIND_FEEDBACK, self.ue_id, self.seq, self.diag_time_ms, self.w_claw_bytes,
            round(min(max(self.load, 0.0), 1.0) * LOAD_PPM_SCALE), self.n_f_rbs, self.n_t_rbs,
            self.window_ms, flags,
        )
        return body + _mac(key, body)


@dataclass(frozen=True)
class Echo:
    """The server's answer to an accepted report."""

    ue_id: int
    seq: int
    srtt_us: int
    cwnd_packets: int
    cwnd_limited: bool

    def encode(self, key: bytes) -> bytes:
        body = _ECHO_BODY.pack(VERSION, KIND_ECHO, self.ue_id, self.seq, self.srtt_us,
                               self.cwnd_packets, ECHO_FLAG_CWND_LIMITED if self.cwnd_limited else 0)
        return body + _mac(key, body)


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest()


def _verified_body(data: bytes, key: bytes, size: int, kind: int) -> bytes:
    if len(data) != size:
        raise FeedbackRejected(Rejection.MALFORMED, f"{len(data)} bytes, expected {size}")
    if data[0] != VERSION or data[1] != kind:
        raise FeedbackRejected(Rejection.MALFORMED, f"version {data[0]} kind {data[1]}")
    body, mac = data[:-MAC_BYTES], data[-MAC_BYTES:]
    if not hmac.compare_digest(mac, _mac(key, body)):
        raise FeedbackRejected(Rejection.BAD_MAC, "HMAC does not verify")
    return body


def decode_feedback(data: bytes, key: bytes) -> Feedback:
    """Parse and authenticate a report; raise :class:`FeedbackRejected` naming the reason.

    Range checks are here; replay checks need state and live in :class:`ReplayGuard`.
    """
    body = _verified_body(data, key, FEEDBACK_BYTES, KIND_FEEDBACK)
    (_, _, ue_id, seq, t_ms, w_claw, load_ppm, n_f, n_t, window_ms, flags) = _FEEDBACK_BODY.unpack(body)
    problems = []
    if w_claw > MAX_W_CLAW_BYTES:
        problems.append(f"w_claw_bytes {w_claw} > {MAX_W_CLAW_BYTES}")
    if load_ppm > LOAD_PPM_SCALE:
        problems.append(f"load_ppm {load_ppm} > {LOAD_PPM_SCALE}")
    if not 1 <= window_ms <= MAX_WINDOW_MS:
        problems.append(f"window_ms {window_ms} outside 1..{MAX_WINDOW_MS}")
    if n_f > n_t:
        problems.append(f"n_f_rbs {n_f} > n_t_rbs {n_t}")
    if flags & ~(FLAG_SATURATED | FLAG_WIRELINE):
        problems.append(f"unknown flags {flags:#x}")
    if problems:
        raise FeedbackRejected(Rejection.OUT_OF_RANGE, "; ".join(problems))
    return Feedback(ue_id, seq, t_ms, w_claw, load_ppm / LOAD_PPM_SCALE, n_f, n_t, window_ms,
                    bool(flags & FLAG_SATURATED), bool(flags & FLAG_WIRELINE))


def decode_echo(data: bytes, key: bytes) -> Echo:
    """Parse and authenticate a server echo."""
    body = _verified_body(data, key, ECHO_BYTES, KIND_ECHO)
    (_, _, ue_id, seq, srtt_us, cwnd, flags) = _ECHO_BODY.unpack(body)
    return Echo(ue_id, seq, srtt_us, cwnd, bool(flags & ECHO_FLAG_CWND_LIMITED))


class ReplayGuard:
    """Accepts each UE's sequence numbers only in increasing order."""

    def __init__(self) -> None:
        self._last_seq: dict[int, int] = {}

    def check(self, fb: Feedback) -> None:
        last = self._last_seq.get(fb.ue_id)
        if last is not None and fb.seq <= last:
            raise FeedbackRejected(Rejection.REPLAYED, f"UE {fb.ue_id} seq {fb.seq} ≤ last accepted {last}")
        self._last_seq[fb.ue_id] = fb.seq


def read_key(path: Path | str) -> bytes:
    """The key the client and the server agent share: the file's exact bytes, at least
    :data:`MIN_KEY_BYTES` (make one with ``head -c 32 /dev/urandom > key``)."""
    path = Path(path)
    try:
        key = path.read_bytes()
    except OSError as e:
        raise InputError(f"reading the key file {path}: {e.strerror}") from e
    if len(key) < MIN_KEY_BYTES:
        raise InputError(f"key file {path} holds {len(key)} bytes; the key must be at least {MIN_KEY_BYTES}")
    return key
