"""The UE's radio channel, subframe by subframe: SINR, RSRP, CQI, rank, MCS and HARQ failures.

The model (``CHANNEL_MODEL.md`` beside this file explains and justifies it):

1. **SINR (dB)** per 1 ms subframe = preset mean + slow shadowing + fast fading.
   - Shadowing: a Gauss-Markov (AR(1)) process in *distance* (Gudmundson's exponential
     autocorrelation ``exp(-d / d_corr)``), advanced by the distance the UE covers in one
     subframe at its speed.
   - Fast fading: each of the link's diversity branches (receive × transmit antennas) is a
     sum of sinusoids with random arrival angles and phases (a Clarke/Jakes Doppler
     spectrum whose maximum Doppler shift follows the UE's speed); the SINR gain is the
     mean power over the branches, in dB, shifted so that the fading has zero mean in dB.
   - A static UE still sees fading and slow change from moving scatterers: speeds below
     :data:`STATIC_SCATTERER_SPEED_KMH` are raised to it.
2. **CQI**: the UE measures the SINR every :data:`CQI_PERIOD_MS` and the eNodeB uses the
   report :data:`CQI_DELAY_MS` later. CQI = the highest index of the 4-bit table
   (36.213 Table 7.2.3-1) whose SINR threshold (:data:`CQI_SINR_THRESHOLD_DB`, an
   approximate link-level mapping, see there) the measured per-layer SINR reaches.
3. **Rank**: two layers when the cell has two antennas and the reported SINR is at least
   :data:`RANK2_MIN_SINR_DB`; each layer then gets half the power (−3 dB of SINR).
4. **MCS**: the eNodeB turns the CQI back into its SINR threshold, adds its outer-loop
   link-adaptation (OLLA) offset, and picks the highest MCS whose 10 %-BLER SINR is at
   most that. With a zero offset this is the MCS whose spectral efficiency is closest to
   the CQI's at or below it (:func:`link_tables`). The MCS efficiencies and their SINRs are
   derived from the 36.213 TBS table, not typed in.
5. **HARQ**: the first transmission of subframe k fails with a BLER given by the gap between
   the actual per-layer SINR and the MCS's 10 %-BLER SINR (a logistic curve); OLLA steps
   its offset up on success and down on failure so that the failure rate converges on the
   target (10 %, as deployed LTE link adaptation aims for).

Everything is reproducible from a :class:`numpy.random.SeedSequence`, and a shorter
realisation is exactly the start of a longer one with the same seed.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from clawbed.lte import MAX_MCS, N_SUBC, SUBFRAME_MS, tbs_bits

#: Carrier frequency for the Doppler shift, Hz. The CLAW paper does not name its band; 2 GHz
#: is typical of the mid-band LTE carriers its phones used (AWS/PCS).
CARRIER_FREQUENCY_HZ = 2.0e9
SPEED_OF_LIGHT_M_S = 299_792_458.0
#: A phone at a static location still sees Doppler and slow change from people and vehicles
#: around it; 3GPP's pedestrian channel (EPA 5 Hz) corresponds to about this speed at 2 GHz.
STATIC_SCATTERER_SPEED_KMH = 3.0
#: Receive antennas of the UE (LTE category 4+ phones have two).
UE_RX_ANTENNAS = 2
#: Sinusoids per fading branch; with random angles 16 give a close Clarke spectrum.
SINUSOIDS_PER_BRANCH = 16
#: Subframes of fading computed per vectorised block (memory vs. speed; no effect on values).
_FADING_BLOCK = 4096
#: The AR(1) filter works in blocks over which the decay ``rho**-k`` stays below e**4.
_AR1_BLOCK_DECAY = 4.0

#: 36.213 Table 7.2.3-1 (4-bit CQI): spectral efficiency, information bits per resource
#: element, of CQI 0..15 (CQI 0 is "out of range").
CQI_EFFICIENCY = (
    0.0, 0.1523, 0.2344, 0.3770, 0.6016, 0.8770, 1.1758, 1.4766,
    1.9141, 2.4063, 2.7305, 3.3223, 3.9023, 4.5234, 5.1152, 5.5547,
)
#: SINR (dB) at which CQI 1..15 reaches 10 % BLER: the single-antenna SNR-to-CQI thresholds
#: of Kawser et al., "Downlink SNR to CQI Mapping for Different Multiple Antenna Techniques
#: in LTE", IJIEE 2(5), 2012 — the table most system-level LTE models reuse. Approximate:
#: link-level results depend on the channel model, receiver and HARQ, and a real UE's
#: mapping is its vendor's.
CQI_SINR_THRESHOLD_DB = (
    -6.7, -4.7, -2.3, 0.2, 2.4, 4.3, 5.9, 8.1, 10.3, 11.7, 14.1, 16.3, 18.7, 21.0, 22.7,
)
#: BLER that the thresholds above stand for.
THRESHOLD_BLER = 0.10
#: Steepness of a BLER curve around its threshold, per dB: BLER goes from 90 % to 10 % over
#: 2·ln(9)/slope ≈ 2.2 dB, typical of turbo-coded blocks over a fading subframe.
BLER_SLOPE_PER_DB = 2.0

#: OFDM symbols of a normal-CP subframe.
SYMBOLS_PER_SUBFRAME = 14
#: Control-region symbols assumed by the CSI reference resource (36.213 §7.2.3).
CONTROL_SYMBOLS = 3
#: Cell-specific reference-signal REs per antenna port (ports 0/1) in a PRB pair outside the
#: control region (8 per port per PRB pair, 2 of them in symbol 0).
CRS_RE_PER_PORT_OUTSIDE_CONTROL = 6
#: CRC bits attached to a transport block: they count as information bits in the CQI's
#: effective code rate (36.213 §7.2.3).
TB_CRC_BITS = 24

#: Period of the UE's CQI measurements, ms (a common periodic-CQI configuration).
CQI_PERIOD_MS = 5
#: Measurement-to-use delay of a CQI report, ms: the CSI reference resource is at least 4
#: subframes before the report (36.213 §7.2.3), and the eNodeB applies it ~2 ms later.
CQI_DELAY_MS = 6
#: Reported SINR from which the UE reports rank 2 (two layers), dB. Real UEs choose rank from
#: channel correlation as well; rank 2 is common only at good SINR.
RANK2_MIN_SINR_DB = 12.0

#: First-transmission BLER that LTE link adaptation aims for.
BLER_TARGET = 0.10
#: OLLA step on a success, dB; the step on a failure is up·(1−target)/target, so that the
#: offset is in equilibrium exactly at the target BLER.
OLLA_STEP_UP_DB = 0.05
#: OLLA offset bounds, dB: it may back off far when the reports are stale (fast fading),
#: but must not climb far above the reports where the top MCS never fails.
OLLA_MIN_DB = -10.0
OLLA_MAX_DB = 2.0

#: RSRP column bounds (FORMAT.md), dBm, and its quantum (1/4 dB: exact in f32, so the slow
#: column compresses to little; finer than the 1 dB of 36.133's RSRP report mapping).
RSRP_MIN_DBM = -140.0
RSRP_MAX_DBM = -44.0
RSRP_STEP_DB = 0.25


@dataclass(frozen=True)
class ChannelParams:
    """What describes one UE's channel; all a preset's radio parameters."""

    #: Mean SINR over time, dB (shadowing and fading have zero mean in dB).
    mean_sinr_db: float
    #: Standard deviation of the shadowing, dB.
    shadow_sigma_db: float
    #: Distance over which the shadowing's correlation falls to 1/e, m.
    shadow_decorrelation_m: float
    #: UE speed, km/h (0 for a static UE; see STATIC_SCATTERER_SPEED_KMH).
    speed_kmh: float
    #: Mean RSRP, dBm.
    mean_rsrp_dbm: float
    #: Target first-transmission BLER of the outer loop; None: no HARQ-failure process (the
    #: MCS follows the CQI without an outer loop and the trace has no ``harq_fail``).
    bler_target: float | None = BLER_TARGET

    @property
    def effective_speed_kmh(self) -> float:
        """Speed that drives Doppler and shadowing, km/h (never below the scatterers')."""
        return max(self.speed_kmh, STATIC_SCATTERER_SPEED_KMH)

    @property
    def doppler_hz(self) -> float:
        """Maximum Doppler shift, Hz."""
        return self.effective_speed_kmh / 3.6 * CARRIER_FREQUENCY_HZ / SPEED_OF_LIGHT_M_S


@dataclass(frozen=True)
class LinkTables:
    """MCS properties derived from the 36.213 tables for one cell configuration."""

    #: Information + CRC bits per data RE of MCS 0..28 at the cell's full width.
    mcs_efficiency: np.ndarray
    #: SINR (dB) at which each MCS reaches THRESHOLD_BLER (non-decreasing in MCS).
    mcs_sinr_db: np.ndarray
    #: MCS the eNodeB uses for CQI 0..15 with a zero outer-loop offset.
    mcs_for_cqi: np.ndarray


@dataclass
class ChannelRealisation:
    """One realisation of the channel, one value per subframe."""

    sinr_db: np.ndarray
    rsrp_dbm: np.ndarray
    cqi: np.ndarray
    layers: np.ndarray
    mcs: np.ndarray
    #: First-transmission failure (1) per subframe, or None without a HARQ process.
    harq_fail: np.ndarray | None
    #: Outer-loop offset in force in each subframe, dB (zeros without a HARQ process).
    olla_offset_db: np.ndarray


def data_res_per_prb_pair(n_antennas: int) -> int:
    """Resource elements per PRB pair that carry PDSCH in the CSI reference resource."""
    return N_SUBC * (SYMBOLS_PER_SUBFRAME - CONTROL_SYMBOLS) - CRS_RE_PER_PORT_OUTSIDE_CONTROL * n_antennas


def sinr_for_efficiency_db(efficiency: np.ndarray) -> np.ndarray:
    """SINR (dB) needed for 10 % BLER at a spectral efficiency (bits/RE).

    Linear in efficiency between the CQI table's points; beyond CQI 1 or CQI 15 the end
    segments are extended (MCS 28 is more efficient than CQI 15).
    """
    eff = np.asarray(CQI_EFFICIENCY[1:])
    sinr = np.asarray(CQI_SINR_THRESHOLD_DB)
    x = np.asarray(efficiency, dtype=np.float64)
    out = np.interp(x, eff, sinr)
    lo_slope = (sinr[1] - sinr[0]) / (eff[1] - eff[0])
    hi_slope = (sinr[-1] - sinr[-2]) / (eff[-1] - eff[-2])
    out = np.where(x < eff[0], sinr[0] + (x - eff[0]) * lo_slope, out)
    return np.where(x > eff[-1], sinr[-1] + (x - eff[-1]) * hi_slope, out)


@lru_cache(maxsize=16)
def link_tables(n_rb: int, n_antennas: int) -> LinkTables:
    """MCS efficiencies, their 10 %-BLER SINRs and the CQI → MCS map for a cell.

    An MCS's efficiency is (TBS + CRC) / data REs over the cell's full width, the CQI
    table's definition of effective code rate (36.213 §7.2.3). CQI c maps to the highest
    MCS whose efficiency is at most CQI c's (ties, as MCS 9/10 and 16/17 that share a TBS
    index, go to the higher modulation order); CQI 0 maps to MCS 0.
    """
    res = n_rb * data_res_per_prb_pair(n_antennas)
    eff = np.array([(tbs_bits(m, n_rb) + TB_CRC_BITS) / res for m in range(MAX_MCS + 1)])
    # TBS grows with the TBS index, so the efficiency (and the SINR) never falls with MCS.
    mcs_sinr = sinr_for_efficiency_db(eff)
    mcs_for_cqi = np.zeros(len(CQI_EFFICIENCY), dtype=np.int64)
    for cqi in range(1, len(CQI_EFFICIENCY)):
        at_or_below = np.nonzero(eff <= CQI_EFFICIENCY[cqi] + 1e-12)[0]
        mcs_for_cqi[cqi] = at_or_below[-1] if len(at_or_below) else 0
    for a in (eff, mcs_sinr, mcs_for_cqi):
        a.setflags(write=False)
    return LinkTables(eff, mcs_sinr, mcs_for_cqi)


def cqi_for_sinr(sinr_db: np.ndarray) -> np.ndarray:
    """CQI 0..15: the number of CQI thresholds the SINR (dB) reaches."""
    return np.searchsorted(np.asarray(CQI_SINR_THRESHOLD_DB), sinr_db, side="right")


def bler(sinr_db: float, mcs_sinr_db: float) -> float:
    """First-transmission BLER at a per-layer SINR (dB) for an MCS whose 10 %-BLER SINR is
    ``mcs_sinr_db``: a logistic curve in dB through THRESHOLD_BLER at the threshold.

    Scalar (math, not numpy): the outer loop calls it once per subframe.
    """
    exponent = BLER_SLOPE_PER_DB * (sinr_db - mcs_sinr_db)
    if exponent > 700.0:  # math.exp overflows past ~709; the block surely succeeds
        return 0.0
    return 1.0 / (1.0 + (1.0 - THRESHOLD_BLER) / THRESHOLD_BLER * math.exp(exponent))


def gauss_markov(innovations: np.ndarray, rho: float) -> np.ndarray:
    """Unit-variance stationary AR(1) process ``x[k] = rho·x[k-1] + sqrt(1-rho²)·w[k]``.

    ``innovations`` are i.i.d. N(0, 1); ``x[0] = w[0]`` (stationary start). Computed in
    closed form over blocks (no per-sample Python loop); values do not depend on the
    length, so a prefix of the innovations gives a prefix of the process.
    """
    if not 0.0 <= rho <= 1.0:
        raise ValueError(f"AR(1) coefficient {rho} outside [0, 1]")
    w = np.asarray(innovations, dtype=np.float64)
    drive = w * math.sqrt(1.0 - rho * rho)
    if len(w):
        drive[0] = w[0]
    n = len(w)
    if rho >= 1.0:
        block = max(n, 1)
    elif rho == 0.0:
        block = 1
    else:
        block = max(1, int(_AR1_BLOCK_DECAY / -math.log(rho)))
    x = np.empty(n)
    carry = 0.0
    for start in range(0, n, block):
        e = drive[start:start + block]
        powers = rho ** np.arange(len(e), dtype=np.float64)
        x[start:start + len(e)] = powers * (rho * carry + np.cumsum(e / powers))
        carry = x[start + len(e) - 1]
    return x


def shadowing_db(rng: np.random.Generator, n: int, params: ChannelParams) -> np.ndarray:
    """Slow shadowing, dB: AR(1) in distance with correlation exp(-d/d_corr) per subframe."""
    step_m = params.effective_speed_kmh / 3.6 * SUBFRAME_MS / 1000.0
    rho = math.exp(-step_m / params.shadow_decorrelation_m)
    return params.shadow_sigma_db * gauss_markov(rng.standard_normal(n), rho)


def diversity_branches(n_antennas: int) -> int:
    """Independent fading branches of the link: receive × transmit antennas."""
    return UE_RX_ANTENNAS * n_antennas


def _mean_db_of_branch_average(branches: int) -> float:
    """E[10·log10(X)] for X the mean of ``branches`` unit-mean exponential powers.

    X ~ Gamma(L, 1/L), so E[ln X] = ψ(L) − ln L with ψ(L) = −γ + Σ_{k<L} 1/k.
    """
    euler_gamma = 0.5772156649015329
    digamma = -euler_gamma + sum(1.0 / k for k in range(1, branches))
    return 10.0 / math.log(10.0) * (digamma - math.log(branches))


def fading_db(rng: np.random.Generator, n: int, doppler_hz: float, branches: int) -> np.ndarray:
    """Fast-fading SINR gain, dB, zero mean in dB, for ``n`` subframes.

    Each branch is ``h(t) = M^-1/2 · Σ exp(j(2π f_d cos(α_m) t + φ_m))`` with random angles
    α_m and phases φ_m (Rayleigh envelope, Clarke autocorrelation J0(2π f_d τ)); the gain is
    the mean of |h|² over the branches (maximum-ratio combining). Computed block by block as
    ``h(t0 + τ) = Σ_m [exp(j ω_m τ)] · [c_m exp(j ω_m t0)]`` to avoid per-sample sines.
    """
    dt_s = SUBFRAME_MS / 1000.0
    m = SINUSOIDS_PER_BRANCH
    angles = rng.uniform(0.0, 2.0 * np.pi, size=(branches, m))
    phases = rng.uniform(0.0, 2.0 * np.pi, size=(branches, m))
    omega = 2.0 * np.pi * doppler_hz * np.cos(angles) * dt_s  # rad per subframe
    tau = np.arange(_FADING_BLOCK, dtype=np.float64)[:, None]
    within = [np.exp(1j * tau * omega[b][None, :]) for b in range(branches)]
    power = np.zeros(n)
    for start in range(0, n, _FADING_BLOCK):
        length = min(_FADING_BLOCK, n - start)
        for b in range(branches):
            coeff = np.exp(1j * (omega[b] * start + phases[b])) / math.sqrt(m)
            h = (within[b][:length] * coeff[None, :]).sum(axis=1)
            power[start:start + length] += h.real ** 2 + h.imag ** 2
    # Floor far below any real fade, only so that log10 never sees an exact zero.
    gain = np.maximum(power / branches, 1e-12)
    return 10.0 * np.log10(gain) - _mean_db_of_branch_average(branches)


def reported_index(n: int) -> np.ndarray:
    """Subframe whose measurement the eNodeB uses in each subframe (periodic, delayed)."""
    k = np.arange(n, dtype=np.int64)
    return np.maximum((k - CQI_DELAY_MS) // CQI_PERIOD_MS * CQI_PERIOD_MS, 0)


def _outer_loop(
    reported_cqi: np.ndarray,
    actual_layer_sinr_db: np.ndarray,
    uniforms: np.ndarray,
    tables: LinkTables,
    target: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Run OLLA subframe by subframe; returns (mcs, harq_fail, offset_db).

    Sequential by nature (each MCS depends on the past outcomes), so a plain loop over
    Python scalars, which is faster than numpy per element.
    """
    step_down = OLLA_STEP_UP_DB * (1.0 - target) / target
    cqi_sinr = [-math.inf, *CQI_SINR_THRESHOLD_DB]
    mcs_sinr = tables.mcs_sinr_db.tolist()
    n = len(reported_cqi)
    mcs = np.empty(n, dtype=np.int64)
    fail = np.empty(n, dtype=np.uint8)
    offsets = np.empty(n)
    offset = 0.0
    for k, (cqi, sinr, u) in enumerate(zip(reported_cqi.tolist(), actual_layer_sinr_db.tolist(),
                                           uniforms.tolist())):
        m = max(bisect_right(mcs_sinr, cqi_sinr[cqi] + offset) - 1, 0)
        failed = u < bler(sinr, mcs_sinr[m])
        mcs[k], fail[k], offsets[k] = m, failed, offset
        offset = max(OLLA_MIN_DB, offset - step_down) if failed else min(OLLA_MAX_DB, offset + OLLA_STEP_UP_DB)
    return mcs, fail, offsets


def simulate(params: ChannelParams, n: int, n_rb: int, n_antennas: int,
             seed: np.random.SeedSequence) -> ChannelRealisation:
    """Realise the channel for ``n`` subframes of a cell of ``n_rb`` RBs and ``n_antennas``."""
    shadow_ss, fading_ss, harq_ss = seed.spawn(3)
    shadow = shadowing_db(np.random.default_rng(shadow_ss), n, params)
    fading = fading_db(np.random.default_rng(fading_ss), n, params.doppler_hz, diversity_branches(n_antennas))
    sinr = params.mean_sinr_db + shadow + fading

    # The UE's measurement filtering averages the fast fading out of RSRP: it follows the
    # large-scale signal only.
    rsrp = params.mean_rsrp_dbm + shadow
    rsrp = np.clip(np.round(rsrp / RSRP_STEP_DB) * RSRP_STEP_DB, RSRP_MIN_DBM, RSRP_MAX_DBM)

    reported_sinr = sinr[reported_index(n)]
    rank2 = reported_sinr >= RANK2_MIN_SINR_DB if n_antennas == 2 else np.zeros(n, dtype=bool)
    layers = np.where(rank2, 2, 1).astype(np.uint8)
    # Two layers share the transmit power: each layer sees half the SINR.
    split_db = 10.0 * np.log10(layers.astype(np.float64))
    cqi = cqi_for_sinr(reported_sinr - split_db)

    tables = link_tables(n_rb, n_antennas)
    if params.bler_target is None:
        mcs = tables.mcs_for_cqi[cqi]
        harq_fail = None
        offsets = np.zeros(n)
    else:
        uniforms = np.random.default_rng(harq_ss).random(n)
        mcs, harq_fail, offsets = _outer_loop(cqi, sinr - split_db, uniforms, tables, params.bler_target)
    return ChannelRealisation(
        sinr_db=sinr, rsrp_dbm=rsrp, cqi=cqi.astype(np.uint8), layers=layers,
        mcs=mcs.astype(np.uint8), harq_fail=harq_fail, olla_offset_db=offsets,
    )
