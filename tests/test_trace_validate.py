"""The validator: one table of broken traces, each made from a good one by corrupting bytes or text.

Every case names the defect it must produce: row (``.cbt``, 0-based) or line (``.csv``),
field and a message fragment; and how many defects the file has in all, so that one
corruption does not drown in follow-on noise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pytest
import zstandard

from clawbed.traces.bench import realistic_trace
from clawbed.traces.io import TraceFormatError, read_trace, write_trace
from clawbed.traces.schema import Trace
from clawbed.traces.validate import Defect, validate_file

ROWS = 50
#: Line of the CSV file holding row i: three header lines, then rows.
FIRST_ROW_LINE = 4
CLAWBED = Path(sys.executable).parent / "clawbed"


@cache
def good_trace(errors: str = "bler") -> Trace:
    """A valid 10 MHz (N_rb 50) trace of ROWS rows with every column, bler or harq_fail."""
    return realistic_trace(ROWS, bandwidth_mhz=10, n_antennas=2, errors=errors)


@cache
def good_file(suffix: str, errors: str = "bler") -> bytes:
    """The bytes of ``good_trace(errors)`` written as ``suffix``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"good{suffix}"
        write_trace(good_trace(errors), path)
        return path.read_bytes()


# --- corrupting .cbt bytes ---------------------------------------------------------------

def split_cbt(data: bytes) -> tuple[dict, list[bytes]]:
    """(JSON header, column blocks) of a well-formed .cbt file."""
    header_len = int.from_bytes(data[12:16], "little")
    header = json.loads(data[16:16 + header_len])
    blocks, offset = [], 16 + header_len
    for entry in header["columns"]:
        blocks.append(data[offset:offset + entry["stored_bytes"]])
        offset += entry["stored_bytes"]
    return header, blocks


def join_cbt(header: dict, blocks: list[bytes]) -> bytes:
    text = json.dumps(header).encode()
    return b"CBTRACE\0" + (1).to_bytes(2, "little") + b"\0\0" + len(text).to_bytes(4, "little") + text + b"".join(blocks)


