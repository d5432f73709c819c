"""What a page load measured: one JSON line per load, the same for every loader."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field


@dataclass
class ObjectTiming:
    """One fetched object. Times are ms from the load's start (the navigation start)."""

    url: str
    start_ms: float  # request start (for the browser: Resource Timing startTime)
    end_ms: float  # last body byte received (responseEnd)
    bytes: int  # body bytes as received (compressed when the server compresses; else the file's size)
    protocol: str  # "h2" or "http/1.1" (ALPN, as nextHopProtocol names it)
    decoded_bytes: int | None = None  # body bytes after the content coding (None: not known)


@dataclass
class LoadResult:
    """One page load. ``plt_ms``: page load time, ms (browser: loadEventEnd − navigation
    startTime; h2 loader: first request start to the last object's end). ``bytes_total``:
    sum of the objects' body bytes as received; ``bytes_decoded``: the same after content
    codings (a gzip-serving server's objects are larger decoded; None: not known). ``notes``:
    anything that went wrong without failing the load outright (console errors, images that
    did not decode). ``ok`` is False when the page did not load completely; ``error`` then
    says why."""

    ok: bool
    plt_ms: float | None = None
    bytes_total: int = 0
    protocol: str | None = None
    objects: list[ObjectTiming] = field(default_factory=list)
    error: str | None = None
    loader: str = ""
    url: str = ""
    notes: list[str] = field(default_factory=list)
    bytes_decoded: int | None = None

    def to_json(self) -> str:
        """One line of JSON."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> LoadResult:
        data = json.loads(line)
        data["objects"] = [ObjectTiming(**o) for o in data.get("objects", [])]
        return cls(**data)


def protocol_name(http_version: str) -> str:
    """ALPN-style name ("h2", "http/1.1") from an HTTP version string ("HTTP/2", "HTTP/1.1")."""
    return {"HTTP/2": "h2", "HTTP/2.0": "h2", "HTTP/1.1": "http/1.1", "HTTP/1.0": "http/1.0"}.get(
        http_version, http_version.lower())
