"""The CSV encoding of a trace (``.csv``, FORMAT.md "CSV encoding"): write and parse.

Line 1 ``# clawbed-trace 1``, line 2 ``# `` and the metadata as one line of JSON, line 3
the column names, then one row per subframe. Numbers are plain decimal (floats may use an
exponent); no quoting, no digit separators, so that every reader agrees. Spaces around
a value or a column name are ignored; blank lines after the last row too.

Floats are written in the shortest form that reads back to the same f32, so a
``.cbt`` → ``.csv`` → ``.cbt`` round trip is exact.
"""

from __future__ import annotations

import json
import re
import warnings
from typing import TYPE_CHECKING, TextIO

import numpy as np

from clawbed.errors import InputError
from clawbed.traces.schema import (
    COLUMN_BY_NAME,
    COLUMNS,
    CSV_FORMAT_LINE,
    FORMAT_VERSION,
    MAGIC,
    Column,
    Trace,
    parse_json,
)

if TYPE_CHECKING:
    from clawbed.traces.validate import Parsed

#: Rows formatted per write call: bounds the memory of writing a long trace.
WRITE_CHUNK_ROWS = 65536
METADATA_PREFIX = "# "
#: Lines before the first row: format line, metadata line, column names.
HEADER_LINES = 3

_INTEGER = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:nan|inf|infinity)",
                    re.IGNORECASE)
#: Any character that cannot occur in a number of the format (commas separate).
_NOT_NUMERIC = re.compile(r"[^0-9A-Za-z+\-.,]")
#: Any character that cannot occur in an integer (commas separate).
_NOT_INTEGER = re.compile(r"[^0-9+\-,]")
_FORMAT_LINE = re.compile(r"# clawbed-trace\s*([0-9]+)\s*")
_SPACE = re.compile(r"\s")
_UTF8_BOM = b"\xef\xbb\xbf"


def looks_like_csv_trace(data: bytes) -> bool:
    """True when ``data`` starts like a CSV trace of some version (for files without a suffix)."""
    return data.removeprefix(_UTF8_BOM).startswith(b"# clawbed-trace ")


