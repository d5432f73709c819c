"""File writing that never leaves a half-written file behind."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from clawbed.errors import InputError


@contextlib.contextmanager
def atomic_write(path: Path, mode: Literal["w", "wb"] = "wb") -> Iterator[IO]:
    """Yield a file whose content replaces ``path`` only when the block ends without error.

    The temporary file sits beside ``path`` so the final rename stays on one file system
    (atomic): a reader sees the old file or the whole new one, and an interrupted write
    leaves no partial file. The mode is 0o666 less the umask, as for any new file.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with (os.fdopen(fd, "w", encoding="utf-8", newline="") if mode == "w" else os.fdopen(fd, "wb")) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {path}: {e.strerror}") from e
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
