"""Readers of the emulator's chunked columnar files: ground truth and the packet log.

Both files (``truth.cbcol``, ``packets.cbcol``) use the container of ``TRUTH_FORMAT.md``:

    file   := "CBCOLS\\0\\0" u16 version u16 reserved u32 header_len  header(JSON)  chunk*
    chunk  := "CBCK" u32 json_len u32 crc32(json)  json  block*     (one block per column)
    json   := {"chunk_index": i, "rows": n, "columns": [{"name", "dtype", "encoding",
                                                          "stored_bytes", "crc32"}, ...]}

A chunk is appended whole, so an interrupted run leaves every complete chunk followed by at
most one incomplete one; the readers keep the complete chunks and report the rest as
truncated. A complete chunk whose CRC does not match is corruption and raises.

Ground-truth columns are the cell's record flattened (``ues[2].alloc_rbs``), one row per
subframe; :meth:`Truth.ue` and :meth:`Truth.per_ue` give a UE's series without spelling
the flattened names. The file header's cell facts (``start_sfn``, ``n_rb``, ``n_antennas``)
are properties of both readers.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Collection
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, cast

import numpy as np
import zstandard

from clawbed.errors import ClawbedError

FILE_MAGIC = b"CBCOLS\0\0"
CHUNK_MAGIC = b"CBCK"
FORMAT_VERSION = 1
_FILE_PREFIX = struct.Struct("<8sHHI")
_CHUNK_PREFIX = struct.Struct("<4sII")

#: numpy dtype of each stored dtype name (``json`` blocks are decoded separately).
_DTYPES: dict[str, np.dtype] = {
    "u8": np.dtype("<u1"),
    "u16": np.dtype("<u2"),
    "u32": np.dtype("<u4"),
    "u64": np.dtype("<u8"),
    "i64": np.dtype("<i8"),
    "f64": np.dtype("<f8"),
}


class TruthFormatError(ClawbedError):
    """A columnar file that is not one, or whose complete part is corrupt; names the file and chunk."""


class PacketEvent(IntEnum):
    """``event`` column of the packet log."""

    DELIVER = 0
    DROP_OVERFLOW = 1
    DROP_RLC = 2
    DROP_EVENT = 3  #: a scripted drop (the config's ``events``, kind ``drop``)


class Direction(IntEnum):
    """``direction`` column of the packet log."""

    DOWNLINK = 0
    UPLINK = 1


@dataclass
class ColumnarFile:
    """The complete chunks of a ``.cbcol`` file, concatenated column by column."""

    path: Path
    #: The file header: ``kind`` (``truth``/``packets``), ``format_version`` and run metadata.
    header: dict[str, Any]
    #: Column name → values of every row of the complete chunks.
    columns: dict[str, np.ndarray]
    #: Complete chunks read.
    chunks: int
    #: Rows read.
    rows: int
    #: Bytes after the last complete chunk (an interrupted run's partial chunk); 0 when whole.
    truncated_bytes: int

    @property
    def truncated(self) -> bool:
        return self.truncated_bytes > 0

    @property
    def origin_unix_ns(self) -> int | None:
        """Unix time (ns) of the emulator's time zero, the start of subframe 0."""
        return self._header_int("origin_unix_ns")

    @property
    def start_sfn(self) -> int | None:
        """System frame number of subframe 0 (None in a file of an older emulator)."""
        return self._header_int("start_sfn")

    @property
    def n_rb(self) -> int | None:
        """Resource blocks of the cell, N_rb (None in a file of an older emulator)."""
        return self._header_int("n_rb")

    @property
    def n_antennas(self) -> int | None:
        """Transmit antenna ports of the cell (None in a file of an older emulator)."""
        return self._header_int("n_antennas")

    def _header_int(self, key: str) -> int | None:
        value = self.header.get(key)
        return int(value) if value is not None else None

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.columns[name]
        except KeyError:
            raise KeyError(f"{self.path}: no column {name!r} (has {', '.join(sorted(self.columns)[:12])}, …)") from None


