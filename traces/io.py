"""Read and write trace files in either encoding (``.cbt`` binary, ``.csv`` text).

Reading is validating: :func:`read_trace` parses through :mod:`clawbed.traces.validate`
and raises :class:`TraceFormatError` listing the defects if there are any. Writing
checks the in-memory trace the same way, so a written file always reads back.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clawbed.errors import InputError
from clawbed.files import atomic_write
from clawbed.traces import binary, csvform
from clawbed.traces.schema import Trace
from clawbed.traces.validate import Defect, check_trace, parse_file

#: Defects quoted in a TraceFormatError message; ``clawbed trace validate`` lists them all.
MAX_QUOTED_DEFECTS = 20
SUFFIXES = (".cbt", ".csv")


class TraceFormatError(InputError):
    """A trace file (to read) or trace (to write) has defects; ``defects`` lists them all."""

    def __init__(self, path: str | Path, defects: Sequence[Defect], doing: str) -> None:
        self.path = Path(path)
        self.defects = list(defects)
        lines = [f"{doing} {path}: {len(self.defects)} defect(s)"]
        lines += [f"  {d}" for d in self.defects[:MAX_QUOTED_DEFECTS]]
        if len(self.defects) > MAX_QUOTED_DEFECTS:
            lines.append(f"  … {len(self.defects) - MAX_QUOTED_DEFECTS} more "
                         f"(`clawbed trace validate {path}` lists them all)")
        super().__init__("\n".join(lines))


def read_trace(path: str | Path) -> Trace:
    """The trace in ``path`` (``.cbt`` or ``.csv`` by suffix; other suffixes by content).

    Raises :class:`TraceFormatError` (an ``InputError``) naming every defect's file, row or
    line, and field. Columns are returned in their format dtypes, writable.
    """
    parsed = parse_file(path)
    if parsed.defects:
        raise TraceFormatError(path, parsed.defects, "reading")
    return parsed.trace()


def write_trace(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` to ``path``, binary for ``.cbt`` and CSV for ``.csv``.

    The trace is checked first (TraceFormatError if it has defects). The file appears
    whole or not at all: it is written to a temporary file beside ``path`` then renamed.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise InputError(f"cannot write {path}: unknown suffix {path.suffix!r} (use .cbt or .csv)")
    defects = check_trace(trace, path)
    if defects:
        raise TraceFormatError(path, defects, "not writing")
    with atomic_write(path, "wb" if suffix == ".cbt" else "w") as f:
        (binary if suffix == ".cbt" else csvform).write(trace, f)
