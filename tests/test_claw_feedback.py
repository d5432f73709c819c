"""The CLAW feedback codec: round trips, and every kind of bad datagram refused by kind."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from clawbed.claw.feedback import (
    ECHO_BYTES,
    FEEDBACK_BYTES,
    Echo,
    Feedback,
    FeedbackRejected,
    Rejection,
    ReplayGuard,
    decode_echo,
    decode_feedback,
    read_key,
)
from clawbed.errors import InputError

KEY = b"k" * 32
GOOD = Feedback(ue_id=3, seq=7, diag_time_ms=123_456, w_claw_bytes=250_000, load=0.7,
                n_f_rbs=1500, n_t_rbs=5000, window_ms=100, saturated=False, wireline=True)


def test_feedback_round_trip() -> None:
    data = GOOD.encode(KEY)
    assert len(data) == FEEDBACK_BYTES
    assert decode_feedback(data, KEY) == GOOD


def test_echo_round_trip() -> None:
    echo = Echo(ue_id=3, seq=7, srtt_us=65_000, cwnd_packets=120, cwnd_limited=True)
    data = echo.encode(KEY)
    assert len(data) == ECHO_BYTES
    assert decode_echo(data, KEY) == echo


def flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1:]


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("empty", b"", Rejection.MALFORMED),
        ("garbage", b"\x00" * 13, Rejection.MALFORMED),
        ("too long", GOOD.encode(KEY) + b"x", Rejection.MALFORMED),
        ("wrong version", b"\x02" + GOOD.encode(KEY)[1:], Rejection.MALFORMED),
        ("an echo sent as feedback", Echo(1, 1, 1, 1, False).encode(KEY) + b"\0" * 20, Rejection.MALFORMED),
        ("wrong key", GOOD.encode(b"other key"), Rejection.BAD_MAC),
        ("flipped body bit", flip(GOOD.encode(KEY), 20), Rejection.BAD_MAC),
        ("flipped mac bit", flip(GOOD.encode(KEY), FEEDBACK_BYTES - 1), Rejection.BAD_MAC),
        ("zero window", dataclasses.replace(GOOD, window_ms=0).encode(KEY), Rejection.OUT_OF_RANGE),
        ("huge window", dataclasses.replace(GOOD, w_claw_bytes=2**31).encode(KEY), Rejection.OUT_OF_RANGE),
        ("N_f above N_t", dataclasses.replace(GOOD, n_f_rbs=6000).encode(KEY), Rejection.OUT_OF_RANGE),
    ],
)
def test_bad_datagrams_are_refused_by_kind(name: str, data: bytes, reason: Rejection) -> None:
    with pytest.raises(FeedbackRejected) as caught:
        decode_feedback(data, KEY)
    assert caught.value.reason is reason, name


def test_load_is_clamped_on_encode() -> None:
    fb = decode_feedback(dataclasses.replace(GOOD, load=1.7).encode(KEY), KEY)
    assert fb.load == 1.0


def test_replayed_sequence_is_refused_per_ue() -> None:
    guard = ReplayGuard()
    guard.check(GOOD)
    for seq in (GOOD.seq, GOOD.seq - 1):
        with pytest.raises(FeedbackRejected) as caught:
            guard.check(dataclasses.replace(GOOD, seq=seq))
        assert caught.value.reason is Rejection.REPLAYED
    guard.check(dataclasses.replace(GOOD, seq=GOOD.seq + 1))
    guard.check(dataclasses.replace(GOOD, ue_id=4, seq=1))  # another UE has its own sequence


def test_read_key(tmp_path: Path) -> None:
    (tmp_path / "k").write_bytes(KEY)
    assert read_key(tmp_path / "k") == KEY
    (tmp_path / "short").write_bytes(b"x" * 15)
    with pytest.raises(InputError, match="at least 16"):
        read_key(tmp_path / "short")
    with pytest.raises(InputError, match="reading the key file"):
        read_key(tmp_path / "missing")
