"""Check a trace file against the format (FORMAT.md) and report every defect it has.

One parsing path serves both reading and validating: :func:`parse_file` runs the codec of
the file's encoding (``binary`` or ``csvform``), which fills a :class:`Parsed` with the
content and the structural defects it met, then :func:`check_content` adds the semantic
defects (metadata, columns, ranges, time). ``read_trace`` is that plus "raise if any
defect", so the reader and the validator cannot disagree. The writer runs the same
semantic checks on the in-memory trace (:func:`check_trace`) before writing.

Per-row defects are aggregated per (field, kind): the first few row (``.cbt``, 0-based) or
line (``.csv``, 1-based) numbers and a total, never one defect per row.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clawbed.lte import N_RB_BY_BANDWIDTH_MHZ, SFN_CYCLE, VALID_N_RB, n_rb_for_bandwidth
from clawbed.traces import binary, csvform
from clawbed.traces.schema import (
    COLUMN_BY_NAME,
    COLUMNS,
    CSV_FORMAT_LINE,
    FORMAT_VERSION,
    MAGIC,
    N_RB,
    REQUIRED_COLUMNS,
    Trace,
)

#: Row or line numbers quoted in an aggregated per-row defect before "…".
SHOWN_LOCATIONS = 3
#: Keys of the metadata object and of its ``cell`` (FORMAT.md "Metadata").
METADATA_KEYS = ("format_version", "cell", "duration_ms", "start_sfn", "source", "provenance", "description")
CELL_KEYS = ("bandwidth_mhz", "n_rb", "n_antennas")
#: Rows are numbered by a u32 t_ms from 0.
MAX_DURATION_MS = 2**32 - 1


@dataclass(frozen=True)
class Defect:
    """One defect of a trace file.

    ``row`` is a 0-based row index (binary files, in-memory traces), ``line`` a 1-based
    line number (CSV); both are None for a whole-file defect. For an aggregated per-row
    defect they locate the first occurrence and ``count`` is the number of rows affected.
    """

    file: str
    row: int | None
    line: int | None
    field: str | None
    message: str
    count: int = 1

    def __str__(self) -> str:
        where = f":line {self.line}" if self.line is not None else f":row {self.row}" if self.row is not None else ""
        what = f" {self.field}:" if self.field else ""
        return f"{self.file}{where}:{what} {self.message}"


@dataclass
class Parsed:
    """What a codec made of a file: content, where each row came from, and defects so far.

    Codecs fill it; :func:`check_content` reads it. Columns hold the values as parsed
    (CSV: int64/float64 so that out-of-range values survive to be reported), only for
    columns that decoded cleanly; ``lengths`` holds the value count of every known column
    whose length is known, decoded or not.
    """

    file: str
    #: CSV: the file line of each row (row locations are reported as lines); None: rows.
    row_lines: np.ndarray | None = None
    #: CSV: the lines holding the metadata and the column names, for whole-file defects.
    metadata_line: int | None = None
    header_line: int | None = None
    metadata: Any = None
    #: Column names as the file declares them, in order, duplicates and unknown names kept.
    declared: list[str] = field(default_factory=list)
    #: False until the codec has read the list of columns (column checks need it).
    columns_known: bool = False
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    lengths: dict[str, int] = field(default_factory=dict)
    #: CSV: per column, True where a cell could not be parsed (skipped by value checks).
    bad_cells: dict[str, np.ndarray] = field(default_factory=dict)
    defects: list[Defect] = field(default_factory=list)

    def defect(self, message: str, field: str | None = None, *, line: int | None = None) -> None:
        """Record a defect of the whole file, or of one line of a CSV file (1-based)."""
        self.defects.append(Defect(self.file, None, line, field, message))

    def rows_defect(self, field: str | None, what: str, rows: np.ndarray, first_value: str) -> None:
        """Record one defect for every row in ``rows`` (sorted 0-based indices, non-empty).

        The message reads ``<first_value> <what>`` for one row, and
        ``<first_value> <what> at rows 5, 9, 12 … (2,301 rows)`` for several.
        """
        count = len(rows)
        shown = rows[:SHOWN_LOCATIONS]
        if self.row_lines is not None:
            unit, locations = "line", self.row_lines[shown]
        else:
            unit, locations = "row", shown
        message = f"{first_value} {what}"
        if count > 1:
            more = " …" if count > SHOWN_LOCATIONS else ""
            message += f" at {unit}s {', '.join(str(int(x)) for x in locations)}{more} ({count:,} {unit}s)"
        first = int(locations[0])
        self.defects.append(Defect(
            self.file, None if unit == "line" else first, first if unit == "line" else None,
            field, message, count))

    def trace(self) -> Trace:
        """The content as a :class:`Trace` (columns in schema order and dtypes); only for a file without defects."""
        cols = {c.name: np.ascontiguousarray(self.columns[c.name], dtype=c.np_dtype)
                for c in COLUMNS if c.name in self.columns}
        return Trace(self.metadata, cols)


def parse_file(path: str | Path) -> Parsed:
    """Read and check one trace file (encoding by suffix ``.cbt``/``.csv``, else by its first bytes)."""
    path = Path(path)
    parsed = Parsed(str(path))
    try:
        data = path.read_bytes()
    except OSError as e:
        parsed.defect(f"cannot read: {e.strerror}")
        return parsed
    suffix = path.suffix.lower()
    if suffix == ".cbt" or (suffix != ".csv" and data.startswith(MAGIC)):
        binary.parse(data, parsed)
    elif suffix == ".csv" or csvform.looks_like_csv_trace(data):
        csvform.parse(data, parsed)
    else:
        parsed.defect(f"unknown suffix {path.suffix!r} and the content is neither a .cbt trace "
                      f"(magic {MAGIC!r}) nor a CSV trace (first line {CSV_FORMAT_LINE!r})")
        return parsed
    check_content(parsed)
    return parsed


def validate_file(path: str | Path) -> list[Defect]:
    """Every defect of the trace file at ``path`` (empty: the file is a valid trace)."""
    return parse_file(path).defects


def check_trace(trace: Trace, file: str | Path) -> list[Defect]:
    """Every defect of an in-memory trace, reported against ``file`` (where it is to be written)."""
    parsed = Parsed(str(file), metadata=trace.metadata, columns_known=True)
    for name, values in trace.columns.items():
        parsed.declared.append(name)
        spec = COLUMN_BY_NAME.get(name)
        if spec is None:
            continue
        values = np.asarray(values)
        if values.dtype.kind == "b":
            values = values.astype(np.uint8)
        if values.ndim != 1:
            parsed.defect(f"is a {values.ndim}-D array; a column is 1-D", name)
        elif values.dtype.kind not in ("iuf" if spec.is_float else "iu"):
            parsed.defect(f"has dtype {values.dtype}, which cannot hold a {spec.dtype} column", name)
        else:
            parsed.columns[name] = values
            parsed.lengths[name] = len(values)
    check_content(parsed)
    return parsed.defects


def check_content(p: Parsed) -> None:
    """Add the semantic defects of parsed content: metadata, columns, lengths, values, time."""
    n_rb, duration_ms = _check_metadata(p)
    if p.columns_known:
        _check_column_names(p)
        _check_lengths(p, duration_ms)
        _check_values(p, n_rb)
        _check_time(p)
    p.defects.sort(key=_place)


def _place(d: Defect) -> tuple[int, int]:
    """Sort key: whole-file defects first, then by row or line (the sort is stable: ties keep the order found)."""
    where = d.line if d.line is not None else d.row
    return (0, 0) if where is None else (1, where)


def _json_type(value: Any) -> str:
    """The JSON name of a parsed JSON value's type, for messages."""
    if isinstance(value, bool):
        return "boolean"
    for kind, name in ((int, "integer"), (float, "number"), (str, "string"), (list, "array"),
                       (dict, "object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or isinstance(value, float)


def _check_metadata(p: Parsed) -> tuple[int | None, int | None]:
    """Check the metadata object; return (N_rb, duration_ms) where they are valid, else None."""
    md, line = p.metadata, p.metadata_line
    if md is None:
        return None, None
    if not isinstance(md, dict):
        p.defect(f"the metadata must be a JSON object, found {_json_type(md)}", "metadata", line=line)
        return None, None

    def get(obj: dict[str, Any], key: str, name: str, check: Any, expected: str) -> Any:
        """obj[key] when present and of the right type, else None (a defect recorded)."""
        if key not in obj:
            p.defect("missing from the metadata", name, line=line)
            return None
        value = obj[key]
        if not check(value):
            p.defect(f"must be {expected}, found {_json_type(value)} {value!r}", name, line=line)
            return None
        return value

    _check_keys(p, md, METADATA_KEYS, "")
    version = get(md, "format_version", "format_version", _is_int, "an integer")
    if version is not None and version != FORMAT_VERSION:
        p.defect(f"is {version}, this reader knows version {FORMAT_VERSION}", "format_version", line=line)

    n_rb = None
    cell = get(md, "cell", "cell", lambda v: isinstance(v, dict), "an object")
    if cell is not None:
        _check_keys(p, cell, CELL_KEYS, "cell.")
        bw = get(cell, "bandwidth_mhz", "cell.bandwidth_mhz", _is_number, "a number")
        n_rb = get(cell, "n_rb", "cell.n_rb", _is_int, "an integer")
        antennas = get(cell, "n_antennas", "cell.n_antennas", _is_int, "an integer")
        bw_n_rb = None
        if bw is not None:
            try:
                bw_n_rb = n_rb_for_bandwidth(bw)
            except ValueError:
                p.defect(f"{bw} is not an LTE bandwidth ({', '.join(map(str, N_RB_BY_BANDWIDTH_MHZ))} MHz)",
                         "cell.bandwidth_mhz", line=line)
        if n_rb is not None and n_rb not in VALID_N_RB:
            p.defect(f"{n_rb} is not an LTE cell size ({', '.join(map(str, sorted(VALID_N_RB)))} RBs)",
                     "cell.n_rb", line=line)
            n_rb = None
        if n_rb is not None and bw_n_rb is not None and n_rb != bw_n_rb:
            p.defect(f"{n_rb} does not match bandwidth_mhz {bw} ({bw_n_rb} RBs)", "cell.n_rb", line=line)
            n_rb = None  # which of the two is wrong is unknown: RB checks would only add noise
        if antennas is not None and antennas not in (1, 2):
            p.defect(f"{antennas} antennas; must be 1 or 2", "cell.n_antennas", line=line)

    duration_ms = get(md, "duration_ms", "duration_ms", _is_int, "an integer")
    if duration_ms is not None and not 1 <= duration_ms <= MAX_DURATION_MS:
        p.defect(f"{duration_ms} outside 1..{MAX_DURATION_MS} (a trace holds at least one subframe; t_ms is u32)",
                 "duration_ms", line=line)
        duration_ms = None
    sfn = get(md, "start_sfn", "start_sfn", _is_int, "an integer")
    if sfn is not None and not 0 <= sfn < SFN_CYCLE:
        p.defect(f"{sfn} outside 0..{SFN_CYCLE - 1}", "start_sfn", line=line)
    source = get(md, "source", "source", lambda v: isinstance(v, str), "a string")
    if source is not None and (not source or any(c.isspace() for c in source)):
        p.defect(f"{source!r} must be one short word (synth, mahimahi, decoder-csv, …)", "source", line=line)
    get(md, "provenance", "provenance", lambda v: isinstance(v, dict), "an object")
    if "description" in md and not isinstance(md["description"], str):
        p.defect(f"must be a string, found {_json_type(md['description'])}", "description", line=line)
    return n_rb, duration_ms


def _check_keys(p: Parsed, obj: dict[str, Any], known: tuple[str, ...], prefix: str) -> None:
    """Unknown keys: a typo must not pass silently (free-form information goes in provenance)."""
    for key in obj:
        if key not in known:
            p.defect("unknown metadata key (put free-form information in provenance)", f"{prefix}{key}",
                     line=p.metadata_line)


def _check_column_names(p: Parsed) -> None:
    """Unknown, repeated and missing required columns; harq_fail and bler together."""
    line = p.header_line
    for name, n in Counter(p.declared).items():
        if name not in COLUMN_BY_NAME:
            p.defect("unknown column (not in format version 1)", name, line=line)
        if n > 1:
            p.defect(f"appears {n} times", name, line=line)
    for name in REQUIRED_COLUMNS:
        if name not in p.declared:
            p.defect("required column missing", name, line=line)
    if "harq_fail" in p.declared and "bler" in p.declared:
        p.defect("present together with harq_fail; a trace carries one or the other", "bler", line=line)


def _check_lengths(p: Parsed, duration_ms: int | None) -> None:
    """Every column holds duration_ms values; drop the columns that do not."""
    if not p.lengths:
        return
    lengths = p.lengths.values()
    if duration_ms is not None and duration_ms in lengths:
        rows = duration_ms
    else:
        # duration_ms is wrong or unknown: the length most columns agree on is the trace's.
        rows = Counter(lengths).most_common(1)[0][0]
        if duration_ms is not None:
            p.defect(f"is {duration_ms:,} but the columns hold {rows:,} rows", "duration_ms",
                     line=p.metadata_line)
    for name, n in list(p.lengths.items()):
        if n != rows:
            p.defect(f"holds {n:,} values, the trace has {rows:,} rows", name)
            p.columns.pop(name, None)


def _bound(value: float, is_float: bool) -> str:
    return repr(float(value)) if is_float else str(int(value))


def _check_values(p: Parsed, n_rb: int | None) -> None:
    """Each column's range (N_rb-relative ones only when N_rb is valid), and own + other RBs ≤ N_rb."""
    bad_rows: dict[str, np.ndarray] = {}  # columns with any out-of-range or unparsed cell
    for name, values in p.columns.items():
        spec = COLUMN_BY_NAME[name]
        if spec.hi == N_RB and n_rb is None:
            continue
        lo, hi = spec.lo, spec.upper(n_rb or 0)
        if not spec.is_float:
            lo, hi = int(lo), int(hi)
        unparsed = p.bad_cells.get(name)
        # Most columns are wholly in range: two reductions are cheaper than two masks.
        # (A NaN makes min/max NaN, which fails the test and takes the masks.)
        if unparsed is None and (len(values) == 0 or (values.min() >= lo and values.max() <= hi)):
            continue
        outside = ~((values >= lo) & (values <= hi))
        if unparsed is not None:
            bad_rows[name] = outside | unparsed
            outside &= ~unparsed
        else:
            bad_rows[name] = outside
        rows = np.flatnonzero(outside)
        if len(rows):
            what = f"outside {_bound(lo, spec.is_float)}..{_bound(hi, spec.is_float)}"
            if spec.hi == N_RB:
                what += " (N_rb)"
            p.rows_defect(name, what, rows, str(values[rows[0]]))

    own, other = p.columns.get("own_rbs"), p.columns.get("other_rbs")
    if own is None or other is None or n_rb is None:
        return
    total = own.astype(np.int64) + other
    over = total > n_rb
    # Rows where either part is out of range or unparsed are reported already.
    for name in ("own_rbs", "other_rbs"):
        if name in bad_rows:
            over &= ~bad_rows[name]
    rows = np.flatnonzero(over)
    if len(rows):
        i = rows[0]
        p.rows_defect("own_rbs", f"exceeds N_rb {n_rb} (own_rbs + other_rbs)", rows,
                      f"{own[i]} + {other[i]} = {total[i]}")


def _check_time(p: Parsed) -> None:
    """t_ms starts at 0 and increases by exactly 1 ms per row."""
    t = p.columns.get("t_ms")
    if t is None or len(t) == 0:
        return
    unparsed = p.bad_cells.get("t_ms")
    good = np.ones(len(t), dtype=bool) if unparsed is None else ~unparsed
    if good[0] and t[0] != 0:
        p.rows_defect("t_ms", "instead of 0", np.array([0]), f"starts at {t[0]}")
    step = np.diff(t.astype(np.int64))
    # A step next to an unparsed cell is unknown, not a defect.
    known = good[1:] & good[:-1]
    for kind, mask in (("goes backwards", step < 0), ("repeats the previous row's time", step == 0),
                       ("leaves a gap (t_ms increases by exactly 1)", step > 1)):
        rows = np.flatnonzero(mask & known) + 1
        if len(rows):
            i = rows[0]
            value = str(t[i]) if kind.startswith("repeats") else f"{t[i]} (after {t[i - 1]})"
            p.rows_defect("t_ms", kind, rows, value)
