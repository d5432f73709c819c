"""The trace codecs: round trips of every column type and encoding, atomic writes, sniffing."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from clawbed.errors import InputError
from clawbed.traces import binary
from clawbed.traces.bench import ONE_HOUR_MS, realistic_trace
from clawbed.traces.io import TraceFormatError, read_trace, write_trace
from clawbed.traces.schema import COLUMN_BY_NAME, Trace, make_trace

#: Every format dtype that a column uses (u16 has no column in version 1).
COLUMN_DTYPES = {"u8", "u32", "f32"}


def assert_same(a: Trace, b: Trace) -> None:
    """Same metadata and columns, bit-identical values of the format dtypes; ``b`` in schema order."""
    assert a.metadata == b.metadata
    assert set(a.columns) == set(b.columns)
    assert list(b.columns) == [n for n in COLUMN_BY_NAME if n in b.columns]
    for name, values in a.columns.items():
        assert b[name].dtype == COLUMN_BY_NAME[name].np_dtype, name
        assert values.tobytes() == b[name].tobytes(), name


@pytest.fixture(scope="module")
def trace() -> Trace:
    return realistic_trace(5000, bandwidth_mhz=10, n_antennas=1)


def test_realistic_trace_covers_every_column_and_dtype(trace: Trace) -> None:
    assert set(trace.columns) | {"harq_fail"} == set(COLUMN_BY_NAME)
    assert {COLUMN_BY_NAME[n].dtype for n in trace.columns} == COLUMN_DTYPES


@pytest.mark.parametrize("suffix", [".cbt", ".csv"])
@pytest.mark.parametrize("variant", ["bler", "harq_fail"])
def test_round_trip(tmp_path: Path, trace: Trace, suffix: str, variant: str) -> None:
    original = trace if variant == "bler" else realistic_trace(5000, bandwidth_mhz=10, n_antennas=1, errors=variant)
    path = tmp_path / f"t{suffix}"
    write_trace(original, path)
    assert_same(original, read_trace(path))


def test_cbt_to_csv_to_cbt_is_byte_identical(tmp_path: Path, trace: Trace) -> None:
    write_trace(trace, tmp_path / "a.cbt")
    write_trace(read_trace(tmp_path / "a.cbt"), tmp_path / "b.csv")
    write_trace(read_trace(tmp_path / "b.csv"), tmp_path / "c.cbt")
    assert (tmp_path / "a.cbt").read_bytes() == (tmp_path / "c.cbt").read_bytes()


@pytest.mark.parametrize("encoding", binary.ENCODINGS)
def test_every_encoding_round_trips(tmp_path: Path, trace: Trace, encoding: str) -> None:
    # delta-zstd is for integer columns; the float columns keep the default there.
    encodings = {n: encoding for n in trace.columns
                 if encoding != "delta-zstd" or not COLUMN_BY_NAME[n].is_float}
    f = io.BytesIO()
    binary.write(trace, f, encodings)
    path = tmp_path / "t.cbt"
    path.write_bytes(f.getvalue())
    assert_same(trace, read_trace(path))


def test_delta_encoding_wraps(tmp_path: Path, trace: Trace) -> None:
    # Values that go down give deltas that wrap around the unsigned dtype.
    cols = {n: v for n, v in trace.columns.items() if n != "t_ms"}
    cols["ul_capacity_bits"] = np.resize(np.array([2**24, 0, 7, 2**24, 1], dtype=np.uint32), trace.duration_ms)
    cols["mcs"] = np.resize(np.array([28, 0, 27, 1], dtype=np.uint8), trace.duration_ms)
    wrapped = make_trace(trace.metadata, **cols)
    f = io.BytesIO()
    binary.write(wrapped, f, {"ul_capacity_bits": "delta-zstd", "mcs": "delta-zstd"})
    (tmp_path / "w.cbt").write_bytes(f.getvalue())
    assert_same(wrapped, read_trace(tmp_path / "w.cbt"))


def test_delta_encoding_of_a_float_column_is_refused(trace: Trace) -> None:
    with pytest.raises(InputError, match="delta-zstd is for integer columns"):
        binary.write(trace, io.BytesIO(), {"bler": "delta-zstd"})


@pytest.mark.parametrize("suffix", [".cbt", ".csv"])
def test_floats_round_trip_exactly(tmp_path: Path, trace: Trace, suffix: str) -> None:
    awkward = np.array([0.1, 1 / 3, 1e-7, 1e-45, 0.99999994, 1.0, 0.0, 2**-20], dtype=np.float32)
    cols = {n: v for n, v in trace.columns.items() if n != "t_ms"}
    cols["bler"] = np.resize(awkward, trace.duration_ms)
    cols["rsrq_db"] = np.resize(np.float32(-34.0) + awkward * 37, trace.duration_ms)
    original = make_trace(trace.metadata, **cols)
    write_trace(original, tmp_path / f"f{suffix}")
    assert_same(original, read_trace(tmp_path / f"f{suffix}"))


def test_read_columns_are_writable_arrays(tmp_path: Path, trace: Trace) -> None:
    write_trace(trace, tmp_path / "t.cbt")
    read = read_trace(tmp_path / "t.cbt")
    for values in read.columns.values():
        assert values.flags.writeable and values.flags.c_contiguous


@pytest.mark.parametrize("name", ["trace", "trace.bin", "trace.TRACE"])
@pytest.mark.parametrize("source", [".cbt", ".csv"])
def test_unknown_suffix_is_sniffed(tmp_path: Path, trace: Trace, name: str, source: str) -> None:
    write_trace(trace, tmp_path / f"t{source}")
    (tmp_path / name).write_bytes((tmp_path / f"t{source}").read_bytes())
    assert_same(trace, read_trace(tmp_path / name))


def test_unknown_content_without_a_known_suffix(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(TraceFormatError, match=r"unknown suffix '\.txt'") as e:
        read_trace(path)
    assert e.value.defects[0].file == str(path)


def test_suffix_decides_over_content(tmp_path: Path, trace: Trace) -> None:
    write_trace(trace, tmp_path / "t.cbt")
    wrong = tmp_path / "t.csv"
    wrong.write_bytes((tmp_path / "t.cbt").read_bytes())
    with pytest.raises(TraceFormatError, match=r"t\.csv:line 1: this is a binary \.cbt trace"):
        read_trace(wrong)


def test_uppercase_suffix(tmp_path: Path, trace: Trace) -> None:
    write_trace(trace, tmp_path / "T.CSV")
    assert (tmp_path / "T.CSV").read_text().startswith("# clawbed-trace 1\n")
    assert_same(trace, read_trace(tmp_path / "T.CSV"))


def test_write_refuses_an_unknown_suffix(tmp_path: Path, trace: Trace) -> None:
    with pytest.raises(InputError, match=r"unknown suffix '\.parquet'"):
        write_trace(trace, tmp_path / "t.parquet")
    assert not list(tmp_path.iterdir())


def test_write_refuses_a_trace_with_defects(tmp_path: Path, trace: Trace) -> None:
    cols = {n: v for n, v in trace.columns.items() if n != "t_ms"}
    cols["mcs"] = np.where(np.arange(trace.duration_ms) == 7, 31, trace["mcs"])
    with pytest.raises(TraceFormatError, match=r"(?s)not writing .*t\.cbt:row 7: mcs: 31 outside 0\.\.28"):
        write_trace(make_trace(trace.metadata, **cols), tmp_path / "t.cbt")
    assert not list(tmp_path.iterdir())


def test_write_refuses_values_that_the_dtype_would_wrap(tmp_path: Path, trace: Trace) -> None:
    # 300 cast to u8 would be 44, a valid count: the check runs before the cast.
    columns = dict(trace.columns, other_users=np.full(trace.duration_ms, 300, dtype=np.int64))
    with pytest.raises(TraceFormatError, match=r"other_users: 300 outside 0\.\.255"):
        write_trace(Trace(trace.metadata, columns), tmp_path / "t.csv")


@pytest.mark.parametrize("suffix", [".cbt", ".csv"])
def test_interrupted_write_leaves_nothing(tmp_path: Path, trace: Trace, suffix: str,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    module = "binary" if suffix == ".cbt" else "csvform"

    def half_write(_trace: Trace, f: io.IOBase) -> None:
        f.write(b"CBTRACE\0" if suffix == ".cbt" else "# clawbed-trace 1\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(f"clawbed.traces.{module}.write", half_write)
    with pytest.raises(KeyboardInterrupt):
        write_trace(trace, tmp_path / f"t{suffix}")
    assert not list(tmp_path.iterdir())


def test_interrupted_overwrite_keeps_the_old_file(tmp_path: Path, trace: Trace,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.cbt"
    write_trace(trace, path)
    before = path.read_bytes()

    def failing_write(_trace: Trace, f: io.IOBase) -> None:
        f.write(b"CBTRACE\0")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("clawbed.traces.binary.write", failing_write)
    with pytest.raises(InputError, match=r"cannot write .*t\.cbt: No space left on device"):
        write_trace(trace, path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["t.cbt"]


def test_write_into_a_missing_directory(tmp_path: Path, trace: Trace) -> None:
    with pytest.raises(InputError, match=r"cannot write .*nowhere/t\.cbt: No such file or directory"):
        write_trace(trace, tmp_path / "nowhere" / "t.cbt")


def test_new_files_get_the_usual_permissions(tmp_path: Path, trace: Trace) -> None:
    path = tmp_path / "t.cbt"
    write_trace(trace, path)
    reference = tmp_path / "reference"
    reference.write_bytes(b"")
    assert path.stat().st_mode == reference.stat().st_mode


def test_one_hour_trace(tmp_path: Path) -> None:
    """A 3.6 M-row all-columns trace survives a write and a read (sizes checked, not times)."""
    hour = realistic_trace(ONE_HOUR_MS)
    path = tmp_path / "hour.cbt"
    write_trace(hour, path)
    assert path.stat().st_size < 30e6
    back = read_trace(path)
    assert back.duration_ms == ONE_HOUR_MS
    assert_same(hour, back)
