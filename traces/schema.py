"""The PHY trace format v1 schema: columns, types, ranges and metadata (see FORMAT.md).

This module is the Python source of truth for what a valid trace holds; the codecs
(``binary``, ``csvform``) and the validator read it rather than repeating it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from clawbed.lte import MAX_MCS, N_RB_BY_BANDWIDTH_MHZ, SFN_CYCLE

FORMAT_VERSION = 1
MAGIC = b"CBTRACE\0"
CSV_FORMAT_LINE = f"# clawbed-trace {FORMAT_VERSION}"

#: numpy dtype of each on-disk type name.
DTYPES: dict[str, np.dtype] = {
    "u8": np.dtype("<u1"),
    "u16": np.dtype("<u2"),
    "u32": np.dtype("<u4"),
    "f32": np.dtype("<f4"),
}

#: Range bound standing for "the cell's N_rb" (resolved per trace).
N_RB = "n_rb"


@dataclass(frozen=True)
class Column:
    """One column of the format: its type, whether it is required, and its valid range."""

    name: str
    dtype: str
    required: bool
    lo: float
    hi: float | str
    meaning: str

    @property
    def np_dtype(self) -> np.dtype:
        return DTYPES[self.dtype]

    @property
    def is_float(self) -> bool:
        return self.dtype == "f32"

    def upper(self, n_rb: int) -> float:
        """Inclusive upper bound for a cell of ``n_rb`` RBs."""
        return float(n_rb) if self.hi == N_RB else float(self.hi)


COLUMNS: tuple[Column, ...] = (
    Column("t_ms", "u32", True, 0, 2**32 - 1, "subframe time since trace start, ms"),
    Column("mcs", "u8", True, 0, MAX_MCS, "the UE's channel-quality MCS"),
    Column("other_rbs", "u8", True, 0, N_RB, "RBs the other users demand (B_k)"),
    Column("other_users", "u8", False, 0, 255, "active other users"),
    Column("harq_fail", "u8", False, 0, 1, "first transmission fails its CRC"),
    Column("bler", "f32", False, 0.0, 1.0, "block error rate of a first transmission"),
    Column("layers", "u8", False, 1, 2, "spatial layers of a transport block"),
    Column("rsrp_dbm", "f32", False, -140.0, -44.0, "RSRP, dBm"),
    Column("own_rbs", "u8", False, 0, N_RB, "the UE's RBs as recorded"),
    Column("own_tbs_bits", "u32", False, 0, 2**24, "the UE's TBS as recorded, bits"),
    Column("rsrq_db", "f32", False, -34.0, 3.0, "RSRQ as recorded, dB"),
    Column("ul_capacity_bits", "u32", False, 0, 2**24, "uplink capacity, bits per subframe"),
    Column("core_delay_ms", "f32", False, 0.0, 10000.0, "one-way core delay from this subframe on, ms"),
    Column("outage", "u8", False, 0, 1, "the UE's link is out (a stall: data held, then released)"),
    Column("mcs_source", "u8", False, 0, 2, "where mcs comes from: 0 the log's MCS, 1 inferred from "
           "measurements, 2 held (no measurement near)"),
)
COLUMN_BY_NAME: dict[str, Column] = {c.name: c for c in COLUMNS}
REQUIRED_COLUMNS = tuple(c.name for c in COLUMNS if c.required)


@dataclass
class Trace:
    """A PHY trace in memory: its metadata (the FORMAT.md JSON object) and its columns.

    ``columns`` maps column name → 1-D numpy array of the column's dtype, all of one length.
    """

    metadata: dict[str, Any]
    columns: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n_rb(self) -> int:
        return int(self.metadata["cell"]["n_rb"])

    @property
    def n_antennas(self) -> int:
        return int(self.metadata["cell"]["n_antennas"])

    @property
    def duration_ms(self) -> int:
        return len(self.columns["t_ms"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.columns[name]

    def get(self, name: str) -> np.ndarray | None:
        return self.columns.get(name)

    def sfn_subframe(self) -> tuple[np.ndarray, np.ndarray]:
        """(SFN, subframe number) of every row."""
        t = self.columns["t_ms"].astype(np.int64)
        return (self.metadata.get("start_sfn", 0) + t // 10) % SFN_CYCLE, t % 10


def new_metadata(
    *,
    bandwidth_mhz: float,
    n_antennas: int,
    duration_ms: int,
    source: str,
    provenance: dict[str, Any],
    description: str = "",
    start_sfn: int = 0,
) -> dict[str, Any]:
    """A metadata object for a new trace, N_rb derived from the bandwidth."""
    n_rb = N_RB_BY_BANDWIDTH_MHZ.get(bandwidth_mhz)
    if n_rb is None:
        raise ValueError(f"bandwidth {bandwidth_mhz} MHz is not an LTE bandwidth")
    return {
        "format_version": FORMAT_VERSION,
        "cell": {"bandwidth_mhz": bandwidth_mhz, "n_rb": n_rb, "n_antennas": n_antennas},
        "duration_ms": duration_ms,
        "start_sfn": start_sfn,
        "source": source,
        "provenance": provenance,
        "description": description,
    }


def make_trace(metadata: dict[str, Any], **columns: np.ndarray) -> Trace:
    """A trace from metadata and column arrays (cast to their dtypes; ``t_ms`` added if absent)."""
    n = len(next(iter(columns.values())))
    cols = {"t_ms": np.arange(n, dtype=DTYPES["u32"])}
    for name, values in columns.items():
        if name not in COLUMN_BY_NAME:
            raise ValueError(f"unknown trace column {name!r}")
        cols[name] = np.ascontiguousarray(values, dtype=COLUMN_BY_NAME[name].np_dtype)
    metadata = dict(metadata, duration_ms=n)
    return Trace(metadata, cols)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str | bytes) -> Any:
    """Parse JSON as the format means it (RFC 8259): Python's json also takes NaN and
    Infinity, which other readers (serde_json) refuse, so they are refused here too."""
    return json.loads(text, parse_constant=_reject_constant)