def edit_header(edit: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    """A corruption that edits the JSON header (blocks unchanged)."""
    def corrupt(data: bytes) -> bytes:
        header, blocks = split_cbt(data)
        edit(header)
        return join_cbt(header, blocks)
    return corrupt


def edit_metadata(edit: Callable[[dict], None]) -> Callable[[bytes], bytes]:
    return edit_header(lambda header: edit(header["metadata"]))


def edit_entry(column: str, **changes: object) -> Callable[[bytes], bytes]:
    def edit(header: dict) -> None:
        entry = next(e for e in header["columns"] if e["name"] == column)
        entry.update(changes)
    return edit_header(edit)


def edit_values(name: str, edit: Callable[[np.ndarray], np.ndarray]) -> Callable[[bytes], bytes]:
    """A corruption that rewrites one zstd column's values (re-encoded raw, CRC updated)."""
    def corrupt(data: bytes) -> bytes:
        header, blocks = split_cbt(data)
        i = next(i for i, e in enumerate(header["columns"]) if e["name"] == name)
        entry = header["columns"][i]
        assert entry["encoding"] == "zstd"
        dtype = {"u8": np.uint8, "u32": np.uint32, "f32": np.float32}[entry["dtype"]]
        values = np.ascontiguousarray(edit(np.frombuffer(zstandard.ZstdDecompressor().decompress(blocks[i]), dtype)), dtype)
        blocks[i] = values.tobytes()
        entry.update(encoding="raw", stored_bytes=len(blocks[i]), crc32=zlib.crc32(blocks[i]))
        return join_cbt(header, blocks)
    return corrupt


def drop_column(name: str) -> Callable[[bytes], bytes]:
    def corrupt(data: bytes) -> bytes:
        header, blocks = split_cbt(data)
        i = next(i for i, e in enumerate(header["columns"]) if e["name"] == name)
        del header["columns"][i], blocks[i]
        return join_cbt(header, blocks)
    return corrupt


def set_rows(rows: list[int], value: float) -> Callable[[np.ndarray], np.ndarray]:
    def edit(values: np.ndarray) -> np.ndarray:
        values = values.copy()
        values[rows] = value
        return values
    return edit


def cut_into_block(name: str, keep_bytes: int) -> Callable[[bytes], bytes]:
    """Truncate the file ``keep_bytes`` into the block of column ``name``."""
    def corrupt(data: bytes) -> bytes:
        header, blocks = split_cbt(data)
        i = next(i for i, e in enumerate(header["columns"]) if e["name"] == name)
        return join_cbt(header, blocks[:i]) + blocks[i][:keep_bytes]
    return corrupt


def set_bytes(offset: int, new: bytes) -> Callable[[bytes], bytes]:
    return lambda data: data[:offset] + new + data[offset + len(new):]


# --- corrupting CSV text -----------------------------------------------------------------

def set_cell(line: int, column: str, value: str) -> Callable[[str], str]:
    """Set the cell of ``column`` on file line ``line`` (1-based)."""
    def corrupt(text: str) -> str:
        lines = text.split("\n")
        fields = lines[line - 1].split(",")
        fields[lines[2].split(",").index(column)] = value
        lines[line - 1] = ",".join(fields)
        return "\n".join(lines)
    return corrupt


def set_line(line: int, edit: Callable[[str], str]) -> Callable[[str], str]:
    def corrupt(text: str) -> str:
        lines = text.split("\n")
        lines[line - 1] = edit(lines[line - 1])
        return "\n".join(lines)
    return corrupt


def csv_metadata(edit: Callable[[dict], None]) -> Callable[[str], str]:
    def edit_line(line: str) -> str:
        metadata = json.loads(line[2:])
        edit(metadata)
        return "# " + json.dumps(metadata)
    return set_line(2, edit_line)


def map_column(column: str, edit: Callable[[int, str], str]) -> Callable[[str], str]:
    """Replace every cell of ``column`` by ``edit(row, text)``."""
    def corrupt(text: str) -> str:
        lines = text.split("\n")
        j = lines[2].split(",").index(column)
        for k in range(FIRST_ROW_LINE - 1, len(lines)):
            if lines[k]:
                fields = lines[k].split(",")
                fields[j] = edit(k - FIRST_ROW_LINE + 1, fields[j])
                lines[k] = ",".join(fields)
        return "\n".join(lines)
    return corrupt


def drop_csv_column(column: str) -> Callable[[str], str]:
    def corrupt(text: str) -> str:
        lines = text.split("\n")
        j = lines[2].split(",").index(column)
        for k in range(2, len(lines)):
            if lines[k]:
                fields = lines[k].split(",")
                del fields[j]
                lines[k] = ",".join(fields)
        return "\n".join(lines)
    return corrupt


def add_csv_column(column: str, value: str) -> Callable[[str], str]:
    def corrupt(text: str) -> str:
        lines = text.split("\n")
        lines[2] += f",{column}"
        for k in range(FIRST_ROW_LINE - 1, len(lines)):
            if lines[k]:
                lines[k] += f",{value}"
        return "\n".join(lines)
    return corrupt


def drop_last_row(text: str) -> str:
    return text.rstrip("\n").rsplit("\n", 1)[0] + "\n"


def line_of(row: int) -> int:
    return FIRST_ROW_LINE + row


@dataclass(frozen=True)
class Case:
    """A broken trace: the good file of ``suffix`` with ``corrupt`` applied, and the defect it must report."""

    kind: str
    suffix: str
    corrupt: Callable[[bytes], bytes] | Callable[[str], str]
    row: int | None
    line: int | None
    field: str | None
    fragment: str
    defects: int = 1
    base: str = "bler"


CBT, CSV = ".cbt", ".csv"
CASES = [
    # Whole-file structure (.cbt bytes).
    Case("empty file", CBT, lambda d: b"", None, None, None, "empty file"),
    Case("bad magic", CBT, set_bytes(0, b"CBTRACF"), None, None, None, "bad magic b'CBTRACF\\x00'"),
    Case("unknown format version", CBT, set_bytes(8, b"\x02\x00"), None, None, "format_version",
         "2 is not supported (this reader: 1)"),
    Case("truncated header", CBT, lambda d: d[:40], None, None, None, "truncated: the"),
    Case("header not JSON", CBT, set_bytes(16, b"["), None, None, None, "not valid JSON"),
    Case("truncated inside the fixed header", CBT, lambda d: d[:12], None, None, None,
         "truncated: 12 bytes"),
    Case("truncated last block", CBT, lambda d: d[:-3], None, None, "mcs_source", "truncated"),
    Case("truncated mid-file", CBT, cut_into_block("mcs", 5), None, None, "mcs",
         "the blocks of other_rbs, other_users, bler"),
    Case("bytes after the last block", CBT, lambda d: d + b"junk", None, None, None,
         "4 bytes after the last block"),
    Case("CRC mismatch", CBT, edit_entry("mcs", crc32=12345), None, None, "mcs",
         "CRC-32 mismatch: the header says 0x00003039"),
    Case("block not zstd", CBT, lambda d: edit_entry("mcs", encoding="zstd")(edit_values("mcs", lambda v: v)(d)),
         None, None, "mcs", "cannot be decompressed"),
    Case("unknown key in the JSON header", CBT, edit_header(lambda h: h.update(comment="x")), None, None,
         None, "unknown key(s) 'comment' in the JSON header"),
    Case("unknown key in a column entry", CBT, edit_entry("mcs", level=3), None, None, "mcs",
         "unknown key(s) 'level' in the column entry"),
    Case("dtype mismatch", CBT, edit_entry("mcs", dtype="u16"), None, None, "mcs", "dtype 'u16', expected 'u8'"),
    Case("unknown encoding", CBT, edit_entry("layers", encoding="lz4"), None, None, "layers",
         "unknown encoding 'lz4'"),
    Case("delta of a float column", CBT, edit_entry("rsrp_dbm", encoding="delta-zstd"), None, None,
         "rsrp_dbm", "delta-zstd is for integer columns"),
    Case("unknown column", CBT, edit_entry("other_users", name="other_user"), None, None, "other_user",
         "unknown column"),
    Case("missing required column", CBT, drop_column("other_rbs"), None, None, "other_rbs",
         "required column missing"),
    Case("column shorter than duration_ms", CBT, edit_values("layers", lambda v: v[:-1]), None, None,
         "layers", f"holds {ROWS - 1} values, the trace has {ROWS} rows"),
    Case("duration_ms not the row count", CBT, edit_metadata(lambda m: m.update(duration_ms=ROWS + 2)),
         None, None, "duration_ms", f"is {ROWS + 2} but the columns hold {ROWS} rows"),
    # Metadata.
    Case("metadata unknown key", CBT, edit_metadata(lambda m: m.update(descripton="typo")), None, None,
         "descripton", "unknown metadata key"),
    Case("metadata unknown cell key", CBT, edit_metadata(lambda m: m["cell"].update(n_rbs=50)), None, None,
         "cell.n_rbs", "unknown metadata key"),
    Case("source not one word", CBT, edit_metadata(lambda m: m.update(source="my phone")), None, None,
         "source", "'my phone' must be one short word"),
    Case("metadata missing key", CBT, edit_metadata(lambda m: m.pop("source")), None, None, "source",
         "missing from the metadata"),
    Case("metadata wrong type", CBT, edit_metadata(lambda m: m["cell"].update(n_antennas="2")), None, None,
         "cell.n_antennas", "must be an integer, found string '2'"),
    Case("metadata format_version", CBT, edit_metadata(lambda m: m.update(format_version=2)), None, None,
         "format_version", "is 2"),
    Case("start_sfn out of range", CBT, edit_metadata(lambda m: m.update(start_sfn=1024)), None, None,
         "start_sfn", "1024 outside 0..1023"),
    Case("unknown N_rb", CBT, edit_metadata(lambda m: m["cell"].update(n_rb=52)), None, None, "cell.n_rb",
         "52 is not an LTE cell size"),
    Case("N_rb not matching the bandwidth", CBT, edit_metadata(lambda m: m["cell"].update(n_rb=100)), None,
         None, "cell.n_rb", "100 does not match bandwidth_mhz 10 (50 RBs)"),
    Case("unknown bandwidth", CBT, edit_metadata(lambda m: m["cell"].update(bandwidth_mhz=7)), None, None,
         "cell.bandwidth_mhz", "7 is not an LTE bandwidth"),
    Case("antennas not 1 or 2", CBT, edit_metadata(lambda m: m["cell"].update(n_antennas=4)), None, None,
         "cell.n_antennas", "4 antennas; must be 1 or 2"),
    # Per-row values (.cbt rows are 0-based).
    Case("MCS out of range, rows aggregated", CBT, edit_values("mcs", set_rows([5, 9, 12], 31)), 5, None,
         "mcs", "31 outside 0..28 at rows 5, 9, 12 (3 rows)"),
    Case("MCS out of range, many rows", CBT, edit_values("mcs", set_rows(list(range(10, 40)), 29)), 10, None,
         "mcs", "29 outside 0..28 at rows 10, 11, 12 … (30 rows)"),
    Case("other_rbs above N_rb", CBT, edit_values("other_rbs", set_rows([3], 51)), 3, None, "other_rbs",
         "51 outside 0..50 (N_rb)"),
    Case("own_rbs above N_rb", CBT, edit_values("own_rbs", set_rows([4], 60)), 4, None, "own_rbs",
         "60 outside 0..50 (N_rb)"),
    Case("own_rbs + other_rbs above N_rb", CBT,
         lambda d: edit_values("own_rbs", set_rows([7], 30))(edit_values("other_rbs", set_rows([7], 30))(d)),
         7, None, "own_rbs", "30 + 30 = 60 exceeds N_rb 50"),
    Case("bler above 1", CBT, edit_values("bler", set_rows([2], 1.5)), 2, None, "bler", "1.5 outside 0.0..1.0"),
    Case("bler NaN", CBT, edit_values("bler", set_rows([8], np.nan)), 8, None, "bler", "nan outside 0.0..1.0"),
    Case("layers 3", CBT, edit_values("layers", set_rows([1], 3)), 1, None, "layers", "3 outside 1..2"),
    Case("RSRP below range", CBT, edit_values("rsrp_dbm", set_rows([0], -150)), 0, None, "rsrp_dbm",
         "-150.0 outside -140.0..-44.0"),
    Case("TBS above 2^24", CBT, edit_values("own_tbs_bits", set_rows([6], 2**24 + 1)), 6, None, "own_tbs_bits",
         "16777217 outside 0..16777216"),
    Case("harq_fail not 0/1", CBT, edit_values("harq_fail", set_rows([11], 2)), 11, None, "harq_fail",
         "2 outside 0..1", base="harq_fail"),
    # CSV text (locations are file lines).
    Case("CSV empty file", CSV, lambda t: "", None, None, None, "empty file"),
    Case("CSV not a trace", CSV, set_line(1, lambda _: "t_ms,mcs,other_rbs"), None, 1, None,
         "not a clawbed CSV trace"),
    Case("CSV unknown format version", CSV, set_line(1, lambda _: "# clawbed-trace 2"), None, 1,
         "format_version", "2 is not supported (this reader: 1)"),
    Case("CSV metadata not JSON", CSV, set_line(2, lambda s: s[:-1]), None, 2, "metadata", "not valid JSON"),
    Case("CSV metadata with NaN", CSV, csv_metadata(lambda m: m["provenance"].update(seed=float("nan"))), None, 2,
         "metadata", "NaN is not valid JSON"),
    Case("CSV metadata wrong type", CSV, csv_metadata(lambda m: m.update(duration_ms="50")), None, 2,
         "duration_ms", "must be an integer, found string '50'"),
    Case("CSV not a number", CSV, set_cell(line_of(6), "mcs", "abc"), None, line_of(6), "mcs",
         "'abc' is not a number"),
    Case("CSV empty cell", CSV, set_cell(line_of(7), "rsrq_db", ""), None, line_of(7), "rsrq_db",
         "'' is not a number"),
    Case("CSV float in an integer column", CSV, set_cell(line_of(9), "other_rbs", "3.5"), None, line_of(9),
         "other_rbs", "'3.5' is not an integer"),
    Case("CSV space inside a number", CSV, set_cell(line_of(9), "mcs", "1 5"), None, line_of(9), "mcs",
         "'1 5' is not a number"),
    Case("CSV empty line among the rows", CSV, set_line(line_of(9), lambda s: s + "\n"), None, line_of(10), None,
         "empty line among the rows"),
    Case("CSV byte-order mark", CSV, lambda t: "\ufeff" + t, None, 1, None, "byte-order mark"),
    Case("CSV digit separator", CSV, set_cell(line_of(2), "own_tbs_bits", "1_000"), None, line_of(2),
         "own_tbs_bits", "'1_000' is not a number"),
    Case("CSV integer too large", CSV, set_cell(line_of(2), "t_ms", "9" * 30), None, line_of(2), "t_ms",
         "is too large"),
    Case("CSV ragged row", CSV, set_line(line_of(8), lambda s: s + ",7"), None, line_of(8), None,
         "15 fields where the header has 14"),
    Case("CSV short row", CSV, set_line(line_of(30), lambda s: s.rsplit(",", 2)[0]), None, line_of(30), None,
         "12 fields where the header has 14"),
    Case("CSV MCS out of range", CSV, set_cell(line_of(4), "mcs", "31"), None, line_of(4), "mcs",
         "31 outside 0..28"),
    Case("CSV negative count", CSV, set_cell(line_of(4), "other_users", "-1"), None, line_of(4), "other_users",
         "-1 outside 0..255"),
    Case("CSV value the dtype would wrap", CSV, set_cell(line_of(4), "other_users", "300"), None, line_of(4),
         "other_users", "300 outside 0..255"),
    Case("CSV core delay out of range", CSV, set_cell(line_of(5), "core_delay_ms", "1e5"), None, line_of(5),
         "core_delay_ms", "100000.0 outside 0.0..10000.0"),
    Case("CSV RSRQ out of range", CSV, set_cell(line_of(5), "rsrq_db", "3.5"), None, line_of(5),
         "rsrq_db", "3.5 outside -34.0..3.0"),
    Case("CSV t_ms not starting at 0", CSV, map_column("t_ms", lambda i, _: str(i + 1)), None, line_of(0),
         "t_ms", "starts at 1 instead of 0"),
    Case("CSV duplicate time", CSV, map_column("t_ms", lambda i, s: str(ROWS - 2) if i == ROWS - 1 else s),
         None, line_of(ROWS - 1), "t_ms", f"{ROWS - 2} repeats the previous row's time"),
    Case("CSV gap in time", CSV, map_column("t_ms", lambda i, s: str(i + 3) if i >= 20 else s), None,
         line_of(20), "t_ms", "23 (after 19) leaves a gap"),
    Case("CSV time going backwards", CSV,
         map_column("t_ms", lambda i, s: {10: "11", 11: "10"}.get(i, s)),
         None, line_of(11), "t_ms", "10 (after 11) goes backwards", defects=2),
    Case("CSV missing required column", CSV, drop_csv_column("mcs"), None, 3, "mcs", "required column missing"),
    Case("CSV unknown column", CSV, set_line(3, lambda s: s.replace("layers", "layer")), None, 3, "layer",
         "unknown column"),
    Case("CSV repeated column", CSV, add_csv_column("mcs", "3"), None, 3, "mcs", "appears 2 times"),
    Case("CSV harq_fail and bler both present", CSV, add_csv_column("harq_fail", "0"), None, 3, "bler",
         "present together with harq_fail"),
    Case("CSV fewer rows than duration_ms", CSV, drop_last_row, None, 2, "duration_ms",
         f"is {ROWS} but the columns hold {ROWS - 1} rows"),
    Case("CSV not UTF-8", CSV, lambda t: t.replace("synth", "s\udcffnth", 1), None, 2, None, "not UTF-8"),
]


def _encode_csv(text: str) -> bytes:
    # Lone surrogates stand for bytes that are not UTF-8 (the "not UTF-8" case).
    return text.encode("utf-8", errors="surrogateescape")


def broken_bytes(case: Case) -> bytes:
    """The bytes of the broken file of ``case``."""
    data = good_file(case.suffix, case.base)
    return case.corrupt(data) if case.suffix == CBT else _encode_csv(case.corrupt(data.decode()))  # type: ignore[arg-type]


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
def test_defect_table(tmp_path: Path, case: Case) -> None:
    path = tmp_path / f"broken{case.suffix}"
    path.write_bytes(broken_bytes(case))

    defects = validate_file(path)

    matching = [d for d in defects if (d.row, d.line, d.field) == (case.row, case.line, case.field)]
    assert matching, f"no defect at row {case.row} line {case.line} field {case.field}: {[str(d) for d in defects]}"
    assert any(case.fragment in d.message for d in matching), [str(d) for d in matching]
    assert len(defects) == case.defects, [str(d) for d in defects]
    assert all(d.file == str(path) for d in defects)
    # The reader is the validator plus "raise": it reports the same defects.
    with pytest.raises(TraceFormatError) as raised:
        read_trace(path)
    assert raised.value.defects == defects


def test_the_table_covers_twenty_kinds() -> None:
    assert len({c.kind for c in CASES}) == len(CASES) >= 20


@pytest.mark.parametrize("suffix", [CBT, CSV])
@pytest.mark.parametrize("errors", ["bler", "harq_fail"])
def test_good_files_have_no_defects(tmp_path: Path, suffix: str, errors: str) -> None:
    path = tmp_path / f"good{suffix}"
    path.write_bytes(good_file(suffix, errors))
    assert validate_file(path) == []


def _without_content_size(data: bytes) -> bytes:
    """Re-encode every zstd block as a streamed frame, which does not record its size (as some writers do)."""
    header, blocks = split_cbt(data)
    for i, entry in enumerate(header["columns"]):
        if entry["encoding"] != "raw":
            raw = zstandard.ZstdDecompressor().decompress(blocks[i])
            compressor = zstandard.ZstdCompressor().compressobj()
            blocks[i] = compressor.compress(raw) + compressor.flush()
            assert zstandard.frame_content_size(blocks[i]) == -1
            entry["stored_bytes"] = len(blocks[i])
    return join_cbt(header, blocks)


ACCEPTED = [
    ("zstd frames without their size", CBT, _without_content_size),
    ("Windows line ends", CSV, lambda b: b.replace(b"\n", b"\r\n")),
    ("spaces around values and names", CSV, lambda b: b.replace(b",", b" , ")),
    ("trailing blank lines", CSV, lambda b: b + b"\n\n"),
    ("no final newline", CSV, lambda b: b.rstrip(b"\n")),
    ("columns in another order", CSV, lambda b: _encode_csv(_swap_columns(b.decode()))),
    ("floats with exponents", CSV, lambda b: _encode_csv(map_column("bler", lambda i, s: f"{float(s):e}")(b.decode()))),
]


def _swap_columns(text: str) -> str:
    lines = text.split("\n")
    for k in range(2, len(lines)):
        if lines[k]:
            fields = lines[k].split(",")
            fields[0], fields[-1] = fields[-1], fields[0]
            lines[k] = ",".join(fields)
    return "\n".join(lines)


@pytest.mark.parametrize(("kind", "suffix", "change"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_harmless_variants_are_accepted(tmp_path: Path, kind: str, suffix: str,
                                         change: Callable[[bytes], bytes]) -> None:
    path = tmp_path / f"variant{suffix}"
    path.write_bytes(change(good_file(suffix)))
    assert validate_file(path) == []
    back = read_trace(path)
    for name, values in good_trace().columns.items():
        assert np.array_equal(back[name], values), name


def test_three_different_defects_are_all_reported(tmp_path: Path) -> None:
    text = good_file(CSV).decode()
    text = set_cell(line_of(3), "mcs", "31")(text)
    text = set_cell(line_of(17), "other_rbs", "x")(text)
    text = csv_metadata(lambda m: m["cell"].update(n_antennas=3))(text)
    path = tmp_path / "three.csv"
    path.write_text(text)
    found = {(d.line, d.field) for d in validate_file(path)}
    assert found == {(line_of(3), "mcs"), (line_of(17), "other_rbs"), (2, "cell.n_antennas")}


def test_per_row_defects_are_aggregated_in_a_long_trace(tmp_path: Path) -> None:
    rows = 200_000
    trace = realistic_trace(rows, bandwidth_mhz=10)
    path = tmp_path / "long.cbt"
    write_trace(trace, path)
    bad = edit_values("mcs", lambda v: np.where(np.arange(rows) % 3 == 1, 30, v))(path.read_bytes())
    path.write_bytes(bad)
    defects = validate_file(path)
    assert len(defects) == 1
    assert defects[0].count == len(range(1, rows, 3))
    assert str(defects[0]) == f"{path}:row 1: mcs: 30 outside 0..28 at rows 1, 4, 7 … ({defects[0].count:,} rows)"


def test_defect_text() -> None:
    assert str(Defect("t.csv", None, 12, "mcs", "31 outside 0..28")) == "t.csv:line 12: mcs: 31 outside 0..28"
    assert str(Defect("t.cbt", 5, None, "mcs", "31 outside 0..28")) == "t.cbt:row 5: mcs: 31 outside 0..28"
    assert str(Defect("t.cbt", None, None, None, "empty file")) == "t.cbt: empty file"
    assert str(Defect("t.cbt", None, None, "mcs", "CRC-32 mismatch")) == "t.cbt: mcs: CRC-32 mismatch"


def test_missing_file_is_a_defect(tmp_path: Path) -> None:
    [defect] = validate_file(tmp_path / "absent.cbt")
    assert "cannot read: No such file or directory" in str(defect)


def test_in_memory_checks_match_the_file_checks(tmp_path: Path) -> None:
    # The writer refuses what the reader would refuse, with the same defect.
    trace = good_trace()
    mcs = trace["mcs"].copy()
    mcs[[5, 9]] = 29
    broken = Trace(trace.metadata, dict(trace.columns, mcs=mcs))
    with pytest.raises(TraceFormatError) as raised:
        write_trace(broken, tmp_path / "x.cbt")
    [defect] = raised.value.defects
    assert (defect.row, defect.field, defect.message) == (5, "mcs", "29 outside 0..28 at rows 5, 9 (2 rows)")


def test_cli_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "good.cbt"
    good.write_bytes(good_file(CBT))
    bad = tmp_path / "bad.csv"
    bad.write_bytes(set_cell(line_of(4), "mcs", "31")(good_file(CSV).decode()).encode())

    ok = subprocess.run([str(CLAWBED), "trace", "validate", str(good)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert f"{good}: ok" in ok.stdout

    failed = subprocess.run([str(CLAWBED), "trace", "validate", str(good), str(bad)],
                            capture_output=True, text=True)
    assert failed.returncode == 1, failed.stderr
    assert f"{bad}:line {line_of(4)}: mcs: 31 outside 0..28" in failed.stdout
    assert f"{bad}: 1 defect(s)" in failed.stderr
