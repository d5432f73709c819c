"""Points in InfluxDB 1.x line protocol, written in batches, spooled to disk when the server
is down or slow, and written later: a run never waits on its metrics and loses none.

A batch that cannot be written (connection refused, timeout, HTTP 5xx) goes whole into a
spool file ``<spool dir>/<unix ms>-<pid>-<sequence>.lp`` (the exact request body: line protocol,
nanosecond timestamps), and the spool folder is registered in ``<state>/influxdb/spools``.
The next batch any writer gets through, and ``clawbed dash flush``, write every registered
spool file in order and delete each once the server accepted it. Re-writing a point is
harmless: InfluxDB keeps one point per (measurement, tags, time).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from clawbed.dashboards.influxdb import DATABASE, influx_dir
from clawbed.errors import ClawbedError
from clawbed.files import atomic_write

#: Points per HTTP request (InfluxDB's advice is 5,000–10,000; ~1 MB of body).
BATCH_POINTS = 5000
#: How long one write may take before the batch is spooled instead, s.
WRITE_TIMEOUT_S = 5.0
#: After a failed write, batches go straight to the spool for this long before the server
#: is tried again, s (so a dead server costs one timeout, not one per batch).
RETRY_AFTER_S = 5.0
SPOOL_SUFFIX = ".lp"
#: Registry of spool folders with files still to write, one absolute path a line.
SPOOL_REGISTRY = "spools"

FieldValue = float | int | bool | str


class MetricsError(ClawbedError):
    """InfluxDB refused data (HTTP 4xx): a bug in what was sent, not an outage; names the batch."""


def _escape_key(text: str, what: str) -> str:
    """A tag key, tag value or field key: ``,``, ``=`` and space escaped with ``\\``."""
    if "\n" in text or "\r" in text:
        raise ValueError(f"{what} {text!r}: line protocol cannot carry a line break")
    return text.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


def escape_measurement(name: str) -> str:
    """A measurement name: ``,`` and space escaped with ``\\``."""
    if not name:
        raise ValueError("a measurement name cannot be empty")
    if "\n" in name or "\r" in name:
        raise ValueError(f"measurement {name!r}: line protocol cannot carry a line break")
    return name.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ")


def escape_tag(text: str) -> str:
    """A tag key or value (also used for field keys)."""
    return _escape_key(text, "tag")


def format_field(value: FieldValue) -> str | None:
    """A field value in line protocol; None for a value it cannot carry (NaN, ±inf).

    Integers get the ``i`` suffix (InfluxDB then stores them as int64), strings are quoted
    with ``"`` and ``\\`` escaped, booleans are ``true``/``false``.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}i"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else None
    if isinstance(value, str):
        if "\n" in value or "\r" in value:
            raise ValueError(f"string field {value[:40]!r}: line protocol cannot carry a line break")
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"field value {value!r} of type {type(value).__name__}: use float, int, bool or str")


@dataclass(frozen=True)
class Point:
    """One point: ``measurement``, ``tags`` (empty values are left out), ``fields`` and its
    time in Unix nanoseconds."""

    measurement: str
    tags: Mapping[str, str]
    fields: Mapping[str, FieldValue]
    time_ns: int

    def to_line(self) -> str | None:
        """The point as one line of line protocol (no newline); None when no field has a value."""
        fields = []
        for key, value in self.fields.items():
            text = format_field(value)
            if text is not None:
                fields.append(f"{escape_tag(key)}={text}")
        if not fields:
            return None
        tags = "".join(f",{escape_tag(k)}={escape_tag(str(v))}" for k, v in sorted(self.tags.items()) if v != "")
        return f"{escape_measurement(self.measurement)}{tags} {','.join(fields)} {int(self.time_ns)}"


def write_lines(url: str, body: bytes, *, database: str = DATABASE, timeout_s: float = WRITE_TIMEOUT_S) -> None:
    """POST a line-protocol body to ``/write``. Raises :class:`httpx.HTTPError` when the
    server cannot be reached in time or fails (5xx), :class:`MetricsError` when it refuses."""
    response = httpx.post(f"{url}/write", params={"db": database, "precision": "ns"}, content=body,
                          timeout=timeout_s)
    if response.status_code == 204:
        return
    if 400 <= response.status_code < 500:
        raise MetricsError(f"InfluxDB refused a batch ({response.status_code}): {response.text.strip()[:500]}")
    response.raise_for_status()
    raise httpx.HTTPStatusError(f"unexpected status {response.status_code}", request=response.request,
                                response=response)


