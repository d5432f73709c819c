"""Mahimahi's recorded sites as pages: the folders ``mm-webrecord`` writes, served by the replay's nginx.

A recording is a folder with one file per HTTP exchange, each a serialized ``RequestResponse``
of Mahimahi's ``http_record.proto`` (proto2)::

    message HTTPMessage     { optional bytes first_line = 1; repeated HTTPHeader header = 2;
                              optional bytes body = 3; }
    message HTTPHeader      { optional bytes key = 1; optional bytes value = 2; }
    message RequestResponse { optional string ip = 1; optional uint32 port = 2;
                              optional Scheme scheme = 3;          // HTTP = 1, HTTPS = 2
                              optional HTTPMessage request = 4; optional HTTPMessage response = 5; }

The wire format is decoded here (varints and length-delimited fields; unknown fields are
skipped as protobuf does); a file that does not decode, or lacks what serving needs, is an
:class:`~clawbed.errors.InputError` naming the file, the byte offset and the field.

What is served (:func:`read_recording`): every recorded GET, at its URL (scheme, the Host
header's name and port, the request target: path and query), with its recorded status, content
type, body bytes and headers — except the headers of the connection and the framing
(``Content-Length``, ``Transfer-Encoding``, …; a chunked body is de-chunked, a content-encoded
one kept as recorded, with its ``Content-Encoding``) and the caching ones (every replayed
load fetches everything: the server sends ``Cache-Control: no-store``). The first recorded
exchange of a URL wins. Mahimahi names its files at random, so the order of a recording is
that of the files' modification times (each file is written as its response completes), then
their names.

The page's root (where each load starts): the first GET, in that order, whose response is an
HTML document (2xx, ``text/html`` or ``application/xhtml+xml``) or a redirect whose chain of
recorded redirects ends at one — so a recorded ``http://site/`` → ``https://www.site/`` is
where a load starts, as it was when the site was recorded. ``mahimahi:DIR@URL`` names the
root instead (a recorded URL).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from clawbed.errors import InputError
from clawbed.files import atomic_write

#: The prefix of a page name that is a Mahimahi recording: ``mahimahi:DIR`` or ``mahimahi:DIR@URL``.
PREFIX = "mahimahi:"

#: File a materialized recorded site is described by (read by :mod:`clawbed.replay.webserver`).
SITE_INDEX = "recorded-site.json"
SITE_FORMAT = "clawbed-recorded-site/1"

# -- the protobuf wire format -----------------------------------------------------------------

WIRE_VARINT, WIRE_I64, WIRE_LEN, WIRE_I32 = 0, 1, 2, 5
_WIRE_NAMES = {0: "varint", 1: "64-bit", 2: "length-delimited", 3: "start-group", 4: "end-group", 5: "32-bit"}

SCHEME_HTTP, SCHEME_HTTPS = 1, 2


class WireError(Exception):
    """A protobuf decoding error at byte ``offset`` of the file."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset, self.message = offset, message


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    start, value, shift = pos, 0, 0
    while True:
        if pos >= end:
            raise WireError(start, "truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise WireError(start, "varint longer than 10 bytes")


def _fields(data: bytes, start: int, end: int, where: str) -> Iterator[tuple[int, int, FieldValue, int]]:
    """(field number, wire type, value, offset of the field's key) of the message in
    ``data[start:end]``; a length-delimited value is its (start, end)."""
    pos = start
    value: FieldValue
    while pos < end:
        offset = pos
        try:
            key, pos = _varint(data, pos, end)
        except WireError as e:
            raise WireError(e.offset, f"{where}: {e.message} (a field key)") from None
        number, wire = key >> 3, key & 7
        if number == 0:
            raise WireError(offset, f"{where}: field number 0 (key byte 0x{key:02x}) is not valid protobuf")
        if wire == WIRE_VARINT:
            try:
                value, pos = _varint(data, pos, end)
            except WireError as e:
                raise WireError(e.offset, f"{where}: field {number}: {e.message}") from None
        elif wire in (WIRE_I64, WIRE_I32):
            size = 8 if wire == WIRE_I64 else 4
            if pos + size > end:
                raise WireError(offset, f"{where}: field {number}: truncated {_WIRE_NAMES[wire]} value")
            value, pos = data[pos:pos + size], pos + size
        elif wire == WIRE_LEN:
            try:
                length, pos = _varint(data, pos, end)
            except WireError as e:
                raise WireError(e.offset, f"{where}: field {number}: {e.message} (a length)") from None
            if pos + length > end:
                raise WireError(offset, f"{where}: field {number}: length {length} runs past the end of "
                                        f"its message ({end - pos} bytes left)")
            value, pos = (pos, pos + length), pos + length
        else:
            raise WireError(offset, f"{where}: field {number}: wire type {wire} "
                                    f"({_WIRE_NAMES.get(wire, 'invalid')}) is not used by http_record.proto")
        yield number, wire, value, offset


FieldValue = int | bytes | tuple[int, int]


def _span(value: FieldValue) -> tuple[int, int]:
    """A length-delimited field's (start, end) in the data (the caller checked the wire type)."""
    assert isinstance(value, tuple)
    return value


def _uint(value: FieldValue) -> int:
    """A varint field's value (the caller checked the wire type)."""
    assert isinstance(value, int)
    return value


def _expect(wire: int, expected: int, name: str, offset: int) -> None:
    if wire != expected:
        raise WireError(offset, f"{name}: wire type {wire} ({_WIRE_NAMES.get(wire, 'invalid')}), "
                                f"expected {_WIRE_NAMES[expected]}")


@dataclass
class HttpMessage:
    """``HTTPMessage``: the first line, the headers in order, and the body as recorded."""

    first_line: bytes | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes | None = None


@dataclass
class RequestResponse:
    """``RequestResponse``: the server's address, the scheme (1 HTTP, 2 HTTPS), both messages."""

    ip: str | None = None
    port: int | None = None
    scheme: int | None = None
    request: HttpMessage | None = None
    response: HttpMessage | None = None


def _header(data: bytes, start: int, end: int, where: str) -> tuple[bytes, bytes]:
    key = value = b""
    for number, wire, val, offset in _fields(data, start, end, where):
        if number in (1, 2):
            _expect(wire, WIRE_LEN, f"{where}.{'key' if number == 1 else 'value'}({number})", offset)
            a, b = _span(val)
            if number == 1:
                key = data[a:b]
            else:
                value = data[a:b]
    return key, value


def _message(data: bytes, start: int, end: int, where: str, into: HttpMessage) -> HttpMessage:
    """Decode an ``HTTPMessage`` into ``into`` (a repeated occurrence merges, as protobuf does)."""
    for number, wire, val, offset in _fields(data, start, end, where):
        if number == 1:
            _expect(wire, WIRE_LEN, f"{where}.first_line(1)", offset)
            a, b = _span(val)
            into.first_line = data[a:b]
        elif number == 2:
            name = f"{where}.header(2)[{len(into.headers)}]"
            _expect(wire, WIRE_LEN, name, offset)
            a, b = _span(val)
            into.headers.append(_header(data, a, b, name))
        elif number == 3:
            _expect(wire, WIRE_LEN, f"{where}.body(3)", offset)
            a, b = _span(val)
            into.body = data[a:b]
    return into


def parse_request_response(data: bytes) -> RequestResponse:
    """Decode one serialized ``RequestResponse``; :class:`WireError` (with the byte offset and
    the field) when ``data`` is not one."""
    out = RequestResponse()
    where = "RequestResponse"
    for number, wire, val, offset in _fields(data, 0, len(data), where):
        if number == 1:
            _expect(wire, WIRE_LEN, f"{where}.ip(1)", offset)
            a, b = _span(val)
            try:
                out.ip = data[a:b].decode("utf-8")
            except UnicodeDecodeError:
                raise WireError(a, f"{where}.ip(1): not UTF-8 (a proto string)") from None
        elif number == 2:
            _expect(wire, WIRE_VARINT, f"{where}.port(2)", offset)
            port = _uint(val)
            if not 0 <= port <= 0xFFFFFFFF:
                raise WireError(offset, f"{where}.port(2): {port} is not a uint32")
            out.port = port
        elif number == 3:
            _expect(wire, WIRE_VARINT, f"{where}.scheme(3)", offset)
            out.scheme = _uint(val)
        elif number in (4, 5):
            name = f"{where}.{'request' if number == 4 else 'response'}({number})"
            _expect(wire, WIRE_LEN, name, offset)
            a, b = _span(val)
            current = (out.request if number == 4 else out.response) or HttpMessage()
            _message(data, a, b, name, current)
            if number == 4:
                out.request = current
            else:
                out.response = current
    return out


def read_record(path: Path) -> RequestResponse:
    """The ``RequestResponse`` in file ``path``, or an InputError naming the file and byte."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise InputError(f"mahimahi recording {path}: cannot read it: {e.strerror}") from e
    try:
        record = parse_request_response(data)
    except WireError as e:
        raise InputError(f"mahimahi recording {path}: not a RequestResponse of http_record.proto: "
                         f"byte {e.offset} of {len(data)}: {e.message}") from None
    for name, number, value in (("request", 4, record.request), ("response", 5, record.response)):
        if value is None or not value.first_line:
            raise InputError(f"mahimahi recording {path}: not a RequestResponse of http_record.proto: "
                             f"RequestResponse.{name}({number})"
                             f"{'' if value is None else '.first_line(1)'} is missing ({len(data)} bytes read)")
    if record.scheme not in (None, SCHEME_HTTP, SCHEME_HTTPS):
        raise InputError(f"mahimahi recording {path}: RequestResponse.scheme(3) is {record.scheme} "
                         "(HTTP = 1, HTTPS = 2)")
    return record


# -- from exchanges to a page -----------------------------------------------------------------

#: Response headers not replayed: the connection's and the framing's (nginx frames what it
#: sends), those nginx sets or the replay sets itself (every load fetches everything: caching
#: headers give way to ``Cache-Control: no-store``; ``Timing-Allow-Origin: *`` lets the browser
#: report every object's size and timing), ``Alt-Svc`` (no QUIC here) and the ones served
#: separately (``Content-Type``, ``Location``).
DROPPED_HEADERS = frozenset({
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
    "content-length", "content-range", "accept-ranges", "date", "server", "cache-control", "expires",
    "pragma", "etag", "last-modified", "age", "alt-svc", "timing-allow-origin", "content-type", "location",
    "public-key-pins", "status",
})
#: Statuses replayed as a redirect to the recorded ``Location``.
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: Statuses sent without a body.
BODILESS = frozenset({204, 205, 304})

_TOKEN = re.compile(rb"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_HOST = re.compile(r"^[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*$")
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_HEX = re.compile(rb"^[0-9A-Fa-f]+$")
_STATUS_LINE = re.compile(rb"^HTTP/\d(?:\.\d)? (\d{3})(?: .*)?$")


@dataclass
class RecordedObject:
    """One recorded exchange as the replay serves it.

    ``path`` is the object's absolute URL (``scheme://host[:port]/target``; what a
    :class:`~clawbed.replay.webserver.WebServer` returns as is from ``url()``). ``served``:
    ``body`` (the recorded body with the recorded status), ``redirect`` (to ``location``) or
    ``empty`` (a bodiless status). ``size_bytes`` = body bytes served (as recorded: encoded
    when the recording holds a content-encoded body)."""

    path: str
    scheme: str
    host: str
    port: int
    target: str
    status: int
    kind: str  # html, css, js, image, font, other
    content_type: str | None
    location: str | None
    headers: list[tuple[str, str]]
    served: str
    size_bytes: int
    source: str  # the recording's file name
    body: bytes = field(default=b"", repr=False)

    def index(self, file: str | None) -> dict:
        """The object as the site index lists it (no body; ``file``: its body's path)."""
        out = asdict(self)
        del out["body"]
        out["file"] = file
        return out


def _kind(content_type: str | None, target: str) -> str:
    mime = (content_type or "").split(";")[0].strip().lower()
    ext = urlsplit(target).path.rsplit(".", 1)[-1].lower()
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime == "text/css":
        return "css"
    if "javascript" in mime or "ecmascript" in mime:
        return "js"
    if mime.startswith("image/"):
        return "image"
    if mime.startswith("font/") or "font" in mime:
        return "font"
    if not mime:
        return {"html": "html", "htm": "html", "css": "css", "js": "js", "mjs": "js", "png": "image",
                "jpg": "image", "jpeg": "image", "gif": "image", "webp": "image", "svg": "image",
                "woff": "font", "woff2": "font", "ttf": "font", "otf": "font"}.get(ext, "other")
    return "other"


def dechunk(body: bytes, where: str) -> bytes:
    """The payload of a chunk-framed body (Mahimahi stores a chunked body with its framing); a
    body that does not start with a chunk-size line is taken as already de-chunked."""
    out = bytearray()
    pos = 0
    while True:
        eol = body.find(b"\r\n", pos)
        size_field = body[pos:eol if eol >= 0 else len(body)].split(b";")[0].strip()
        if eol < 0 or not _HEX.match(size_field):
            if pos == 0:
                return body
            raise InputError(f"{where}: chunked body: no valid chunk-size line at byte {pos} of {len(body)}")
        size = int(size_field, 16)
        pos = eol + 2
        if size == 0:
            return bytes(out)  # trailers, if any, are not replayed
        if pos + size + 2 > len(body) or body[pos + size:pos + size + 2] != b"\r\n":
            raise InputError(f"{where}: chunked body: the chunk at byte {pos} ({size} bytes) is cut short "
                             f"or not followed by CRLF ({len(body)} bytes in all)")
        out += body[pos:pos + size]
        pos += size + 2


def _split_host(value: str) -> tuple[str, int | None]:
    """(name, port or None) of a Host header; the name lower-case without a trailing dot."""
    value = value.strip().lower()
    port: int | None = None
    if value.startswith("["):  # an IPv6 literal
        end = value.find("]")
        name, rest = value[:end + 1], value[end + 1:]
        if rest.startswith(":") and rest[1:].isdigit():
            port = int(rest[1:])
        return name, port
    if value.count(":") == 1:
        value, _, port_text = value.partition(":")
        port = int(port_text) if port_text.isdigit() else None
    return value.rstrip("."), port


@dataclass
class _Parsed:
    """An exchange parsed far enough to decide whether and where it is served."""

    obj: RecordedObject | None
    skip: str | None = None  # why it is not served


def _exchange(path: Path, record: RequestResponse) -> _Parsed:
    where = f"mahimahi recording {path}"
    assert record.request is not None and record.response is not None
    line = (record.request.first_line or b"").decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        raise InputError(f"{where}: RequestResponse.request(4).first_line(1) {line[:80]!r} is not an "
                         "HTTP request line (METHOD TARGET HTTP/x.y)")
    method, target = parts[0], parts[1]
    status_line = record.response.first_line
    m = _STATUS_LINE.match(status_line or b"")
    if not m:
        raise InputError(f"{where}: RequestResponse.response(5).first_line(1) "
                         f"{(status_line or b'')[:80].decode('latin-1')!r} is not an HTTP status line")
    status = int(m[1])
    if method != "GET":
        return _Parsed(None, f"a {method} request (only GETs are replayed)")
    if not 200 <= status < 600:
        return _Parsed(None, f"status {status}")
    scheme = "https" if (record.scheme == SCHEME_HTTPS or (record.scheme is None and record.port == 443)) else "http"
    request_headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in record.request.headers}
    if target.startswith(("http://", "https://")):  # absolute-form (through a proxy)
        split = urlsplit(target)
        host_value = split.netloc
        target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    else:
        host_value = request_headers.get("host", "")
    if not target.startswith("/"):
        return _Parsed(None, f"request target {target[:60]!r}")
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in target):
        return _Parsed(None, "a request target with control characters")
    if not host_value:
        raise InputError(f"{where}: the request has no Host header (RequestResponse.request(4).header(2)), "
                         "so its URL is unknown")
    host, host_port = _split_host(host_value)
    if _IPV4.match(host) or host.startswith("["):
        return _Parsed(None, f"host {host} is an IP address (only host names can be resolved to the server)")
    if not _HOST.match(host):
        return _Parsed(None, f"host {host_value!r} is not a host name")
    port = host_port or record.port or (443 if scheme == "https" else 80)
    default = 443 if scheme == "https" else 80
    url = f"{scheme}://{host}{'' if port == default else f':{port}'}{target}"

    headers: list[tuple[str, str]] = []
    content_type = location = None
    chunked = False
    for raw_key, raw_value in record.response.headers:
        key = raw_key.strip()
        value = raw_value.strip().decode("latin-1")
        low = key.decode("latin-1").lower()
        if low == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        if low == "content-type":
            content_type = value
        elif low == "location":
            location = value
        if low in DROPPED_HEADERS or not _TOKEN.match(key) or any(c in value for c in "\r\n\0"):
            continue
        headers.append((key.decode("latin-1"), value))
    body = record.response.body or b""
    if chunked:
        body = dechunk(body, where)
    if status in REDIRECTS and location:
        served = "redirect"
    elif status in BODILESS:
        served = "empty"
    else:
        served = "body"
    if served != "body":
        # nginx writes a redirect's small body itself: no recorded content headers go with it.
        headers = [(k, v) for k, v in headers if k.lower() not in ("content-encoding", "content-language")]
        body, content_type = b"", None
    obj = RecordedObject(path=url, scheme=scheme, host=host, port=port, target=target, status=status,
                         kind=_kind(content_type, target), content_type=content_type,
                         location=location if served == "redirect" else None, headers=headers, served=served,
                         size_bytes=len(body), source=path.name, body=body)
    return _Parsed(obj)


