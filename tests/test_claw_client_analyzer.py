"""The CLAW client's load analyzer against hand-computed and brute-force values.

Every expected number is computed here from the paper's equations (via ``clawbed.lte``'s
own Eq. 6 and TBS tables) or by re-summing the window from scratch, never by calling the
analyzer's internals.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from clawbed import lte
from clawbed.claw.client.analyzer import (
    DEFAULT_WINDOW_MS,
    MIN_SCHEDULED_SUBFRAMES,
    RING_MS,
    CellParams,
    LoadAnalyzer,
    SfnClock,
    Variant,
    load_from_rsrq_db,
    window_ms_from_srtt_us,
)


def rsrq_db_of(alloc_rbs: float, n_rb: int, n_antennas: int) -> float:
    """RSRQ (dB) of a subframe with ``alloc_rbs`` of ``n_rb`` RBs allocated (Eq. 6)."""
    return float(lte.linear_to_db(lte.rsrq_linear(alloc_rbs / n_rb, n_antennas)))


def feed(a: LoadAnalyzer, t: int, *, total: int, own: int = 0, mcs: int | None = 15, layers: int = 1,
         measure: bool = True) -> None:
    """One subframe: the UE's PDSCH, then (optionally) the measurement of the total allocation."""
    a.add_subframe(t, own, mcs if own > 0 else None, layers)
    if measure:
        a.add_measurement(t, rsrq_db_of(total, a.cell.n_rb, a.cell.n_antennas))


def started(n_rb: int = 50, n_antennas: int = 2, **kwargs: object) -> LoadAnalyzer:
    """An analyzer whose connection started at t = 0 (one scheduled subframe, 10 RBs)."""
    a = LoadAnalyzer(CellParams(n_rb, n_antennas), **kwargs)  # type: ignore[arg-type]
    feed(a, 0, total=10, own=10)
    return a


# -- Eq. 6 / 7 ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n_antennas", [1, 2])
@pytest.mark.parametrize("n_rb", [25, 50, 100])
def test_eq6_eq7_round_trip_through_the_analyzer(n_rb: int, n_antennas: int) -> None:
    for alloc in range(0, n_rb + 1):
        a = LoadAnalyzer(CellParams(n_rb, n_antennas))
        a.add_subframe(0, 1, 10)
        a.add_measurement(0, rsrq_db_of(alloc, n_rb, n_antennas))
        e = a.estimate()
        assert e is not None and e.samples == 1
        assert e.load == pytest.approx(alloc / n_rb, abs=1e-9)
        assert e.n_a_rbs == pytest.approx(alloc * DEFAULT_WINDOW_MS, abs=1e-5)


@pytest.mark.parametrize("n_antennas", [1, 2])
def test_scalar_eq7_matches_the_shared_one_and_clamps(n_antennas: int) -> None:
    for db in np.linspace(-25.0, 0.0, 101):
        assert load_from_rsrq_db(float(db), n_antennas) == pytest.approx(
            float(lte.load_from_rsrq(lte.db_to_linear(db), n_antennas)), abs=1e-12)
    # Better than an idle cell's RSRQ (−3 / −6 dB) → 0; worse than a full cell's → 1.
    assert load_from_rsrq_db(0.0, n_antennas) == 0.0
    assert load_from_rsrq_db(-30.0, n_antennas) == 1.0


# -- units --------------------------------------------------------------------------------------

def test_fully_idle_50_rb_cell_over_100_ms() -> None:
    a = started()
    for t in range(1, 101):
        feed(a, t, total=0)
    e = a.estimate()
    assert e is not None
    assert e.window_ms == 100 and e.samples == 100
    assert e.load == 0.0
    assert e.n_t_rbs == 5000
    assert e.n_i_rbs == 5000
    assert e.n_s_rbs == 0
    assert e.n_f_rbs == 5000
    assert e.n_prb == 50


