"""LTE physical-layer tables and formulas shared by every Python part of clawbed.

The MCS and TBS tables of 3GPP TS 36.213 are loaded from ``emulator/lte/tables/`` (one source
of truth with the Rust emulator, whose build reads the same files); no value is typed here.

Choice: the one-layer table keeps the specification's value 328 bits at (I_TBS 6, N_PRB 1)
even though it breaks the row's monotonicity; searches for "fewest PRBs carrying N bits"
therefore scan rather than bisect.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from clawbed.errors import ClawbedError
from clawbed.paths import REPO_ROOT

#: Highest MCS index of a new transmission (29..31 are reserved for retransmissions).
MAX_MCS = 28
#: Highest PRB count of the TBS table (36.213 Table 7.1.7.2.1-1 has columns 1..110).
MAX_TABLE_PRBS = 110
#: Cell bandwidth (MHz) → resource blocks per slot (N_rb), 36.101.
N_RB_BY_BANDWIDTH_MHZ: dict[float, int] = {1.4: 6, 3: 15, 5: 25, 10: 50, 15: 75, 20: 100}
#: Valid cell sizes in resource blocks.
VALID_N_RB = frozenset(N_RB_BY_BANDWIDTH_MHZ.values())
#: Subcarriers per resource block.
N_SUBC = 12
#: Subframe length: one transmission time interval, ms.
SUBFRAME_MS = 1
#: System frame numbers wrap at 1024 frames of 10 subframes (10240 ms).
SFN_CYCLE = 1024

#: The folder of the 36.213 CSV files (data of the ``lte`` crate).
TABLES_DIR = REPO_ROOT / "emulator" / "lte" / "tables"
MCS_TABLE = "mcs_table_36213_7_1_7_1.csv"
TBS_TABLE = "tbs_table_36213_7_1_7_2_1.csv"
TBS_2LAYER_TABLE = "tbs_1to2layer_translation_36213_7_1_7_2_2.csv"


@dataclass(frozen=True)
class Tables:
    """The 36.213 tables as arrays."""

    #: ``itbs_by_mcs[mcs]`` for MCS 0..28 (table rows 29..31 are reserved).
    itbs_by_mcs: np.ndarray
    #: ``qm_by_mcs[mcs]``: modulation order (2 QPSK, 4 16QAM, 6 64QAM) for MCS 0..31.
    qm_by_mcs: np.ndarray
    #: ``tbs_1layer_bits[itbs, n_prb]`` with column 0 unused (0).
    tbs_1layer_bits: np.ndarray
    #: One-layer TBS → two-layer TBS, for N_PRB 56..110.
    two_layer_bits: dict[int, int]


def _read_csv(path: Path) -> list[list[str]]:
    try:
        with path.open(newline="") as f:
            return list(csv.reader(f))
    except OSError as e:
        raise ClawbedError(f"reading 3GPP table {path}: {e.strerror}") from e


def _int(path: Path, line: int, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ClawbedError(f"{path}:{line}: expected an integer, found {text!r}") from None


@lru_cache(maxsize=1)
def tables() -> Tables:
    """Load (once) and return the 36.213 tables."""
    base = TABLES_DIR

    path = base / MCS_TABLE
    rows = _read_csv(path)
    itbs = np.zeros(MAX_MCS + 1, dtype=np.int16)
    qm = np.zeros(32, dtype=np.int16)
    for line, row in enumerate(rows[1:], start=2):
        mcs = _int(path, line, row[0])
        qm[mcs] = _int(path, line, row[1])
        if mcs <= MAX_MCS:
            itbs[mcs] = _int(path, line, row[2])

    path = base / TBS_TABLE
    rows = _read_csv(path)
    if len(rows[0]) != MAX_TABLE_PRBS + 1:
        raise ClawbedError(f"{path}:1: expected {MAX_TABLE_PRBS} PRB columns")
    tbs = np.zeros((len(rows) - 1, MAX_TABLE_PRBS + 1), dtype=np.int32)
    for line, row in enumerate(rows[1:], start=2):
        i = _int(path, line, row[0])
        tbs[i, 1:] = [_int(path, line, v) for v in row[1:]]

    path = base / TBS_2LAYER_TABLE
    rows = _read_csv(path)
    two = {_int(path, n, r[0]): _int(path, n, r[1]) for n, r in enumerate(rows[1:], start=2)}
    return Tables(itbs, qm, tbs, two)


def itbs(mcs: int) -> int:
    """TBS index of an MCS index 0..28 (Table 7.1.7.1-1)."""
    if not 0 <= mcs <= MAX_MCS:
        raise ValueError(f"MCS {mcs} outside 0..{MAX_MCS}")
    return int(tables().itbs_by_mcs[mcs])


def modulation_order(mcs: int) -> int:
    """Bits per modulation symbol (2, 4 or 6) of an MCS index 0..31."""
    if not 0 <= mcs <= 31:
        raise ValueError(f"MCS {mcs} outside 0..31")
    return int(tables().qm_by_mcs[mcs])


def tbs_bits(mcs: int, n_prb: int, layers: int = 1) -> int:
    """Transport block size in bits for a new transmission at ``mcs`` on ``n_prb`` PRBs.

    ``n_prb`` 0 gives 0. Two layers follow 36.213 §7.1.7.2.2: N_PRB ≤ 55 reads the one-layer
    table at 2·N_PRB; N_PRB ≥ 56 maps the one-layer value through Table 7.1.7.2.2-1.
    """
    if n_prb == 0:
        return 0
    if not 1 <= n_prb <= MAX_TABLE_PRBS:
        raise ValueError(f"N_PRB {n_prb} outside 1..{MAX_TABLE_PRBS}")
    t = tables()
    row = t.tbs_1layer_bits[itbs(mcs)]
    if layers == 1:
        return int(row[n_prb])
    if layers != 2:
        raise ValueError(f"layers {layers} must be 1 or 2")
    if n_prb <= MAX_TABLE_PRBS // 2:
        return int(row[2 * n_prb])
    return t.two_layer_bits[int(row[n_prb])]


def tbs_bits_clamped(mcs: int, n_prb: int, n_rb: int, layers: int = 1) -> int:
    """As :func:`tbs_bits` with N_PRB clamped to [1, n_rb] (CLAW's capacity formula)."""
    return tbs_bits(mcs, min(max(n_prb, 1), n_rb), layers)


@lru_cache(maxsize=8)
def tbs_grid(n_rb: int, layers: int = 1) -> np.ndarray:
    """``grid[mcs, n_prb]`` = TBS bits for MCS 0..28 and N_PRB 0..n_rb (vectorised lookups)."""
    grid = np.zeros((MAX_MCS + 1, n_rb + 1), dtype=np.int64)
    for mcs in range(MAX_MCS + 1):
        for n in range(1, n_rb + 1):
            grid[mcs, n] = tbs_bits(mcs, n, layers)
    grid.setflags(write=False)
    return grid


def capacity_bits(mcs: np.ndarray, n_prb: np.ndarray, n_rb: int, layers: np.ndarray | None = None) -> np.ndarray:
    """Vectorised TBS bits per subframe for arrays of MCS and PRB counts (0 PRBs → 0 bits)."""
    mcs = np.asarray(mcs, dtype=np.intp)
    n_prb = np.asarray(n_prb, dtype=np.intp)
    bits = tbs_grid(n_rb, 1)[mcs, n_prb]
    if layers is not None:
        two = np.asarray(layers) == 2
        if two.any():
            bits = np.where(two, tbs_grid(n_rb, 2)[mcs, n_prb], bits)
    return bits


def n_rb_for_bandwidth(bandwidth_mhz: float) -> int:
    """Resource blocks of a cell of the given bandwidth (MHz)."""
    for bw, n_rb in N_RB_BY_BANDWIDTH_MHZ.items():
        if abs(bw - bandwidth_mhz) < 1e-6:
            return n_rb
    raise ValueError(f"bandwidth {bandwidth_mhz} MHz is not an LTE bandwidth ({sorted(N_RB_BY_BANDWIDTH_MHZ)})")


def n_ref(n_antennas: int) -> int:
    """Reference-signal resource elements per RB per OFDM symbol carrying them (2 or 4)."""
    if n_antennas not in (1, 2):
        raise ValueError(f"antennas {n_antennas} must be 1 or 2")
    return 2 * n_antennas


def rsrq_linear(load: float | np.ndarray, n_antennas: int) -> float | np.ndarray:
    """RSRQ (linear) of a cell whose fraction ``load`` of RBs is allocated (CLAW Eq. 6)."""
    return 1.0 / (n_ref(n_antennas) + np.asarray(load) * (N_SUBC - n_ref(n_antennas)) * n_antennas)


def load_from_rsrq(rsrq: float | np.ndarray, n_antennas: int) -> float | np.ndarray:
    """Cell load in [0, 1] from a linear RSRQ (CLAW Eq. 7, the inverse of Eq. 6, clamped)."""
    r = (1.0 / np.asarray(rsrq) - n_ref(n_antennas)) / ((N_SUBC - n_ref(n_antennas)) * n_antennas)
    return np.clip(r, 0.0, 1.0)


def db_to_linear(db: float | np.ndarray) -> float | np.ndarray:
    """Power ratio from decibels."""
    return 10.0 ** (np.asarray(db) / 10.0)


def linear_to_db(x: float | np.ndarray) -> float | np.ndarray:
    """Decibels from a power ratio."""
    return 10.0 * np.log10(x)