class Truth(ColumnarFile):
    """Ground truth: one row per subframe (``t_ms``), every UE's fields as ``ues[i].<field>``."""

    @property
    def n_ues(self) -> int:
        """Number of UEs that appear in the columns."""
        indices = {int(name[4:name.index("]")]) for name in self.columns if name.startswith("ues[")}
        return max(indices) + 1 if indices else 0

    def ue(self, index: int, field: str) -> np.ndarray:
        """Column ``ues[index].field``."""
        return self[f"ues[{index}].{field}"]

    def per_ue(self, field: str) -> np.ndarray:
        """``field`` of every UE as a (rows × UEs) array."""
        return np.column_stack([self.ue(i, field) for i in range(self.n_ues)])


class PacketLog(ColumnarFile):
    """The packet log: one row per delivered or dropped packet (times in µs of emulated time)."""

    def select(self, *, event: PacketEvent | None = None, direction: Direction | None = None,
               ue: int | None = None, in_time_order: bool = False) -> dict[str, np.ndarray]:
        """The rows matching every given criterion, as a dict of columns: in file order (the
        writer's deliveries and the cell's drops come in interleaved batches), or sorted by
        ``t_actual_us`` (stable) with ``in_time_order``."""
        keep = np.ones(self.rows, dtype=bool)
        if event is not None:
            keep &= self["event"] == int(event)
        if direction is not None:
            keep &= self["direction"] == int(direction)
        if ue is not None:
            keep &= self["ue"] == ue
        rows = np.flatnonzero(keep)
        if in_time_order:
            rows = rows[np.argsort(self["t_actual_us"][rows], kind="stable")]
        return {name: values[rows] for name, values in self.columns.items()}


def _json_column(values: list[Any]) -> np.ndarray:
    """A ``json`` block as an array: numbers, booleans and nulls become float64 (bool as 1/0,
    null as NaN) so optional numeric fields stay numeric; anything else stays object."""
    if all(v is None or isinstance(v, (int, float)) for v in values):
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    return np.array(values, dtype=object)


def _concat(parts: list[np.ndarray | None], rows: list[int]) -> np.ndarray:
    """Concatenate one column's per-chunk arrays; a chunk without the column contributes
    NaN (numeric) or None (object) rows."""
    present = [p for p in parts if p is not None]
    if any(p.dtype == object for p in present):
        filled = [p.astype(object) if p is not None else np.full(n, None, dtype=object) for p, n in zip(parts, rows)]
    elif len(present) < len(parts):
        filled = [p.astype(np.float64) if p is not None else np.full(n, np.nan) for p, n in zip(parts, rows)]
    else:
        filled = present
    return np.concatenate(filled) if filled else np.array([])