@dataclass
class RecordedPage:
    """A recorded site as a page: ``objects[0]`` is the root (where a load starts), the rest in
    recorded order. Offers what the replay uses of :class:`~clawbed.replay.pages.Page`."""

    name: str
    directory: Path
    objects: list[RecordedObject]
    notes: list[str] = field(default_factory=list)
    seed: int = 0

    @property
    def root(self) -> RecordedObject:
        return self.objects[0]

    @property
    def total_bytes(self) -> int:
        """Body bytes of every served object (a load fetches those its page references)."""
        return sum(o.size_bytes for o in self.objects)

    @property
    def required_bytes(self) -> int:
        """The least a complete load fetches: the HTML document the root leads to (a browser
        fetches what the document references, which need not be every recorded object)."""
        doc = self.document(self.root)
        return doc.size_bytes if doc is not None else 0

    @property
    def hosts(self) -> list[str]:
        """Every host name the recording serves, sorted."""
        return sorted({o.host for o in self.objects})

    def by_url(self, url: str) -> RecordedObject | None:
        key = _url_key(url)
        return next((o for o in self.objects if _url_key(o.path) == key), None)

    def document(self, obj: RecordedObject) -> RecordedObject | None:
        """The HTML document ``obj`` is or leads to through recorded redirects, else None."""
        seen: set[str] = set()
        while obj.path not in seen:
            seen.add(obj.path)
            if obj.served == "body" and 200 <= obj.status < 300 and obj.kind == "html":
                return obj
            if obj.served != "redirect" or obj.location is None:
                return None
            nxt = self.by_url(urljoin(obj.path, obj.location))
            if nxt is None:
                return None
            obj = nxt
        return None

    def manifest(self) -> dict:
        return {"name": self.name, "recording": str(self.directory), "root": self.root.path,
                "total_bytes": self.total_bytes, "required_bytes": self.required_bytes,
                "n_objects": len(self.objects), "hosts": self.hosts, "notes": self.notes,
                "objects": [o.index(None) for o in self.objects]}

    def materialize(self, site_dir: Path) -> Path:
        """Write every body to ``site_dir/objects/<n>``, the site index (``recorded-site.json``:
        what the web server serves at which URL) and ``manifest.json``; return the manifest's path."""
        site_dir = Path(site_dir)
        (site_dir / "objects").mkdir(parents=True, exist_ok=True)
        listed = []
        for n, obj in enumerate(self.objects):
            file = None
            if obj.served == "body":
                file = f"/objects/{n}"
                (site_dir / "objects" / str(n)).write_bytes(obj.body)
            listed.append(obj.index(file))
        with atomic_write(site_dir / SITE_INDEX, "w") as f:
            json.dump({"format": SITE_FORMAT, "name": self.name, "root": self.root.path, "hosts": self.hosts,
                       "objects": listed}, f, indent=1)
        manifest = site_dir / "manifest.json"
        with atomic_write(manifest, "w") as f:
            json.dump(self.manifest(), f, indent=1)
        return manifest


