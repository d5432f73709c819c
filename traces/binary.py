"""The binary encoding of a trace (``.cbt``, FORMAT.md "Binary encoding"): write and parse.

Layout: 16-byte fixed header (magic, u16 version, u16 reserved, u32 header_len), a JSON
header ``{"metadata", "columns"}``, then one block per column in the header's order. A
block is ``raw`` values, a ``zstd`` frame of them, or a ``delta-zstd`` frame of the first
value and the wrapping successive differences. Each column's CRC-32 covers its decoded
bytes, so corruption is found whatever the encoding.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import zstandard

from clawbed.errors import InputError
from clawbed.traces.schema import COLUMN_BY_NAME, COLUMNS, DTYPES, FORMAT_VERSION, MAGIC, Trace, parse_json

if TYPE_CHECKING:
    from clawbed.traces.validate import Parsed

#: magic, format_version, reserved, header_len.
#: The JSON header holds exactly these keys, and each column entry exactly these (as in Rust).
HEADER_KEYS = frozenset({"metadata", "columns"})
COLUMN_ENTRY_KEYS = frozenset({"name", "dtype", "encoding", "stored_bytes", "crc32"})
FIXED_HEADER = struct.Struct("<8sHHI")
ENCODINGS = ("raw", "zstd", "delta-zstd")
#: Default encoding per column: t_ms (0, 1, 2, …) deltas to all ones and compresses to nothing.
DEFAULT_ENCODING = "zstd"
DEFAULT_ENCODINGS: dict[str, str] = {"t_ms": "delta-zstd"}
#: zstd level: 3 (zstd's default) compresses a one-hour trace in well under a second.
ZSTD_LEVEL = 3



def _bytes_of(values: np.ndarray) -> memoryview:
    """A contiguous array's bytes without a copy."""
    # numpy arrays export the buffer protocol; numpy's stubs do not declare it for Python 3.11.
    return memoryview(values).cast("B")  # type: ignore[arg-type]

def write(trace: Trace, f: BinaryIO, encodings: Mapping[str, str] | None = None) -> None:
    """Write ``trace`` to the binary file object ``f``.

    Columns go in schema order, each cast to its format dtype. ``encodings`` maps a column
    name to ``raw``, ``zstd`` or ``delta-zstd`` (default: delta-zstd for t_ms, zstd else).
    The trace is written as given: the caller validates it (``io.write_trace`` does).
    """
    encodings = {**DEFAULT_ENCODINGS, **(encodings or {})}
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    entries: list[dict[str, Any]] = []
    blocks: list[bytes | memoryview] = []
    for spec in COLUMNS:
        if spec.name not in trace.columns:
            continue
        values = np.ascontiguousarray(trace.columns[spec.name], dtype=spec.np_dtype)
        encoding = encodings.get(spec.name, DEFAULT_ENCODING)
        if encoding == "raw":
            block: bytes | memoryview = _bytes_of(values)
        elif encoding == "zstd":
            block = compressor.compress(_bytes_of(values))
        elif encoding == "delta-zstd":
            if spec.is_float:
                raise InputError(f"column {spec.name}: delta-zstd is for integer columns, {spec.name} is {spec.dtype}")
            deltas = values.copy()
            # Unsigned subtraction wraps, which is what the format specifies.
            np.subtract(values[1:], values[:-1], out=deltas[1:])
            block = compressor.compress(_bytes_of(deltas))
        else:
            raise InputError(f"column {spec.name}: unknown encoding {encoding!r} (one of {', '.join(ENCODINGS)})")
        entries.append({"name": spec.name, "dtype": spec.dtype, "encoding": encoding,
                        "stored_bytes": len(block), "crc32": zlib.crc32(_bytes_of(values))})
        blocks.append(block)
    try:
        header = json.dumps({"metadata": trace.metadata, "columns": entries}, allow_nan=False).encode()
    except (TypeError, ValueError) as e:
        raise InputError(f"the trace metadata cannot be written as JSON: {e}") from None
    f.write(FIXED_HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(header)))
    f.write(header)
    for block in blocks:
        f.write(block)