def read_columnar(path: Path | str, cls: type[ColumnarFile] = ColumnarFile,
                  columns: Collection[str] | None = None) -> ColumnarFile:
    """Read every complete chunk of the ``.cbcol`` file ``path``; only the named ``columns``
    when given (a 45-UE cell's truth has 45 sets: a reader of one UE skips decoding 44)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TruthFormatError(f"reading {path}: {e.strerror}") from e
    if len(data) < _FILE_PREFIX.size:
        raise TruthFormatError(f"{path}: {len(data)} bytes, shorter than the file header")
    magic, version, _, header_len = _FILE_PREFIX.unpack_from(data)
    if magic != FILE_MAGIC:
        raise TruthFormatError(f"{path}: not a clawbed columnar file (magic {magic!r})")
    if version != FORMAT_VERSION:
        raise TruthFormatError(f"{path}: format version {version}, this reader knows {FORMAT_VERSION}")
    pos = _FILE_PREFIX.size + header_len
    if pos > len(data):
        raise TruthFormatError(f"{path}: truncated inside the file header")
    try:
        header = json.loads(data[_FILE_PREFIX.size:pos])
    except ValueError as e:
        raise TruthFormatError(f"{path}: file header is not JSON: {e}") from e

    decompressor = zstandard.ZstdDecompressor()
    parts: dict[str, list[np.ndarray | None]] = {}
    rows_per_chunk: list[int] = []
    while pos < len(data):
        index = len(rows_per_chunk)
        decoded = _read_chunk(path, data, pos, index, decompressor, columns)
        if decoded is None:
            break
        pos, rows, columns = decoded
        for name in parts.keys() - columns.keys():
            parts[name].append(None)
        for name, values in columns.items():
            parts.setdefault(name, [None] * index).append(values)
        rows_per_chunk.append(rows)
    merged = {name: _concat(p, rows_per_chunk) for name, p in parts.items()}
    return cls(path, header, merged, len(rows_per_chunk), sum(rows_per_chunk), len(data) - pos)


def _read_chunk(path: Path, data: bytes, pos: int, index: int, decompressor: zstandard.ZstdDecompressor,
                wanted: Collection[str] | None = None) -> tuple[int, int, dict[str, np.ndarray]] | None:
    """Decode the chunk at ``pos``: (position after it, rows, columns), or None when the file
    ends inside it (the incomplete last chunk of an interrupted run). Only the ``wanted``
    columns are decoded (all when None)."""
    where = f"{path}: chunk {index} at byte {pos}"
    if pos + _CHUNK_PREFIX.size > len(data):
        return None
    magic, json_len, json_crc = _CHUNK_PREFIX.unpack_from(data, pos)
    if magic != CHUNK_MAGIC:
        raise TruthFormatError(f"{where}: bad chunk magic {magic!r}")
    at = pos + _CHUNK_PREFIX.size
    if at + json_len > len(data):
        return None
    raw_header = data[at:at + json_len]
    if zlib.crc32(raw_header) != json_crc:
        raise TruthFormatError(f"{where}: chunk header CRC mismatch")
    chunk = json.loads(raw_header)
    at += json_len
    rows = int(chunk["rows"])
    if at + sum(int(c["stored_bytes"]) for c in chunk["columns"]) > len(data):
        return None
    columns: dict[str, np.ndarray] = {}
    for c in chunk["columns"]:
        name, n = c["name"], int(c["stored_bytes"])
        block = data[at:at + n]
        at += n
        if wanted is not None and name not in wanted:
            continue
        if c["encoding"] == "zstd":
            # A streaming decoder: it needs no content size in the frame header.
            raw = decompressor.decompressobj().decompress(block)
        elif c["encoding"] == "raw":
            raw = block
        else:
            raise TruthFormatError(f"{where}: column {name}: unknown encoding {c['encoding']!r}")
        if zlib.crc32(raw) != int(c["crc32"]):
            raise TruthFormatError(f"{where}: column {name}: CRC mismatch")
        if c["dtype"] == "json":
            values = _json_column(json.loads(raw))
        elif c["dtype"] in _DTYPES:
            values = np.frombuffer(raw, dtype=_DTYPES[c["dtype"]])
        else:
            raise TruthFormatError(f"{where}: column {name}: unknown dtype {c['dtype']!r}")
        if len(values) != rows:
            raise TruthFormatError(f"{where}: column {name} has {len(values)} values, the chunk {rows} rows")
        columns[name] = values
    return at, rows, columns


def read_truth(path: Path | str, columns: Collection[str] | None = None) -> Truth:
    """Ground truth (``truth.cbcol``): every complete chunk, one row per subframe; only the
    named ``columns`` when given."""
    return cast(Truth, read_columnar(path, Truth, columns))


def read_packets(path: Path | str) -> PacketLog:
    """The packet log (``packets.cbcol``): every complete chunk, one row per packet event."""
    return cast(PacketLog, read_columnar(path, PacketLog))