def _url_key(url: str) -> str:
    """What tells served URLs apart: nginx matches them case-insensitively."""
    split = urlsplit(url)
    scheme = split.scheme.lower()
    default = 443 if scheme == "https" else 80
    host, port = (split.hostname or "").rstrip("."), split.port or default
    target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    return f"{scheme}://{host}:{port}{target}".lower()


def recording_files(directory: Path) -> list[Path]:
    """The exchange files of a recording in recorded order: modification time, then name
    (hidden files and subfolders are not part of it)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"mahimahi recording {directory}: no such folder")
    files = [p for p in directory.iterdir() if p.is_file() and not p.name.startswith(".")]
    if not files:
        raise InputError(f"mahimahi recording {directory}: the folder holds no files")
    return sorted(files, key=lambda p: (p.stat().st_mtime_ns, p.name))


def read_recording(directory: Path, root_url: str | None = None, name: str | None = None) -> RecordedPage:
    """The page a Mahimahi recording folder holds (see the module's docstring for the rules)."""
    directory = Path(directory)
    objects: list[RecordedObject] = []
    seen: dict[str, RecordedObject] = {}
    skipped: dict[str, int] = {}
    for path in recording_files(directory):
        parsed = _exchange(path, read_record(path))
        if parsed.obj is None:
            skipped[parsed.skip or "?"] = skipped.get(parsed.skip or "?", 0) + 1
            continue
        key = _url_key(parsed.obj.path)
        if key in seen:
            skipped["a URL recorded before (the first exchange is served)"] = \
                skipped.get("a URL recorded before (the first exchange is served)", 0) + 1
            continue
        seen[key] = parsed.obj
        objects.append(parsed.obj)
    notes = [f"not served: {n} exchange(s): {why}" for why, n in skipped.items()]
    page = RecordedPage(name or f"{PREFIX}{directory.name}", directory, objects, notes)
    if not objects:
        raise InputError(f"mahimahi recording {directory}: no exchange can be served "
                         f"({'; '.join(notes) or 'none recorded'})")
    if root_url is not None:
        root = page.by_url(root_url)
        if root is None:
            raise InputError(f"mahimahi recording {directory}: the root {root_url} is not recorded")
        if page.document(root) is None:
            raise InputError(f"mahimahi recording {directory}: the root {root_url} is not an HTML document "
                             "(2xx text/html) nor a recorded redirect to one")
    else:
        root = next((o for o in objects if page.document(o) is not None), None)
        if root is None:
            raise InputError(f"mahimahi recording {directory}: no recorded HTML document (a GET answered "
                             "2xx with text/html, or a redirect to one) to start a load at")
    page.objects = [root] + [o for o in objects if o is not root]
    return page


def page_from_spec(spec: str) -> RecordedPage:
    """``DIR`` or ``DIR@URL`` (the part of a page name after ``mahimahi:``) → the page."""
    root_url = None
    for marker in ("@https://", "@http://"):
        at = spec.rfind(marker)
        if at >= 0:
            spec, root_url = spec[:at], spec[at + 1:]
            break
    if not spec:
        raise InputError(f"--page {PREFIX}: give the recording's folder ({PREFIX}DIR or {PREFIX}DIR@URL)")
    return read_recording(Path(spec).expanduser(), root_url)
