"""Traces with known, simple conditions, for tests and benchmarks whose expected results
must follow from the conditions by hand (constant MCS and load; a fixed Mahimahi rate)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from clawbed.traces.io import write_trace
from clawbed.traces.schema import make_trace, new_metadata


def constant_trace(path: Path | str, *, mcs: int | np.ndarray, other_rbs: int | np.ndarray = 0,
                   other_users: int | None = None,
                   seconds: float = 10.0, bandwidth_mhz: float = 10, n_antennas: int = 2,
                   layers: int | None = None) -> Path:
    """Write a PHY trace of ``seconds`` with MCS ``mcs`` and the other users demanding
    ``other_rbs`` (each a constant, or one value per subframe, repeated to the length);
    ``layers`` (1 or 2) in every subframe if given.

    Without ``harq_fail``/``bler`` columns: the emulator's configured BLER decides failures.
    """
    rows = round(seconds * 1000)
    other = np.resize(np.asarray(other_rbs), rows)
    columns: dict[str, np.ndarray] = {"mcs": np.resize(np.asarray(mcs), rows), "other_rbs": other}
    if other_users is not None:
        columns["other_users"] = np.full(rows, other_users)
    if layers is not None:
        columns["layers"] = np.full(rows, layers)
    metadata = new_metadata(bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas, duration_ms=rows, source="synth",
                            provenance={"generator": "clawbed.emulator.scenarios.constant_trace",
                                                "mcs": mcs if np.isscalar(mcs) else "per subframe"},
                            description="constant conditions for tests and benchmarks")
    path = Path(path)
    write_trace(make_trace(metadata, **columns), path)
    return path


def constant_mahimahi_trace(path: Path | str, *, packets_per_ms: int, period_ms: int = 1000) -> Path:
    """Write a Mahimahi trace with ``packets_per_ms`` 1500-byte delivery opportunities every
    millisecond (``packets_per_ms`` × 12 Mbit/s), over a ``period_ms`` that repeats."""
    if packets_per_ms < 1:
        raise ValueError(f"packets_per_ms must be at least 1, got {packets_per_ms}")
    path = Path(path)
    # Mahimahi's timestamps start at 1: an opportunity at ms t means "during the t-th ms".
    lines = [str(t) for t in range(1, period_ms + 1) for _ in range(packets_per_ms)]
    path.write_text("\n".join(lines) + "\n")
    return path