def test_own_rbs_count_per_subframe_and_n_f_is_capped_at_n_t() -> None:
    a = started()
    for t in range(1, 200):
        feed(a, t, total=10, own=10)          # the UE alone, 10 RBs per subframe
    e = a.estimate()
    assert e is not None
    assert e.n_s_rbs == 1000                  # 10 RBs × 100 subframes
    assert e.load == pytest.approx(0.2)
    assert e.n_i_rbs == pytest.approx(4000)
    assert e.n_f_rbs == pytest.approx(5000)   # own + idle = the whole cell
    # Measurement noise can make N_s + N_I exceed N_t: N_f stays at N_t.
    for t in range(200, 400):
        a.add_subframe(t, 10, 15)
        a.add_measurement(t, rsrq_db_of(0, 50, 2))   # claims the cell is idle
    e = a.estimate()
    assert e is not None and e.n_s_rbs + e.n_i_rbs > e.n_t_rbs
    assert e.n_f_rbs == e.n_t_rbs == 5000


# -- TBS / W_claw -------------------------------------------------------------------------------

def test_w_claw_is_t_times_tbs_of_mean_mcs_and_rounded_prbs() -> None:
    a = started()
    # 60 % of the cell taken by others, the UE with 5 RBs at MCS 10 and 20 alternately.
    for t in range(1, 300):
        feed(a, t, total=35, own=5, mcs=10 if t % 2 else 20)
    e = a.estimate()
    assert e is not None
    assert e.mean_mcs == pytest.approx(15.0) and e.mcs_source == "window"
    n_f = 500 + 100 * 50 * (1 - 35 / 50)
    assert e.n_f_rbs == pytest.approx(n_f)
    n_prb = math.floor(n_f / 100 + 0.5)
    assert e.n_prb == n_prb == 20
    assert e.w_claw_bytes == 100 * lte.tbs_bits(15, n_prb) // 8
    assert e.cwnd_packets(1448) == math.ceil(e.w_claw_bytes / 1448)


def test_n_prb_clamped_to_at_least_one() -> None:
    # CQIC counts only the UE's own RBs: not scheduled in the window → N_f = 0 → N_PRB 1.
    a = started(variant=Variant.CQIC)
    for t in range(1, 200):
        feed(a, t, total=0)
    e = a.estimate()
    assert e is not None
    assert e.n_f_rbs == 0 and e.n_prb == 1
    assert e.mcs_source == "last"
    assert e.w_claw_bytes == 100 * lte.tbs_bits(15, 1) // 8
    # CLAW on a saturated cell: the same clamp.
    b = started()
    for t in range(1, 200):
        feed(b, t, total=50)
    eb = b.estimate()
    assert eb is not None and eb.n_f_rbs == pytest.approx(0.0, abs=1e-6) and eb.n_prb == 1


@pytest.mark.parametrize("n_rb", [50, 100])
def test_two_layers_use_the_two_layer_tbs(n_rb: int) -> None:
    a = started(n_rb=n_rb)
    for t in range(1, 200):
        feed(a, t, total=4, own=4, mcs=20, layers=2)
    e = a.estimate()
    assert e is not None and e.layers == 2
    assert e.n_prb == n_rb
    assert e.w_claw_bytes == 100 * lte.tbs_bits(20, n_rb, 2) // 8
    assert e.w_claw_bytes > 100 * lte.tbs_bits(20, n_rb, 1) // 8
    # A majority of one-layer blocks in the window → one layer.
    for t in range(200, 400):
        feed(a, t, total=4, own=4, mcs=20, layers=1)
    e = a.estimate()
    assert e is not None and e.layers == 1
    assert e.w_claw_bytes == 100 * lte.tbs_bits(20, n_rb, 1) // 8


