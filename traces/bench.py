"""Benchmark of the binary trace format: size and load time of a one-hour all-columns trace.

``python -m clawbed.traces.bench`` writes a realistic 3.6 M-row trace, measures its file
size, the Python load time (``read_trace``, which validates) and the Rust load time
(``cbtrace summary``'s ``load_seconds``), prints a table and writes
``bench-results/traces.json`` under the repository root.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

from clawbed.lte import capacity_bits, linear_to_db, rsrq_linear
from clawbed.paths import REPO_ROOT
from clawbed.traces.io import read_trace, write_trace
from clawbed.traces.schema import Trace, make_trace, new_metadata

ONE_HOUR_MS = 3_600_000
#: The Rust tool, built by ``make build`` (``cargo build --release -p phy-trace``).
CBTRACE = REPO_ROOT / "target" / "release" / "cbtrace"
RESULTS = REPO_ROOT / "bench-results" / "traces.json"
#: Load-time repeats; the best is reported (the others measure the page cache and the OS).
REPEATS = 3


def _runs(rng: np.random.Generator, n: int, mean_run: float, values: np.ndarray) -> np.ndarray:
    """``n`` samples holding each draw from ``values`` for a geometric run (mean ``mean_run``)."""
    lengths = rng.geometric(1.0 / mean_run, size=int(n / mean_run * 1.5) + 16)
    draws = rng.choice(values, size=len(lengths))
    return np.repeat(draws, lengths)[:n]


def realistic_trace(duration_ms: int = ONE_HOUR_MS, seed: int = 1, bandwidth_mhz: float = 20,
                    n_antennas: int = 2, errors: str = "bler") -> Trace:
    """A trace with every column and values that vary as recorded ones do.

    ``errors`` is the column carrying transmission errors, ``bler`` or ``harq_fail`` (a
    trace has one or the other). MCS follows a slow random walk with per-subframe jitter;
    other users' demand is polarised (bursts near the whole cell, idle near zero); RSRP
    and RSRQ are quantised as UEs report them and change every 40 ms measurement period;
    the core delay is piecewise constant.
    """
    rng = np.random.default_rng(seed)
    n = duration_ms
    md = new_metadata(bandwidth_mhz=bandwidth_mhz, n_antennas=n_antennas, duration_ms=n,
                      source="synth", provenance={"generator": "clawbed.traces.bench", "seed": seed},
                      description="benchmark trace: all columns, realistic variation")
    n_rb = md["cell"]["n_rb"]

    # Channel quality: a walk of ~0.4 MCS per 100 ms, reflected into 2..26, plus ±1 jitter.
    walk = np.cumsum(rng.normal(0.0, 0.04, n)) + 16.0
    walk = 2.0 + np.abs((walk - 2.0) % 48.0 - 24.0)
    mcs = np.clip(np.rint(walk) + rng.choice([-1, 0, 0, 0, 0, 0, 0, 1], n), 0, 28).astype(np.uint8)

    busy = _runs(rng, n, 40.0, np.array([False, True]))
    other_rbs = np.where(busy, rng.integers(int(0.7 * n_rb), n_rb + 1, n), rng.integers(0, 4, n))
    other_users = np.where(busy, _runs(rng, n, 500.0, np.arange(1, 9)), 0)
    own_rbs = np.minimum(_runs(rng, n, 8.0, np.array([0, 0, 2, 6, 12, 25, n_rb])), n_rb - other_rbs)
    layers = _runs(rng, n, 2000.0, np.array([1, 2]))
    own_tbs_bits = capacity_bits(mcs, own_rbs, n_rb, layers)
    # BLER around the 10 % target, worse while the channel is dropping; in 0.01 steps.
    bler = np.clip(0.1 - 2.0 * np.diff(walk, prepend=walk[0]) + rng.normal(0, 0.02, n), 0, 1)
    bler = (np.round(bler * 100) / 100).astype(np.float32)
    error_column: dict[str, Any]
    if errors == "harq_fail":
        error_column = {"harq_fail": rng.random(n) < bler}
    elif errors == "bler":
        error_column = {"bler": bler}
    else:
        raise ValueError(f"errors must be bler or harq_fail, not {errors!r}")

    periods = -(-n // 40)
    rsrp = np.cumsum(rng.normal(0, 0.3, periods)) - 95.0
    rsrp = np.clip(np.round(np.repeat(rsrp, 40)[:n] * 16) / 16, -140.0, -44.0)  # 1/16 dB steps
    load = np.repeat((other_rbs + own_rbs)[::40] / n_rb, 40)[:n]
    rsrq = np.clip(np.round(linear_to_db(rsrq_linear(load, n_antennas)) * 2) / 2, -34.0, 3.0)  # 0.5 dB
    ul_capacity_bits = capacity_bits(np.clip(mcs.astype(int) - 4, 0, 20), _runs(rng, n, 50.0, np.arange(1, 26)), n_rb)
    core_delay_ms = _runs(rng, n, 10_000.0, np.arange(10.0, 40.0, 0.5))
    # Radio-link outages: runs of ~0.3 s, about one subframe in twenty outside coverage.
    outage = _runs(rng, n, 300.0, np.array([0] * 19 + [1])).astype(np.uint8)
    # An imported log's MCS marks: measured in short bursts, inferred or held between.
    mcs_source = _runs(rng, n, 200.0, np.array([0, 1, 1, 1, 2])).astype(np.uint8)

    return make_trace(md, mcs=mcs, other_rbs=other_rbs, other_users=other_users, **error_column,
                      layers=layers, rsrp_dbm=rsrp, own_rbs=own_rbs, own_tbs_bits=own_tbs_bits,
                      rsrq_db=rsrq, ul_capacity_bits=ul_capacity_bits, core_delay_ms=core_delay_ms,
                      outage=outage, mcs_source=mcs_source)


def rust_summary(path: Path) -> dict[str, Any]:
    """``cbtrace summary PATH`` as parsed JSON (raises FileNotFoundError if not built)."""
    if not CBTRACE.is_file():
        raise FileNotFoundError(f"{CBTRACE} not found: run make build")
    done = subprocess.run([str(CBTRACE), "summary", str(path)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"cbtrace summary {path} exited {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def run(duration_ms: int = ONE_HOUR_MS) -> dict[str, Any]:
    """Measure and return the results (sizes in bytes and MB, times in s)."""
    trace = realistic_trace(duration_ms)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.cbt"
        start = time.perf_counter()
        write_trace(trace, path)
        write_s = time.perf_counter() - start
        load_s = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            read_trace(path)
            load_s.append(time.perf_counter() - start)
        rust: dict[str, Any] = {"rust_load_s": None, "rust_error": None}
        try:
            rust["rust_load_s"] = min(rust_summary(path)["load_seconds"] for _ in range(REPEATS))
        except (FileNotFoundError, RuntimeError, KeyError, ValueError) as e:
            rust["rust_error"] = str(e)
        size = path.stat().st_size
    return {
        "rows": duration_ms,
        "columns": list(trace.columns),
        "file_bytes": size,
        "file_mb": round(size / 1e6, 2),
        "raw_mb": round(sum(c.nbytes for c in trace.columns.values()) / 1e6, 2),
        "python_write_s": round(write_s, 3),
        "python_load_s": round(min(load_s), 3),
        **rust,
    }


@click.command()
@click.option("--seconds", type=click.IntRange(min=1), default=ONE_HOUR_MS // 1000, show_default=True,
              help="Trace duration, s.")
def main(seconds: int) -> None:
    """Write a realistic all-columns trace and report its size and load times."""
    results = run(seconds * 1000)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    rust = (f"{results['rust_load_s']:.3f} s" if results["rust_load_s"] is not None
            else f"n/a ({results['rust_error']})")
    rows = [
        ("rows", f"{results['rows']:,} ({len(results['columns'])} columns)"),
        ("file size", f"{results['file_mb']} MB (raw {results['raw_mb']} MB)"),
        ("Python write", f"{results['python_write_s']:.3f} s"),
        ("Python load", f"{results['python_load_s']:.3f} s (best of {REPEATS}, with validation)"),
        ("Rust load", rust),
    ]
    for label, value in rows:
        click.echo(f"{label:14} {value}")
    click.echo(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
