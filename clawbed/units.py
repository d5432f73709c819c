"""Quantities written by people (``3MiB``, ``500kB``): parsed once, for every part."""

from __future__ import annotations

import re

from clawbed.errors import InputError

_SIZE = re.compile(r"^\s*(\d+)\s*(b|kib|mib|gib|kb|mb|gb)?\s*$", re.IGNORECASE)
_SIZE_UNITS: dict[str | None, int] = {None: 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
                                      "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_size_bytes(text: str, what: str = "size") -> int:
    """``3MiB``, ``500kB``, ``65536`` → bytes; ``what`` (a flag or field) names a bad one."""
    match = _SIZE.match(text)
    if not match:
        raise InputError(f"{what} {text!r}: a size like 65536, 512KiB or 3MiB")
    unit = match.group(2).lower() if match.group(2) else None
    return int(match.group(1)) * _SIZE_UNITS[unit]