def test_mcs_fallbacks_last_then_channel() -> None:
    a = started()
    for t in range(1, 300):
        feed(a, t, total=0)                   # never scheduled again: the last MCS (15)
    e = a.estimate()
    assert e is not None and e.mcs_source == "last" and e.mean_mcs == 15.0
    # A connection whose only blocks carry a reserved MCS (29): the channel MCS is all there is.
    b = LoadAnalyzer(CellParams(50, 2))
    b.add_subframe(0, 10, 29)
    b.add_measurement(0, rsrq_db_of(10, 50, 2), channel_mcs=9)
    b.add_subframe(1, 0, None)
    b.add_measurement(1, rsrq_db_of(0, 50, 2))
    eb = b.estimate()
    assert eb is not None and eb.mcs_source == "channel-window" and eb.mean_mcs == 9.0
    # ... and once that measurement has left the window, the last channel MCS reported.
    b.set_window_ms(1)
    eb = b.estimate()
    assert eb is not None and eb.mcs_source == "channel" and eb.mean_mcs == 9.0
    # Nothing known at all: no W_claw.
    c = LoadAnalyzer(CellParams(50, 2))
    c.add_subframe(0, 10, 30)
    ec = c.estimate()
    assert ec is not None and ec.mean_mcs is None and ec.mcs_source == "none" and ec.w_claw_bytes == 0


def test_thin_window_takes_the_channel_mcs_mean_and_a_full_one_the_scheduled_mean() -> None:
    """A few scheduled subframes (an idle UE's echoes) say little about the channel: below
    MIN_SCHEDULED_SUBFRAMES the window's mean channel-quality MCS is used instead."""
    a = LoadAnalyzer(CellParams(50, 2))
    channel = [10 + (t % 9) for t in range(100)]          # a channel swinging over MCS 10..18
    for t in range(100):
        own = 4 if t in (3, 50, 97) else 0                # three lucky subframes, all at MCS 5
        a.add_subframe(t, own, 5 if own else None)
        a.add_measurement(t, rsrq_db_of(own, 50, 2), channel_mcs=channel[t])
    e = a.estimate()
    assert e is not None and e.scheduled_subframes == 3
    # The connection (and so the window) starts at the first scheduled subframe, t = 3.
    assert e.mcs_source == "channel-window" and e.mean_mcs == pytest.approx(sum(channel[3:]) / 97)
    for t in range(100, 100 + MIN_SCHEDULED_SUBFRAMES):   # a flow starts: scheduled at MCS 12
        a.add_subframe(t, 40, 12)
        a.add_measurement(t, rsrq_db_of(40, 50, 2), channel_mcs=16)
    e = a.estimate()
    assert e is not None and e.scheduled_subframes == MIN_SCHEDULED_SUBFRAMES + 2
    assert e.mcs_source == "window"
    assert e.mean_mcs == pytest.approx((5 * 2 + 12 * MIN_SCHEDULED_SUBFRAMES) / (MIN_SCHEDULED_SUBFRAMES + 2))


# -- sliding with changing T --------------------------------------------------------------------

def test_window_sliding_with_changing_t_matches_brute_force() -> None:
    rng = random.Random(7)
    n_rb = 50
    a = started(n_rb=n_rb)
    totals = {0: 10}
    owns = {0: 10}
    mcss = {0: 15}
    for t in range(1, 6000):
        own = rng.choice([0, 0, 3, 7, 20])
        total = min(n_rb, own + rng.randint(0, 40))
        mcs = rng.randint(0, 28)
        feed(a, t, total=total, own=own, mcs=mcs)
        totals[t], owns[t], mcss[t] = total, own, mcs
        if rng.random() < 0.01:
            a.set_window_ms(rng.choice([1, 7, 50, 100, 333, 1000, 4000]))
        if t % 97 == 0 or rng.random() < 0.02:
            e = a.estimate()
            assert e is not None
            w = a.window_ms
            span = range(max(0, t - w + 1), t + 1)
            loads = [load_from_rsrq_db(rsrq_db_of(totals[u], n_rb, 2), 2) for u in span]
            sched = [mcss[u] for u in span if owns[u] > 0]
            assert e.samples == len(span)
            assert e.load == pytest.approx(sum(loads) / len(loads), abs=1e-8)
            assert e.n_s_rbs == sum(owns[u] for u in span)
            assert e.scheduled_subframes == len(sched)
            if sched:
                assert e.mean_mcs == pytest.approx(sum(sched) / len(sched))
            assert e.n_t_rbs == n_rb * w


