"""The bottleneck detector's and the saturation rule's state machines (claw-spec.md)."""

from __future__ import annotations

import pytest

from clawbed.claw.client.detector import Bottleneck, BottleneckDetector, DetectorCache, SaturationDetector, verdict

C, W = Bottleneck.CELLULAR, Bottleneck.WIRELINE
N_F = 1000.0
WIRE = (N_F, 700.0, True)    # cwnd-limited and U = 0.7·N_f < 0.8·N_f
CELL = (N_F, 900.0, True)    # U ≥ 0.8·N_f


def test_verdict_rule() -> None:
    assert verdict(N_F, 799.9, True) is W
    assert verdict(N_F, 800.0, True) is C          # U < δ·N_f is strict
    assert verdict(N_F, 0.0, False) is C           # not cwnd-limited: the sender had no more to send
    assert verdict(N_F, 0.0, True) is W


def test_wireline_only_when_short_of_the_offered_bytes_too() -> None:
    """U in RBs under δ·N_f, but the UE received what the server offered (its transport
    blocks carried more per RB than W_claw's estimate: two layers, a higher MCS): cellular."""
    assert verdict(N_F, 500.0, True, offered_bytes=100_000, received_bytes=79_999) is W
    assert verdict(N_F, 500.0, True, offered_bytes=100_000, received_bytes=80_000) is C
    assert verdict(N_F, 900.0, True, offered_bytes=100_000, received_bytes=0) is C    # every RB used
    d = BottleneckDetector()
    assert d.observe(N_F, 500.0, True, offered_bytes=100_000, received_bytes=95_000) is C


def test_three_equal_verdicts_switch_the_state() -> None:
    d = BottleneckDetector()
    assert d.state is C and not d.wireline
    assert d.observe(*WIRE) is W and d.state is C
    assert d.observe(*WIRE) is W and d.state is C
    assert d.observe(*WIRE) is W and d.state is W and d.wireline
    # Two cellular verdicts are not enough to switch back; the third is.
    d.observe(*CELL)
    d.observe(*CELL)
    assert d.state is W
    d.observe(*CELL)
    assert d.state is C and not d.degraded


def test_a_broken_run_starts_counting_again() -> None:
    d = BottleneckDetector()
    for v in (WIRE, WIRE, CELL, WIRE, WIRE):
        d.observe(*v)
    assert d.state is C
    d.observe(*WIRE)
    assert d.state is W


def test_six_alternating_windows_degrade_to_cubic() -> None:
    d = BottleneckDetector()
    for i, v in enumerate([WIRE, CELL, WIRE, CELL, WIRE]):
        d.observe(*v)
        assert not d.degraded, f"degraded after {i + 1} alternating verdicts"
    d.observe(*CELL)
    assert d.degraded and d.wireline          # plain Cubic: the server is told "wireline"
    # It stays degraded whatever comes next.
    for _ in range(5):
        d.observe(*CELL)
    assert d.degraded and d.wireline


def test_alternation_interrupted_does_not_degrade() -> None:
    d = BottleneckDetector()
    for v in [WIRE, CELL, WIRE, CELL, CELL, WIRE, CELL, WIRE, CELL]:
        d.observe(*v)
    assert not d.degraded                     # the longest alternating run is 5


def test_cache_keeps_state_per_server_for_60_s() -> None:
    cache = DetectorCache()
    for t in (0.0, 1.0, 2.0):
        cache.observe("10.64.0.1:7070", t, *WIRE)
    assert cache.get("10.64.0.1:7070", 30.0).state is W
    assert cache.peek("10.64.0.2:7070", 30.0) is None          # per server
    # Used at 30 s: kept until 90 s; peeking does not count as use.
    assert cache.peek("10.64.0.1:7070", 89.9).state is W  # type: ignore[union-attr]
    assert cache.peek("10.64.0.1:7070", 90.0) is None
    assert cache.get("10.64.0.1:7070", 90.0).state is C        # a fresh detector
    cache.expire(1000.0)
    assert len(cache) == 0


def test_degraded_state_is_forgotten_with_the_cache_entry() -> None:
    cache = DetectorCache(ttl_s=60.0)
    for i, v in enumerate([WIRE, CELL] * 3):
        cache.observe("s", float(i), *v)
    assert cache.get("s", 10.0).degraded
    assert not cache.get("s", 70.0).degraded


def test_saturation_needs_two_consecutive_windows() -> None:
    s = SaturationDetector()
    assert not s.observe(n_i_rbs=100, n_t_rbs=5000)            # 2 % idle, first window
    assert s.observe(n_i_rbs=0, n_t_rbs=5000)                  # second: saturated
    assert s.observe(n_i_rbs=249, n_t_rbs=5000)                # still below 5 %
    assert not s.observe(n_i_rbs=250, n_t_rbs=5000)            # exactly 5 % is not below
    assert not s.observe(n_i_rbs=10, n_t_rbs=5000)
    assert not s.observe(n_i_rbs=4000, n_t_rbs=5000)           # interrupted
    assert not s.observe(n_i_rbs=10, n_t_rbs=5000)
    assert s.observe(n_i_rbs=10, n_t_rbs=5000)
    s.reset()
    assert not s.saturated


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        BottleneckDetector(switch_after=0)
    with pytest.raises(ValueError):
        SaturationDetector(windows=0)
