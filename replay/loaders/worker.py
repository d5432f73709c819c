"""The worker side of a loader kept across loads (``--serve``): one JSON request a line on
stdin, ``{"url": …, "timeout_s": …}``, one :class:`LoadResult` line on stdout for each.

What the worker keeps between loads is only its interpreter and libraries (for the browser,
Playwright's driver): every load still gets its own browser process with a fresh profile, or
its own HTTP client, so no connection, cache or estimate carries over from one load to the
next. The parent side is :class:`clawbed.replay.loaders.runner.LoaderWorker`.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import TextIO

from clawbed.replay.loaders.result import LoadResult


def parse_request(line: str) -> tuple[str, float]:
    """(url, timeout_s) of a request line; ValueError naming the field that is wrong."""
    try:
        request = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"request is not JSON ({e.msg} at column {e.colno})") from None
    if not isinstance(request, dict):
        raise ValueError("request is not a JSON object")
    url, timeout_s = request.get("url"), request.get("timeout_s")
    if not isinstance(url, str) or not url:
        raise ValueError("request field url: missing or not a string")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise ValueError("request field timeout_s: missing or not a positive number")
    return url, float(timeout_s)


def serve(load_one: Callable[[str, float], LoadResult], loader: str, stdin: TextIO = sys.stdin,
          stdout: TextIO = sys.stdout) -> int:
    """Answer every request line until stdin ends; a request that cannot be read or a load
    that raises is answered with ``ok=False`` and the reason, so the parent never waits in vain."""
    for line in stdin:
        if not line.strip():
            continue
        started = time.monotonic()
        try:
            url, timeout_s = parse_request(line)
        except ValueError as e:
            result = LoadResult(ok=False, loader=loader, url="", error=f"{loader} worker: {e}")
        else:
            try:
                result = load_one(url, timeout_s)
            except Exception as e:  # noqa: BLE001 - a worker always answers with one line, whatever broke
                result = LoadResult(ok=False, loader=loader, url=url,
                                    error=f"{loader} loader failed after {time.monotonic() - started:.1f} s: "
                                          f"{type(e).__name__}: {e}")
        stdout.write(result.to_json() + "\n")
        stdout.flush()
    return 0