def test_growing_t_reincludes_only_this_connections_subframes() -> None:
    a = started()
    for t in range(1, 50):
        feed(a, t, total=50)
    a.set_window_ms(10)
    assert a.estimate().samples == 10  # type: ignore[union-attr]
    a.set_window_ms(1000)                     # back over the ring: t = 0..49, no earlier
    e = a.estimate()
    assert e is not None and e.samples == 50 and e.n_t_rbs == 50_000


def test_srtt_to_window() -> None:
    assert window_ms_from_srtt_us(64_400) == 64
    assert window_ms_from_srtt_us(64_500) == 65
    assert window_ms_from_srtt_us(10) == 1
    assert window_ms_from_srtt_us(60_000_000) == 10_000
    a = started()
    a.set_srtt_us(72_000)
    assert a.window_ms == 72
    with pytest.raises(ValueError):
        a.set_window_ms(0)


def test_a_gap_in_the_feed_empties_the_window_without_scanning_it() -> None:
    a = started(idle_timeout_ms=10**9)
    for t in range(1, 100):
        feed(a, t, total=25, own=5)
    feed(a, 5_000_000, total=0, own=5)        # far beyond the ring
    e = a.estimate()
    assert e is not None and e.samples == 1 and e.n_s_rbs == 5 and e.load == 0.0
    assert RING_MS > 10_000


# -- idle / start -------------------------------------------------------------------------------

def test_frozen_until_the_first_downlink_subframe_then_starts_there() -> None:
    a = LoadAnalyzer(CellParams(50, 2))
    for t in range(0, 500):
        feed(a, t, total=50)                  # a busy cell, the UE not scheduled: frozen
    assert a.estimate() is None and not a.active
    feed(a, 500, total=20, own=20)            # first downlink subframe of the connection
    e = a.estimate()
    assert e is not None and a.active
    assert e.samples == 1 and e.load == pytest.approx(0.4)  # nothing from before t = 500
    for t in range(501, 530):
        feed(a, t, total=0)
    e = a.estimate()
    assert e is not None and e.samples == 30 and e.n_s_rbs == 20


def test_freezes_when_idle_and_restarts_fresh_on_the_next_connection() -> None:
    a = started(idle_timeout_ms=1000)
    for t in range(1, 1000):
        feed(a, t, total=30)
    before = a.estimate()
    feed(a, 1000, total=0)                    # 1000 ms without scheduling: idle
    assert not a.active
    assert a.estimate() == before             # the frozen estimate
    for t in range(1001, 3000):
        feed(a, t, total=0)                   # ignored while idle
    assert a.estimate() == before
    feed(a, 3000, total=45, own=5, mcs=22)
    e = a.estimate()
    assert a.active and e is not None
    assert e.samples == 1 and e.n_s_rbs == 5 and e.load == pytest.approx(0.9)
    a.radio_idle()                            # the feed says so
    assert not a.active


# -- time ---------------------------------------------------------------------------------------