def parse(data: bytes | memoryview, p: Parsed) -> None:
    """Parse a ``.cbt`` file's bytes into ``p``, recording every structural defect.

    Stops at the first defect that makes the rest unreadable (bad magic, unknown version,
    header not JSON, a block that cannot be located); otherwise reads every block.
    """
    data = memoryview(data)  # blocks are slices of the file, not copies
    size = len(data)
    if size == 0:
        p.defect("empty file")
        return
    if not MAGIC.startswith(data[:8]):
        p.defect(f"bad magic {bytes(data[:8])!r}, expected {MAGIC!r}: not a .cbt trace")
        return
    if size < FIXED_HEADER.size:
        p.defect(f"truncated: {size} bytes, the fixed header alone is {FIXED_HEADER.size}")
        return
    _, version, reserved, header_len = FIXED_HEADER.unpack_from(data)
    if version != FORMAT_VERSION:
        p.defect(f"{version} is not supported (this reader: {FORMAT_VERSION})", "format_version")
        return
    if reserved != 0:
        p.defect(f"reserved bytes 10..11 hold {reserved:#06x}, must be 0")
    header_end = FIXED_HEADER.size + header_len
    if header_end > size:
        p.defect(f"truncated: the {header_len}-byte JSON header ends at byte {header_end}, "
                 f"the file has {size} bytes")
        return
    try:
        header = parse_json(bytes(data[FIXED_HEADER.size:header_end]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        p.defect(f"the JSON header is not valid JSON: {e}")
        return
    if not isinstance(header, dict):
        p.defect("the JSON header must be an object {\"metadata\": …, \"columns\": […]}")
        return
    unknown = sorted(set(header) - HEADER_KEYS)
    if unknown:
        p.defect(f"unknown key(s) {', '.join(map(repr, unknown))} in the JSON header "
                 f"(it holds exactly {', '.join(sorted(HEADER_KEYS))})")
    if "metadata" in header:
        p.metadata = header["metadata"]
    else:
        p.defect("the JSON header has no metadata", "metadata")
    entries = header.get("columns")
    if not isinstance(entries, list):
        p.defect("the JSON header has no list of columns", "columns")
        return
    p.columns_known = True

    duration = p.metadata.get("duration_ms") if isinstance(p.metadata, dict) else None
    rows = duration if isinstance(duration, int) and not isinstance(duration, bool) and duration >= 0 else None
    offset = header_end
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, dict) else None
        label = name if isinstance(name, str) else f"columns[{i}]"
        stored = entry.get("stored_bytes") if isinstance(entry, dict) else None
        if not (isinstance(stored, int) and not isinstance(stored, bool) and stored >= 0):
            p.defect(f"stored_bytes {stored!r} is not a byte count; the blocks from here on cannot be located",
                     label)
            return
        if offset + stored > size:
            missing = [e.get("name") for e in entries[i + 1:] if isinstance(e, dict)]
            p.declared.extend(n for n in [name, *missing] if isinstance(n, str))
            also = f"; the blocks of {', '.join(map(str, missing))} are missing" if missing else ""
            p.defect(f"truncated: the {stored}-byte block starts at byte {offset}, the file has "
                     f"{size - offset} bytes left{also}", label)
            return
        block = data[offset:offset + stored]
        offset += stored
        if not isinstance(name, str):
            p.defect("column entry has no name", label)
            continue
        extra = sorted(set(entry) - COLUMN_ENTRY_KEYS)
        if extra:
            p.defect(f"unknown key(s) {', '.join(map(repr, extra))} in the column entry "
                     f"(it holds exactly {', '.join(sorted(COLUMN_ENTRY_KEYS))})", name)
        p.declared.append(name)
        spec = COLUMN_BY_NAME.get(name)
        if spec is None:
            continue  # reported by the column checks
        values = _decode_block(entry, block, spec.dtype, rows, p, name)
        if values is not None:
            p.columns[name] = values
    if offset < size:
        p.defect(f"{size - offset} bytes after the last block")


def _decode_block(entry: dict[str, Any], block: memoryview, dtype: str, rows: int | None,
                  p: Parsed, name: str) -> np.ndarray | None:
    """The values of one column block, or None (defect recorded) if they are unusable.

    Records the column's length in ``p.lengths`` whenever it is known. A zstd frame whose
    declared size disagrees with ``rows`` is not decompressed: its length is the defect.
    """
    if entry.get("dtype") != dtype:
        p.defect(f"dtype {entry.get('dtype')!r}, expected {dtype!r}", name)
        return None
    encoding = entry.get("encoding")
    if encoding not in ENCODINGS:
        p.defect(f"unknown encoding {encoding!r} (one of {', '.join(ENCODINGS)})", name)
        return None
    if encoding == "delta-zstd" and dtype == "f32":
        p.defect("delta-zstd is for integer columns only", name)
        return None
    crc = entry.get("crc32")
    if not (isinstance(crc, int) and not isinstance(crc, bool) and 0 <= crc < 2**32):
        p.defect(f"crc32 {crc!r} is not a 32-bit unsigned integer", name)
        return None
    np_dtype = DTYPES[dtype]
    if encoding == "raw":
        raw: bytes | memoryview = block
    else:
        try:
            declared = zstandard.frame_content_size(block)
            if declared >= 0 and rows is not None and declared != rows * np_dtype.itemsize:
                if declared % np_dtype.itemsize == 0:
                    p.lengths[name] = declared // np_dtype.itemsize
                else:
                    p.defect(f"decodes to {declared} bytes, not a whole number of {dtype} values", name)
                return None
            if declared >= 0:
                raw = zstandard.ZstdDecompressor().decompress(block)
            else:  # frame written without its size (streaming writers)
                raw = zstandard.ZstdDecompressor().decompressobj().decompress(block)
        except zstandard.ZstdError as e:
            p.defect(f"the {encoding} block cannot be decompressed: {e}", name)
            return None
    if len(raw) % np_dtype.itemsize:
        p.defect(f"holds {len(raw)} bytes, not a whole number of {dtype} values", name)
        return None
    if encoding == "delta-zstd":
        values = np.cumsum(np.frombuffer(raw, np_dtype), dtype=np_dtype)  # wraps like the writer
    else:
        values = np.frombuffer(raw, np_dtype).copy()  # a writable array, not a view of the file
    p.lengths[name] = len(values)
    actual = zlib.crc32(_bytes_of(values))
    if actual != crc:
        p.defect(f"CRC-32 mismatch: the header says {crc:#010x}, the decoded data has {actual:#010x} "
                 "(corrupted block)", name)
        return None
    return values