def registry_path() -> Path:
    return influx_dir() / SPOOL_REGISTRY


def registered_spools() -> list[Path]:
    """Spool folders registered so far (that still exist)."""
    try:
        lines = registry_path().read_text().splitlines()
    except FileNotFoundError:
        return []
    return [Path(p) for p in dict.fromkeys(lines) if p and Path(p).is_dir()]


def _register(spool_dir: Path) -> None:
    path = registry_path()
    if spool_dir in registered_spools():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # One short O_APPEND write: concurrent writers do not interleave within a line.
    with path.open("a") as f:
        f.write(f"{spool_dir}\n")


def spool_files(spool_dir: Path) -> list[Path]:
    """The spool files of ``spool_dir``, oldest first."""
    return sorted(spool_dir.glob(f"*{SPOOL_SUFFIX}")) if spool_dir.is_dir() else []


@dataclass
class FlushReport:
    """What :func:`flush_spools` wrote, and what is left (the server went away meanwhile)."""

    files: int = 0
    points: int = 0
    left: int = 0


def flush_spools(url: str, dirs: Iterable[Path] | None = None, *, database: str = DATABASE,
                 timeout_s: float = WRITE_TIMEOUT_S) -> FlushReport:
    """Write the spool files of ``dirs`` (default: every registered folder) oldest first,
    deleting each once written. Stops at the first outage (the rest stay for later);
    a refused file raises :class:`MetricsError` naming it, and stays."""
    report = FlushReport()
    pending = [f for d in (registered_spools() if dirs is None else [Path(d).resolve() for d in dirs])
               for f in spool_files(d)]
    for i, path in enumerate(pending):
        body = path.read_bytes()
        try:
            write_lines(url, body, database=database, timeout_s=timeout_s)
        except httpx.HTTPError:
            report.left = len(pending) - i
            return report
        except MetricsError as e:
            raise MetricsError(f"{path}: {e}") from e
        path.unlink()
        report.files += 1
        report.points += body.count(b"\n")
    return report


@dataclass
class MetricsWriter:
    """Buffers points and writes them in batches of :data:`BATCH_POINTS` to the server at
    ``url`` (None: no server, spool everything); a batch that fails is spooled in
    ``spool_dir``. Use as a context manager, or call :meth:`close` to send the rest."""

    url: str | None
    spool_dir: Path
    database: str = DATABASE
    batch_points: int = BATCH_POINTS
    timeout_s: float = WRITE_TIMEOUT_S
    #: Points sent to the server / spooled to disk so far.
    written: int = 0
    spooled: int = 0
    _lines: list[str] = field(default_factory=list, repr=False)
    _retry_at: float = field(default=0.0, repr=False)
    _sequence: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self.spool_dir = self.spool_dir.resolve()

    def add(self, point: Point) -> bool:
        """Buffer ``point``; False when it has no field with a value (nothing to write)."""
        line = point.to_line()
        if line is None:
            return False
        self._lines.append(line)
        if len(self._lines) >= self.batch_points:
            self.send()
        return True

    def add_all(self, points: Iterable[Point]) -> None:
        for point in points:
            self.add(point)

    def send(self) -> None:
        """Write the buffered points now (or spool them)."""
        if not self._lines:
            return
        lines, self._lines = self._lines, []
        body = ("\n".join(lines) + "\n").encode()
        if self.url is not None and time.monotonic() >= self._retry_at:
            try:
                self._post(body)
            except httpx.HTTPError:
                self._retry_at = time.monotonic() + RETRY_AFTER_S
            else:
                self.written += len(lines)
                # The server is back: what earlier batches (of any run) left goes now.
                flush_spools(self.url, database=self.database, timeout_s=self.timeout_s)
                return
        self._spool(body)
        self.spooled += len(lines)

    def _post(self, body: bytes) -> None:
        assert self.url is not None
        write_lines(self.url, body, database=self.database, timeout_s=self.timeout_s)

    def _spool(self, body: bytes) -> None:
        self.spool_dir.mkdir(parents=True, exist_ok=True)
        # Time first so that files sort in the order they were written; the pid and a
        # sequence number keep two writers of one folder, and two batches of a ms, apart.
        self._sequence += 1
        name = f"{int(time.time() * 1000):013d}-{os.getpid()}-{self._sequence:06d}{SPOOL_SUFFIX}"
        with atomic_write(self.spool_dir / name, "wb") as f:
            f.write(body)
        _register(self.spool_dir)

    def close(self) -> None:
        self.send()

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