def test_sfn_clock_unwraps_across_the_cycle_and_places_late_messages() -> None:
    c = SfnClock()
    assert c.unwrap(1023, 8) == 10238
    assert c.unwrap(1023, 9) == 10239
    assert c.unwrap(0, 0) == 10240
    assert c.unwrap(0, 5) == 10245
    assert c.unwrap(1023, 9) == 10239         # late: before, the clock does not move
    assert c.latest_ms == 10245
    t = 10245
    for _ in range(3 * 10240):                # three more cycles, 1 ms at a time
        t += 1
        assert c.unwrap((t // 10) % 1024, t % 10) == t
    assert c.unwrap(((t + 40) // 10) % 1024, (t + 40) % 10) == t + 40  # a gap of 40 ms
    with pytest.raises(ValueError):
        c.unwrap(1024, 0)


def test_window_across_the_sfn_wrap() -> None:
    from clawbed.claw.client.fakefeed import FakeSubframe
    from clawbed.claw.client.feed import FeedDecoder
    d = FeedDecoder()
    a = LoadAnalyzer(CellParams(50, 2))
    start = 10240 - 60
    for t in range(start, start + 120):       # crosses SFN 1023 → 0
        for m in FakeSubframe(t, total_alloc_rbs=25, own_rbs=5).messages(with_stats=False):
            if m["type_id"] == "LTE_PHY_PDSCH_Stat_Indication":
                for sf in d.pdsch(m):
                    a.add_subframe(sf.t_ms, sf.own_rbs, sf.mcs, sf.layers)
            elif m["type_id"] == "LTE_PHY_Serv_Cell_Measurement":
                for meas in d.measurements(m):
                    a.add_measurement(meas.t_ms, meas.rsrq_db)
    e = a.estimate()
    assert e is not None
    assert e.t_ms == start + 119 == 10240 + 59
    assert e.samples == 100 and e.n_s_rbs == 500 and e.load == pytest.approx(0.5)


# -- where Eq. 7 is clamped ---------------------------------------------------------------------

@pytest.mark.parametrize("true_alloc", [0, 2, 25, 48, 50])
def test_window_clamp_is_unbiased_under_rsrq_noise_and_sample_clamp_is_not(true_alloc: int) -> None:
    """RSRQ with 0.5 dB Gaussian noise, quantised to 1/16 dB as phones report it."""
    rng = np.random.default_rng(3)
    noisy = rsrq_db_of(true_alloc, 50, 2) + rng.normal(0.0, 0.5, 2000)
    noisy = np.round(noisy / 0.0625) * 0.0625
    results = {}
    for clamp in ("window", "sample"):
        a = LoadAnalyzer(CellParams(50, 2), clamp=clamp, window_ms=2000)
        for t, db in enumerate(noisy):
            a.add_subframe(t, 1, 10)
            a.add_measurement(t, float(db))
        e = a.estimate()
        assert e is not None and 0.0 <= e.load <= 1.0
        results[clamp] = e.load
    truth = true_alloc / 50
    assert abs(results["window"] - truth) < 0.012
    if true_alloc in (0, 50):
        # At the edges the per-sample clamp cannot average the noise out: biased inwards,
        # by about 0.4 σ of r_k (σ ≈ 0.03 at an idle cell, 0.14 at a full one, 2 antennas).
        bias = results["sample"] - truth
        assert bias * (1 if true_alloc == 0 else -1) > (0.008 if true_alloc == 0 else 0.04)
        assert abs(bias) > 2 * abs(results["window"] - truth)


def test_bad_clamp_is_refused() -> None:
    with pytest.raises(ValueError):
        LoadAnalyzer(CellParams(50, 2), clamp="both")


def test_a_fresh_connection_extrapolates_its_own_share_over_the_window() -> None:
    """Two subframes into a connection that has the whole 50-RB cell, W_claw is the whole
    cell over T (the own share seen so far, at its rate), not two subframes' worth."""
    a = LoadAnalyzer(CellParams(50, 2))
    for t in (0, 1):
        feed(a, t, total=50, own=50, mcs=20)
    e = a.estimate()
    assert e is not None and e.load == pytest.approx(1.0)
    assert e.n_f_rbs == pytest.approx(50 * DEFAULT_WINDOW_MS)
    assert e.w_claw_bytes == DEFAULT_WINDOW_MS * lte.tbs_bits(20, 50) // 8
    # Once the window is full, N_s is the plain sum again.
    for t in range(2, DEFAULT_WINDOW_MS + 5):
        feed(a, t, total=50, own=50 if t % 2 else 0, mcs=20)
    e = a.estimate()
    assert e is not None and e.n_s_rbs == sum(50 for t in range(5, DEFAULT_WINDOW_MS + 5) if t % 2)