def write(trace: Trace, f: TextIO) -> None:
    """Write ``trace`` as CSV to the text file object ``f`` (opened with ``newline=""``).

    Columns go in schema order, each cast to its format dtype. The trace is written as
    given: the caller validates it (``io.write_trace`` does).
    """
    names = [c.name for c in COLUMNS if c.name in trace.columns]
    try:
        metadata = json.dumps(trace.metadata, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InputError(f"the trace metadata cannot be written as JSON: {e}") from None
    f.write(f"{CSV_FORMAT_LINE}\n{METADATA_PREFIX}{metadata}\n{','.join(names)}\n")
    columns = [np.asarray(trace.columns[n], dtype=COLUMN_BY_NAME[n].np_dtype) for n in names]
    rows = len(columns[0]) if columns else 0
    for start in range(0, rows, WRITE_CHUNK_ROWS):
        # numpy's str() of an f32 is the shortest text that reads back to the same f32.
        texts = [c[start:start + WRITE_CHUNK_ROWS].astype(str).tolist() for c in columns]
        f.write("\n".join(map(",".join, zip(*texts))))
        f.write("\n")


def parse(data: bytes, p: Parsed) -> None:
    """Parse a CSV trace's bytes into ``p``, recording every defect with its line and column.

    Stops only when the format line or the column names are missing or wrong; otherwise
    every row is read, rows with the wrong number of fields and cells that are not numbers
    of the column's type being recorded and skipped by the value checks.
    """
    p.metadata_line, p.header_line = 2, 3
    if not data:
        p.defect("empty file")
        return
    if data.startswith(_UTF8_BOM):
        p.defect("starts with a UTF-8 byte-order mark, which other readers refuse: "
                 "save it as UTF-8 without BOM", line=1)
        data = data[len(_UTF8_BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        p.defect(f"not UTF-8 text: byte {data[e.start]:#04x} at offset {e.start}",
                 line=data.count(b"\n", 0, e.start) + 1)
        text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if "\r" in text:  # files edited on Windows
        lines = [line.removesuffix("\r") for line in lines]

    if not _check_format_line(lines[0] if lines else "", data, p):
        return
    if len(lines) < 2:
        p.defect("truncated: no metadata (line 2)", line=2)
        return
    if not lines[1].startswith("#"):  # "# " as written; the JSON parser skips any spaces
        p.defect(f"line 2 must be {METADATA_PREFIX!r} followed by the metadata as one line of JSON", "metadata", line=2)
    else:
        try:
            p.metadata = parse_json(lines[1][1:])
        except ValueError as e:
            p.defect(f"not valid JSON: {e}", "metadata", line=2)
    if len(lines) < HEADER_LINES or not lines[2].strip():
        p.defect("no column names (line 3)", line=3)
        return
    names = [name.strip() for name in lines[2].split(",")]
    p.declared = names
    p.columns_known = True
    _parse_rows(lines[HEADER_LINES:], names, p)


def _check_format_line(first: str, data: bytes, p: Parsed) -> bool:
    """True when line 1 is this version's format line; else record why not."""
    match = _FORMAT_LINE.fullmatch(first)
    if match and int(match[1]) == FORMAT_VERSION:
        return True
    if match:
        p.defect(f"{match[1]} is not supported (this reader: {FORMAT_VERSION})", "format_version", line=1)
    elif data.startswith(MAGIC):
        p.defect("this is a binary .cbt trace, not CSV (rename it to .cbt)", line=1)
    else:
        p.defect(f"not a clawbed CSV trace: line 1 must be {CSV_FORMAT_LINE!r}", line=1)
    return False


def _parse_rows(body: list[str], names: list[str], p: Parsed) -> None:
    """Parse the data lines (file line 4 on) into ``p.columns``."""
    while body and not body[-1].strip():  # an editor's final newlines carry nothing
        body.pop()
    p.row_lines = np.arange(HEADER_LINES + 1, HEADER_LINES + 1 + len(body))
    blank = [i for i, line in enumerate(body) if not line.strip()]
    if blank:
        p.rows_defect(None, "among the rows", np.array(blank), "empty line")
        keep = np.setdiff1d(np.arange(len(body)), blank)
        body = [body[i] for i in keep]
        p.row_lines = p.row_lines[keep]
    n_rows, n_fields = len(body), len(names)

    field_counts = np.fromiter((line.count(",") + 1 for line in body), dtype=np.int64, count=n_rows)
    ragged = field_counts != n_fields
    if ragged.any():
        rows = np.flatnonzero(ragged)
        p.rows_defect(None, f"where the header has {n_fields}", rows, f"{field_counts[rows[0]]} fields")
        whole = np.flatnonzero(~ragged)
        body = [body[i] for i in whole]
    else:
        whole = None
    cells = ",".join(body)
    texts = cells.split(",") if body else []
    if _SPACE.search(cells):  # spaces around a number are allowed, as other readers trim them
        texts = [text.strip() for text in texts]
        cells = ",".join(texts)
    # Python's number parsers also accept "1_000" and non-ASCII digits, which the format
    # does not: any such character sends every column down the strict path.
    strict = bool(_NOT_NUMERIC.search(cells))

    seen: set[str] = set()
    for j, name in enumerate(names):
        spec = COLUMN_BY_NAME.get(name)
        if spec is None or name in seen:
            continue  # unknown and repeated columns are reported by the column checks
        seen.add(name)
        values, unparsed = _parse_column(texts[j::n_fields], spec, strict, p,
                                         np.arange(n_rows) if whole is None else whole)
        if whole is not None:  # give ragged rows a slot, marked unparsed
            full = np.zeros(n_rows, dtype=values.dtype)
            full[whole] = values
            values = full
            full_unparsed = ragged.copy()
            if unparsed is not None:
                full_unparsed[whole] = unparsed
            unparsed = full_unparsed
        p.columns[name] = values
        p.lengths[name] = n_rows
        if unparsed is not None:
            p.bad_cells[name] = unparsed


def _parse_column(texts: list[str], spec: Column, strict: bool, p: Parsed,
                  rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(values as int64 or float64, mask of cells that are not numbers of the column's type or None).

    ``rows`` maps each text to its row index, for the defects.
    """
    dtype = np.float64 if spec.is_float else np.int64
    if not strict:
        joined = ",".join(texts)
        # An integer column must not hold float syntax ("3.0"), which the float parser takes.
        if spec.is_float or not _NOT_INTEGER.search(joined):
            values = _parse_numbers(joined, len(texts))
            # Above 2^53 a float64 no longer holds every integer: let the strict path read those.
            if values is not None and (spec.is_float or np.abs(values).max(initial=0) < 2**53):
                return values.astype(dtype, copy=False), None
    values = np.zeros(len(texts), dtype=dtype)
    unparsed = np.zeros(len(texts), dtype=bool)
    problems: dict[str, list[int]] = {}
    for i, text in enumerate(texts):
        if spec.is_float:
            if _FLOAT.fullmatch(text):
                values[i] = float(text)
                continue
            problem = "is not a number"
        elif _INTEGER.fullmatch(text):
            number = int(text)
            if -2**63 <= number < 2**63:
                values[i] = number
                continue
            problem = "is too large"
        elif _FLOAT.fullmatch(text):
            problem = "is not an integer (a float in an integer column)"
        else:
            problem = "is not a number"
        unparsed[i] = True
        problems.setdefault(problem, []).append(i)
    for problem, where in problems.items():
        p.rows_defect(spec.name, problem, rows[where], repr(texts[where[0]]))
    return values, unparsed


def _parse_numbers(joined: str, count: int) -> np.ndarray | None:
    """The ``count`` comma-separated numbers of ``joined`` as float64, or None if any is not a number."""
    if count == 0:
        return np.empty(0)
    with warnings.catch_warnings():
        # numpy warns (a future error) rather than raising on text it cannot read.
        warnings.simplefilter("error", DeprecationWarning)
        try:
            values = np.fromstring(joined, dtype=np.float64, sep=",")
        except (ValueError, DeprecationWarning):
            return None
    return values if len(values) == count else None
