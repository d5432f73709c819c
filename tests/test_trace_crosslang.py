"""Python and Rust (``cbtrace``) read and write the same traces the same way.

``cbtrace summary FILE`` prints rows, metadata and per-column {sum, min, max}; integer
sums are exact and float sums are ``math.fsum`` of the f32 values, so both sides compare
exactly. The Rust binary must have been built: the tests fail, not skip, without it.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# The broken and accepted files of the validator's table: both languages must agree on each.
from test_trace_validate import ACCEPTED, CASES, Case, broken_bytes, good_file

from clawbed.traces import binary
from clawbed.traces.bench import CBTRACE, realistic_trace
from clawbed.traces.io import read_trace, write_trace
from clawbed.traces.schema import COLUMN_BY_NAME, Trace
from clawbed.traces.validate import validate_file

ROWS = 100_000


@pytest.fixture(scope="module")
def trace() -> Trace:
    return realistic_trace(ROWS, bandwidth_mhz=15, n_antennas=2)


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run ``cbtrace ARGS``; a missing binary fails the calling test (it is not a reason to skip)."""
    if not CBTRACE.is_file():
        pytest.fail(f"{CBTRACE} not found: run make build (cargo build --release -p phy-trace)", pytrace=False)
    return subprocess.run([str(CBTRACE), *map(str, args)], capture_output=True, text=True, timeout=120)


def rust_summary(path: Path) -> dict[str, Any]:
    done = run("summary", path)
    assert done.returncode == 0, f"cbtrace summary {path} failed: {done.stderr}"
    return json.loads(done.stdout)


def assert_summary_matches(summary: dict[str, Any], trace: Trace) -> None:
    """Rust's summary of a file equals numpy's view of ``trace``: rows, metadata, sums, extremes."""
    assert summary["rows"] == trace.duration_ms
    assert summary["metadata"] == trace.metadata
    assert set(summary["columns"]) == set(trace.columns)
    for name, values in trace.columns.items():
        rust = summary["columns"][name]
        if COLUMN_BY_NAME[name].is_float:
            wide = values.astype(np.float64)
            expected = {"sum": math.fsum(wide), "min": float(wide.min()), "max": float(wide.max())}
        else:
            expected = {"sum": int(values.sum(dtype=np.uint64)), "min": int(values.min()),
                        "max": int(values.max())}
        assert rust == expected, name


@pytest.mark.parametrize("suffix", [".cbt", ".csv"])
@pytest.mark.parametrize("variant", ["bler", "harq_fail"])
def test_rust_reads_what_python_writes(tmp_path: Path, trace: Trace, suffix: str,
                                       variant: str) -> None:
    written = trace if variant == "bler" else realistic_trace(ROWS, bandwidth_mhz=15, errors=variant)
    path = tmp_path / f"py{suffix}"
    write_trace(written, path)
    assert_summary_matches(rust_summary(path), written)


@pytest.mark.parametrize("encoding", binary.ENCODINGS)
def test_rust_reads_every_encoding(tmp_path: Path, trace: Trace, encoding: str) -> None:
    encodings = {n: encoding for n in trace.columns
                 if encoding != "delta-zstd" or not COLUMN_BY_NAME[n].is_float}
    f = io.BytesIO()
    binary.write(trace, f, encodings)
    path = tmp_path / f"{encoding}.cbt"
    path.write_bytes(f.getvalue())
    assert_summary_matches(rust_summary(path), trace)


@pytest.mark.parametrize(("source", "target"), [(".cbt", ".cbt"), (".cbt", ".csv"), (".csv", ".cbt")])
def test_python_reads_what_rust_converts(tmp_path: Path, trace: Trace, source: str,
                                         target: str) -> None:
    a, b = tmp_path / f"a{source}", tmp_path / f"b{target}"
    write_trace(trace, a)
    done = run("convert", a, b)
    assert done.returncode == 0, f"cbtrace convert failed: {done.stderr}"
    back = read_trace(b)
    assert back.metadata == trace.metadata
    assert set(back.columns) == set(trace.columns)
    for name, values in trace.columns.items():
        assert back[name].tobytes() == values.tobytes(), name


def test_rust_load_is_reported(tmp_path: Path, trace: Trace) -> None:
    path = tmp_path / "t.cbt"
    write_trace(trace, path)
    seconds = rust_summary(path)["load_seconds"]
    assert isinstance(seconds, float) and seconds >= 0


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
def test_rust_rejects_every_broken_file_python_rejects(tmp_path: Path, case: Case) -> None:
    path = tmp_path / f"broken{case.suffix}"
    path.write_bytes(broken_bytes(case))
    assert validate_file(path)
    done = run("summary", path)
    assert done.returncode != 0, f"cbtrace accepted a file Python rejects ({case.kind}): {done.stdout[:200]}"


@pytest.mark.parametrize(("kind", "suffix", "change"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_rust_accepts_every_variant_python_accepts(tmp_path: Path, kind: str, suffix: str,
                                                    change: Callable[[bytes], bytes]) -> None:
    path = tmp_path / f"variant{suffix}"
    path.write_bytes(change(good_file(suffix)))
    assert validate_file(path) == []
    assert_summary_matches(rust_summary(path), read_trace(path))
