"""Mahimahi recordings as pages (``--page mahimahi:DIR``): the reader of ``http_record.proto``
files, the page a recording makes, nginx serving it under every recorded host name, and full
replays of it with both loaders over the emulated cell.

Recordings are written here in Mahimahi's wire format by an encoder of this file's own (and,
when the protobuf package is there, checked against it)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from clawbed.errors import InputError
from clawbed.netns import Endpoint, Resources, new_run_id
from clawbed.paths import REPO_ROOT
from clawbed.replay import mahimahi
from clawbed.replay.loaders import run_load
from clawbed.replay.pages import get_page
from clawbed.replay.rundir import read_results
from clawbed.replay.webserver import WebServer, read_access_log

TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
UE_ADDR, SERVER_ADDR = "10.204.0.1", "10.204.0.2"


# -- an encoder of http_record.proto's wire format, written from the format's rules ------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _uint_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | 0) + _varint(value)


def encode_message(first_line: bytes, headers: list[tuple[bytes, bytes]], body: bytes | None) -> bytes:
    out = _len_field(1, first_line)
    for key, value in headers:
        out += _len_field(2, _len_field(1, key) + _len_field(2, value))
    if body is not None:
        out += _len_field(3, body)
    return out


def encode_record(ip: str, port: int, scheme: int, request: bytes, response: bytes) -> bytes:
    return (_len_field(1, ip.encode()) + _uint_field(2, port) + _uint_field(3, scheme)
            + _len_field(4, request) + _len_field(5, response))


@dataclass
class Exchange:
    """One recorded request/response, as a test states it."""

    url: str
    status: int = 200
    content_type: str | None = "text/html"
    body: bytes = b""
    headers: list[tuple[str, str]] = field(default_factory=list)  # further response headers
    method: str = "GET"
    chunked: bool = False  # store the body chunk-framed, as Mahimahi does for a chunked response

    def encode(self) -> bytes:
        split = urlsplit(self.url)
        scheme = 2 if split.scheme == "https" else 1
        port = split.port or (443 if scheme == 2 else 80)
        target = (split.path or "/") + (f"?{split.query}" if split.query else "")
        request = encode_message(f"{self.method} {target} HTTP/1.1".encode(),
                                 [(b"Host", split.netloc.encode()), (b"User-Agent", b"Mozilla/5.0 test"),
                                  (b"Accept", b"*/*")], b"" if self.method == "POST" else None)
        headers = [(b"Date", b"Tue, 01 Apr 2025 10:00:00 GMT"), (b"Server", b"recorded-origin/1.0"),
                   (b"Cache-Control", b"max-age=3600"), (b"ETag", b'"abc"')]
        if self.content_type:
            headers.append((b"Content-Type", self.content_type.encode()))
        headers += [(k.encode(), v.encode()) for k, v in self.headers]
        body = self.body
        if self.chunked:
            headers.append((b"Transfer-Encoding", b"chunked"))
            pieces = [body[i:i + 1000] for i in range(0, len(body), 1000)]
            body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        else:
            headers.append((b"Content-Length", str(len(body)).encode()))
        reason = {200: b"OK", 301: b"Moved Permanently", 204: b"No Content", 404: b"Not Found"}.get(self.status, b"X")
        response = encode_message(b"HTTP/1.1 %d %s" % (self.status, reason), headers, body)
        return encode_record("93.184.216.34", port, scheme, request, response)


def write_recording(folder: Path, exchanges: list[Exchange]) -> Path:
    """One file per exchange, named at random as mm-webrecord does, modification times in
    the order given (the order of a recording)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(7)
    for n, exchange in enumerate(exchanges):
        path = folder / f"save.{rng.randrange(16**6):06x}{n}"
        path.write_bytes(exchange.encode())
        t_ns = 1_700_000_000_000_000_000 + n * 1_000_000
        os.utime(path, ns=(t_ns, t_ns))
    return folder


# -- a recorded site: three hosts, two schemes, the real types of a page ------------------------

def _png(seed: int, side: int) -> bytes:
    """A valid PNG of random pixels (incompressible, so it keeps its size on any path)."""
    from PIL import Image

    rng = random.Random(seed)
    image = Image.frombytes("RGB", (side, side), bytes(rng.randrange(256) for _ in range(side * side * 3)))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


ROOT = "http://example.test/"
DOC = "https://www.example.test/"
CSS = "https://static.cdn.test/css/site.css"
LOGO = "https://static.cdn.test/img/logo.png"
BACKGROUND = "https://static.cdn.test/img/bg.png"
SCRIPT = "https://www.example.test/app.js?v=3"
HTML = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><title>recorded</title>'
        f'<link rel="stylesheet" crossorigin href="{CSS}"></head><body><h1>A recorded page</h1>'
        f'<div class="hero"></div><img src="{LOGO}" width="32" height="32" alt="">'
        f'<p><a href="/about">not fetched: a link</a></p>'
        + "<p>" + "words of the recorded page " * 400 + "</p>"
        + '<script src="/app.js?v=3"></script></body></html>').encode()
STYLE = (b'.hero{width:40px;height:40px;background-image:url("/img/bg.png")}\n'
         + b"".join(b".unused-%d{margin:%dpx}\n" % (i, i % 40) for i in range(300)))
SCRIPT_BODY = (b'document.documentElement.setAttribute("data-recorded", "yes");\n'
               + b"".join(b"var v%d = %d;\n" % (i, i * 7) for i in range(500)))


def site_exchanges() -> list[Exchange]:
    """The recording: an http:// root redirecting to the https:// document (gzip-encoded,
    stored chunked), a stylesheet and images on a CDN host (the stylesheet loading a
    background image), a script with a query; then what is not a page object: a POST, a
    second GET of the document (the first one counts), a host given as an IP address, an
    unreferenced 404 with a body and a 204 beacon."""
    return [
        Exchange(ROOT, status=301, body=b"<html>moved</html>", headers=[("Location", DOC)]),
        Exchange(DOC, content_type="text/html; charset=utf-8", body=gzip.compress(HTML, mtime=0), chunked=True,
                 headers=[("Content-Encoding", "gzip"), ("Set-Cookie", "session=1; Path=/"),
                          ("Set-Cookie", "theme=dark; Path=/"), ("Vary", "Accept-Encoding")]),
        Exchange(CSS, content_type="text/css", body=STYLE, headers=[("Access-Control-Allow-Origin", "*")]),
        Exchange(LOGO, content_type="image/png", body=_png(1, 90)),
        Exchange(BACKGROUND, content_type="image/png", body=_png(2, 60)),
        Exchange(SCRIPT, content_type="application/javascript", body=SCRIPT_BODY,
                 headers=[("X-Recorded", 'price $5 "quoted" \\ back')]),
        Exchange("https://www.example.test/api/log", method="POST", content_type="application/json", body=b"{}"),
        Exchange(DOC, content_type="text/html", body=b"<html>a later visit</html>"),
        Exchange("http://10.1.2.3/direct.js", content_type="application/javascript", body=b"1;"),
        Exchange("https://www.example.test/missing.png", status=404, content_type="text/plain",
                 body=b"no such image"),
        Exchange("https://www.example.test/beacon?id=1", status=204, content_type=None),
    ]


#: The objects a load of the page fetches, with the body bytes each is served with.
PAGE_OBJECTS = {DOC: len(gzip.compress(HTML, mtime=0)), CSS: len(STYLE), LOGO: len(_png(1, 90)),
                BACKGROUND: len(_png(2, 60)), SCRIPT: len(SCRIPT_BODY)}


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    return write_recording(tmp_path / "recorded-site", site_exchanges())


# -- the reader ---------------------------------------------------------------------------------

def _protobuf_classes():
    """Mahimahi's messages built by the protobuf package from the .proto's definitions."""
    pb = pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    assert pb
    f = descriptor_pb2.FileDescriptorProto(name="http_record.proto", package="MahimahiProtobufs", syntax="proto2")
    T = descriptor_pb2.FieldDescriptorProto
    opt, rep = T.LABEL_OPTIONAL, T.LABEL_REPEATED
    msg = f.message_type.add(name="HTTPMessage")
    msg.field.add(name="first_line", number=1, type=T.TYPE_BYTES, label=opt)
    msg.field.add(name="header", number=2, type=T.TYPE_MESSAGE, type_name=".MahimahiProtobufs.HTTPHeader", label=rep)
    msg.field.add(name="body", number=3, type=T.TYPE_BYTES, label=opt)
    hdr = f.message_type.add(name="HTTPHeader")
    hdr.field.add(name="key", number=1, type=T.TYPE_BYTES, label=opt)
    hdr.field.add(name="value", number=2, type=T.TYPE_BYTES, label=opt)
    rr = f.message_type.add(name="RequestResponse")
    scheme = rr.enum_type.add(name="Scheme")
    scheme.value.add(name="HTTP", number=1)
    scheme.value.add(name="HTTPS", number=2)
    rr.field.add(name="ip", number=1, type=T.TYPE_STRING, label=opt)
    rr.field.add(name="port", number=2, type=T.TYPE_UINT32, label=opt)
    rr.field.add(name="scheme", number=3, type=T.TYPE_ENUM, type_name=".MahimahiProtobufs.RequestResponse.Scheme",
                 label=opt)
    rr.field.add(name="request", number=4, type=T.TYPE_MESSAGE, type_name=".MahimahiProtobufs.HTTPMessage", label=opt)
    rr.field.add(name="response", number=5, type=T.TYPE_MESSAGE, type_name=".MahimahiProtobufs.HTTPMessage", label=opt)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("MahimahiProtobufs.RequestResponse"))


def test_this_files_encoder_writes_what_protobuf_writes() -> None:
    RequestResponse = _protobuf_classes()
    exchange = Exchange(CSS, content_type="text/css", body=STYLE, headers=[("Access-Control-Allow-Origin", "*")])
    ours = exchange.encode()
    theirs = RequestResponse()
    theirs.ParseFromString(ours)
    assert theirs.port == 443 and theirs.scheme == 2 and theirs.request.first_line == b"GET /css/site.css HTTP/1.1"
    assert theirs.SerializeToString() == ours


def test_reader_decodes_protobuf_encoded_records_field_by_field() -> None:
    RequestResponse = _protobuf_classes()
    record = RequestResponse(ip="10.0.0.9", port=8443, scheme=2)
    record.request.first_line = b"GET /x?y=1 HTTP/1.1"
    record.request.header.add(key=b"Host", value=b"a.test:8443")
    record.response.first_line = b"HTTP/1.1 200 OK"
    for i in range(3):
        record.response.header.add(key=b"X-N", value=str(i).encode())
    record.response.body = bytes(range(256)) * 700  # a length that needs a three-byte varint
    data = record.SerializeToString()
    # Fields the schema does not have are skipped, as protobuf readers do.
    data += _uint_field(9, 300) + _len_field(10, b"extension") + _varint(11 << 3 | 5) + b"\x01\x02\x03\x04"
    parsed = mahimahi.parse_request_response(data)
    assert (parsed.ip, parsed.port, parsed.scheme) == ("10.0.0.9", 8443, 2)
    assert parsed.request.first_line == b"GET /x?y=1 HTTP/1.1"
    assert parsed.request.headers == [(b"Host", b"a.test:8443")]
    assert parsed.response.headers == [(b"X-N", b"0"), (b"X-N", b"1"), (b"X-N", b"2")]
    assert parsed.response.body == bytes(range(256)) * 700


def test_a_recording_becomes_a_page(recording: Path) -> None:
    page = get_page(f"mahimahi:{recording}")
    assert isinstance(page, mahimahi.RecordedPage) and page.name == "mahimahi:recorded-site"
    # The root: the first recorded GET leading to an HTML document — the http:// redirect.
    assert page.root.path == ROOT and page.root.served == "redirect" and page.root.location == DOC
    urls = [o.path for o in page.objects]
    assert urls == [ROOT, DOC, CSS, LOGO, BACKGROUND, SCRIPT, "https://www.example.test/missing.png",
                    "https://www.example.test/beacon?id=1"]
    by_url = {o.path: o for o in page.objects}
    assert {u: by_url[u].size_bytes for u in PAGE_OBJECTS} == PAGE_OBJECTS
    doc = by_url[DOC]
    # De-chunked, still gzip-encoded as recorded, with its encoding; caching and framing headers dropped.
    assert doc.body == gzip.compress(HTML, mtime=0) and doc.kind == "html"
    assert doc.content_type == "text/html; charset=utf-8"
    assert doc.headers == [("Content-Encoding", "gzip"), ("Set-Cookie", "session=1; Path=/"),
                           ("Set-Cookie", "theme=dark; Path=/"), ("Vary", "Accept-Encoding")]
    assert [o.kind for o in page.objects[2:6]] == ["css", "image", "image", "js"]
    assert by_url[SCRIPT].target == "/app.js?v=3" and by_url[SCRIPT].port == 443
    assert by_url["https://www.example.test/missing.png"].status == 404
    assert by_url["https://www.example.test/beacon?id=1"].served == "empty"
    assert page.hosts == ["example.test", "static.cdn.test", "www.example.test"]
    assert page.required_bytes == PAGE_OBJECTS[DOC]
    assert page.total_bytes == sum(PAGE_OBJECTS.values()) + len(b"no such image")
    assert any("POST" in n for n in page.notes) and any("recorded before" in n for n in page.notes)
    assert any("IP address" in n for n in page.notes)


def test_the_root_rule_and_its_override(tmp_path: Path) -> None:
    # Recorded order is the files' modification times, not their names: the iframe's document
    # finished after the page's.
    folder = write_recording(tmp_path / "frames", [
        Exchange("https://a.test/logo.png", content_type="image/png", body=b"\x89PNG"),
        Exchange("https://a.test/page", body=b"<html><iframe src='/frame'></iframe></html>"),
        Exchange("https://a.test/frame", body=b"<html>frame</html>"),
    ])
    files = mahimahi.recording_files(folder)
    assert [mahimahi.read_record(f).request.first_line for f in files] == [
        b"GET /logo.png HTTP/1.1", b"GET /page HTTP/1.1", b"GET /frame HTTP/1.1"]
    assert get_page(f"mahimahi:{folder}").root.path == "https://a.test/page"
    assert get_page(f"mahimahi:{folder}@https://a.test/frame").root.path == "https://a.test/frame"
    with pytest.raises(InputError, match=r"the root https://a.test/nothing is not recorded"):
        get_page(f"mahimahi:{folder}@https://a.test/nothing")
    with pytest.raises(InputError, match=r"https://a.test/logo.png is not an HTML document"):
        get_page(f"mahimahi:{folder}@https://a.test/logo.png")
    images = write_recording(tmp_path / "images", [Exchange("https://a.test/x.png", content_type="image/png",
                                                           body=b"x")])
    with pytest.raises(InputError, match=r"no recorded HTML document"):
        get_page(f"mahimahi:{images}")


def _one_file(tmp_path: Path, data: bytes, name: str = "save.bad") -> Path:
    folder = tmp_path / "rec"
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(data)
    return folder / name


@pytest.mark.parametrize("cut", [1, 40, 150, -3])
def test_a_truncated_file_is_refused_naming_it_and_the_byte(tmp_path: Path, cut: int) -> None:
    data = Exchange(CSS, content_type="text/css", body=STYLE).encode()
    bad = _one_file(tmp_path, data[:cut])
    with pytest.raises(InputError) as e:
        get_page(f"mahimahi:{bad.parent}")
    message = str(e.value)
    assert str(bad) in message and "\n" not in message
    assert "not a RequestResponse of http_record.proto" in message
    assert "byte" in message, message
    if cut == -3:  # cut inside the response's body: the length runs past the end
        assert "RequestResponse: field 5: length" in message and "runs past the end" in message


@pytest.mark.parametrize("data,expected", [
    (bytes(random.Random(3).randrange(256) for _ in range(500)), r"byte \d+ of 500"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", r"byte \d+ of 27"),
    (b"", r"RequestResponse\.request\(4\) is missing \(0 bytes read\)"),
    (_uint_field(4, 7),
     r"byte 0 of 2: RequestResponse\.request\(4\): wire type 0 \(varint\), expected length-delimited"),
    (_len_field(4, _len_field(2, _uint_field(1, 5))),
     r"byte 4 of 6: RequestResponse\.request\(4\)\.header\(2\)\[0\]\.key\(1\): wire type 0"),
    (_len_field(4, encode_message(b"GET / HTTP/1.1", [(b"Host", b"a.test")], None)),
     r"RequestResponse\.response\(5\) is missing"),
    (_varint(4 << 3 | 3), r"wire type 3 \(start-group\) is not used by http_record.proto"),
    (b"\xff" * 12, r"byte 0 of 12: RequestResponse: varint longer than 10 bytes"),
])
def test_garbage_is_refused_naming_the_file_and_what_is_wrong(tmp_path: Path, data: bytes, expected: str) -> None:
    bad = _one_file(tmp_path, data)
    with pytest.raises(InputError, match=expected) as e:
        mahimahi.read_record(bad)
    assert str(e.value).startswith(f"mahimahi recording {bad}: ")


def test_records_that_parse_but_cannot_be_served_are_named(tmp_path: Path) -> None:
    not_http = encode_record("1.2.3.4", 80, 1, encode_message(b"HELLO", [], None),
                             encode_message(b"HTTP/1.1 200 OK", [], b""))
    bad = _one_file(tmp_path, not_http)
    with pytest.raises(InputError, match=r"request\(4\)\.first_line\(1\) 'HELLO' is not an HTTP request line"):
        get_page(f"mahimahi:{bad.parent}")
    cut_chunks = encode_record("1.2.3.4", 443, 2, encode_message(b"GET / HTTP/1.1", [(b"Host", b"a.test")], None),
                               encode_message(b"HTTP/1.1 200 OK", [(b"Transfer-Encoding", b"chunked")],
                                              b"400\r\nonly a few bytes"))
    bad = _one_file(tmp_path, cut_chunks)
    with pytest.raises(InputError, match=rf"{bad}: chunked body: the chunk at byte 5 \(1024 bytes\) is cut short"):
        get_page(f"mahimahi:{bad.parent}")
    for spec, message in [(f"mahimahi:{tmp_path / 'none'}", "no such folder"),
                          ("mahimahi:", "give the recording's folder")]:
        with pytest.raises(InputError, match=message):
            get_page(spec)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="the folder holds no files"):
        get_page(f"mahimahi:{tmp_path / 'empty'}")


def test_replay_refuses_a_bad_recording_in_one_line(clawbed_cli: Path, tmp_path: Path) -> None:
    bad = _one_file(tmp_path, b"\x0a\x05abc")
    proc = subprocess.run([str(clawbed_cli), "replay", "--page", f"mahimahi:{bad.parent}", "--runs-dir",
                           str(tmp_path / "runs"), "--schemes", "cubic", "--runs", "1"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert str(bad) in proc.stderr and "byte" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# -- nginx serving the recording (root) --------------------------------------------------------

def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


@pytest.fixture
def served(recording: Path, tmp_path: Path):
    """The recording materialized and served by nginx in a server namespace joined to a UE
    namespace by a veth; yields (res, ue namespace, web server, page)."""
    _needs_root()
    page = get_page(f"mahimahi:{recording}")
    page.materialize(tmp_path / "site")
    with Resources(new_run_id(), tmp_path / "run" / "ledger.jsonl") as res:
        ue, srv = res.namespace("ue"), res.namespace("sv")
        res.veth(Endpoint(ue, res.name("vu"), UE_ADDR), Endpoint(srv, res.name("vs"), SERVER_ADDR))
        yield res, ue, WebServer(res, srv, tmp_path / "site", SERVER_ADDR), page


#: Fetches URLs as the h2 loader does (its resolving, CA-verifying clients) and prints, per
#: URL, the status, protocol, headers and the SHA-256 and length of the body as received.
_FETCH = r"""
import asyncio, hashlib, json, sys
from clawbed.replay.loaders.h2 import _client
from clawbed.replay.loaders.access import parse_resolve
resolve, ca, urls = parse_resolve(json.loads(sys.argv[1])), sys.argv[2], json.loads(sys.argv[3])
async def main():
    out = {}
    for url in urls:
        try:
            client = _client(url.split(":")[0], False, resolve, ca)
            async with client:
                async with client.stream("GET", url) as r:
                    body = b"".join([c async for c in r.aiter_raw()])
            out[url] = {"status": r.status_code, "version": r.http_version, "headers": r.headers.multi_items(),
                        "sha256": hashlib.sha256(body).hexdigest(), "len": len(body)}
        except Exception as e:
            out[url] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
asyncio.run(main())
"""


def _fetch(ue, web: WebServer, urls: list[str], resolve: list[str] | None = None) -> dict:
    resolve = resolve if resolve is not None else [f"{h}={web.address}" for h in web.hosts]
    proc = ue.run([sys.executable, "-c", _FETCH, json.dumps(resolve), web.access.ca_cert, json.dumps(urls)])
    return json.loads(proc.stdout)


def test_nginx_serves_every_recorded_url_as_recorded(served) -> None:
    res, ue, web, page = served
    assert set(web.hosts) == {"example.test", "www.example.test", "static.cdn.test"}
    extra = ["https://www.example.test/about", "https://static.cdn.test/app.js?v=3", "https://www.example.test/app.js",
             "https://www.example.test/APP.JS?v=3"]
    got = _fetch(ue, web, [o.path for o in page.objects] + extra)
    for obj in page.objects:
        r = got[obj.path]
        assert "error" not in r, (obj.path, r)
        headers: dict[str, list[str]] = {}
        for k, v in r["headers"]:
            headers.setdefault(k.lower(), []).append(v)
        assert r["version"] == ("HTTP/2" if obj.scheme == "https" else "HTTP/1.1"), obj.path
        assert r["status"] == obj.status, obj.path
        assert headers["cache-control"] == ["no-store"] and headers["timing-allow-origin"] == ["*"]
        assert "etag" not in headers and "last-modified" not in headers
        if obj.served == "body":
            assert r["sha256"] == hashlib.sha256(obj.body).hexdigest() and r["len"] == obj.size_bytes, obj.path
            assert headers["content-type"] == [obj.content_type], obj.path
        for name in {k.lower() for k, _ in obj.headers}:
            assert headers[name] == [v for k, v in obj.headers if k.lower() == name], (obj.path, name)
    assert got[ROOT]["status"] == 301 and dict(got[ROOT]["headers"])["location"] == DOC
    assert dict(got[DOC]["headers"])["content-encoding"] == "gzip"
    assert dict(got[SCRIPT]["headers"])["x-recorded"] == 'price $5 "quoted" \\ back'
    assert got["https://www.example.test/beacon?id=1"]["len"] == 0
    # Not recorded: another path, another host's path, the path without its query → 404. (nginx
    # compares recorded URLs case-insensitively.)
    assert [got[u]["status"] for u in extra] == [404, 404, 404, 200]
    # The certificate is the run CA's, for every host name (verified: check_hostname is on).
    unknown = _fetch(ue, web, ["https://other.test/"], resolve=[f"other.test={web.address}"])
    assert "CERTIFICATE_VERIFY_FAILED" in unknown["https://other.test/"]["error"]
    log = {r.url: r for r in web.requests()}
    assert log[SCRIPT].status == 200 and log[SCRIPT].host == "www.example.test" and log[SCRIPT].body_bytes == len(
        SCRIPT_BODY)


def test_both_loaders_load_the_recorded_page(served) -> None:
    res, ue, web, page = served
    for loader in ("browser", "h2"):
        result = run_load(res, ue, page.root.path, loader=loader, timeout_s=60, access=web.access)
        assert result.ok, result.error
        # Chromium asks for the document's /favicon.ico, which this recording lacks: noted, not a failure.
        favicon = [n for n in result.notes if "favicon" in n or "404" in n]
        assert result.notes == favicon, result.notes
        if loader == "browser":
            assert "favicon not loaded: https://www.example.test/favicon.ico (404)" in result.notes
        fetched = {o.url: o.bytes for o in result.objects}
        assert {u: fetched.get(u) for u in PAGE_OBJECTS} == PAGE_OBJECTS, (loader, fetched)
        assert result.protocol == "h2" and result.plt_ms > 0
    served_urls = [r.url for r in web.requests()]
    assert "https://www.example.test/about" not in served_urls  # a link is not a resource
    assert {r.status for r in web.requests() if r.status >= 400} <= {404}
    assert {r.url for r in web.requests() if r.status >= 400} <= {"https://www.example.test/favicon.ico"}
    assert all(served_urls.count(u) == 2 for u in PAGE_OBJECTS) and served_urls.count(ROOT) == 2


# -- full replays through the emulated cell (root) ---------------------------------------------

@pytest.mark.parametrize("loader,http", [("h2", "2"), ("browser", "2"), ("browser", "1.1")])
def test_replay_of_a_recording_over_the_cell(clawbed_cli: Path, recording: Path, tmp_path: Path, loader: str,
                                             http: str) -> None:
    _needs_root()
    name = f"mm-{loader}-{http}"
    proc = subprocess.run([str(clawbed_cli), "replay", "--trace", str(TRACE), "--page", f"mahimahi:{recording}",
                           "--runs-dir", str(tmp_path), "--name", name, "--schemes", "cubic", "--runs", "2",
                           "--loader", loader, "--http", http], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run_dir = tmp_path / name
    records = read_results(run_dir)
    assert len(records) == 2
    protocol = "h2" if http == "2" else "http/1.1"
    for r in records:
        assert r.ok, r.error
        assert r.plt_ms > 0 and r.protocol == protocol
        objects = {o["url"]: o for o in r.objects}
        assert {u: objects[u]["bytes"] for u in PAGE_OBJECTS} == PAGE_OBJECTS
        assert {objects[u]["protocol"] for u in PAGE_OBJECTS} == {protocol}
        assert r.bytes_total >= sum(PAGE_OBJECTS.values())
    # nginx served every recorded page object to every load, with the recorded bytes, under
    # its own host name and scheme; nothing unrecorded was asked for.
    (log_path,) = run_dir.glob("web-*/logs/access.log")
    log = read_access_log(log_path)
    # Nothing unrecorded was asked for but the browser's favicon (this recording has none).
    assert {e.url for e in log if e.status >= 400} <= {"https://www.example.test/favicon.ico"}
    # Every attempt fetched it: the 2 kept loads and any re-run because the emulator fell
    # behind during an attempt (its discarded attempt still asked nginx).
    attempts = len(records) + sum(r.late_reruns for r in records)
    for url, size in PAGE_OBJECTS.items():
        hits = [e for e in log if e.url == url]
        assert len(hits) == attempts and {e.body_bytes for e in hits} == {size}, (url, attempts, hits)
        assert {e.protocol for e in hits} == {"HTTP/2.0" if http == "2" else "HTTP/1.1"}
    assert [e.status for e in log if e.url == ROOT] == [301] * attempts
    site = json.loads((run_dir / "site" / "manifest.json").read_text())
    assert site["root"] == ROOT and site["name"] == "mahimahi:recorded-site"
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "complete"
    assert "PLT per scheme" in proc.stdout


# -- a site recorded over plain http://, two objects fetched after onload (root) ---------------

SHOP = "http://shop.test/"
#: What an onload handler fetches 100 ms after the load event (as a page's deferred images).
LATE = ("http://shop.test/img/late1.png", "http://shop.test/img/late2.png")
SHOP_HTML = ('<!DOCTYPE html><html><head><meta charset="utf-8"><title>shop</title><link rel="icon" href="data:,">'
             '<link rel="stylesheet" href="/css/shop.css"></head><body><div class="hero"></div>'
             '<img src="/img/a.png" alt=""><img src="/img/b.png" alt="">'
             + "<p>" + "an item of the shop " * 300 + "</p>"
             + '<script src="/js/shop.js"></script><script>addEventListener("load", function () {'
             'setTimeout(function () {' + "".join(
                 f'var i{n} = new Image(); i{n}.src = "{urlsplit(u).path}"; document.body.appendChild(i{n});'
                 for n, u in enumerate(LATE)) + "}, 100); });</script></body></html>").encode()
SHOP_CSS = b'.hero{width:40px;height:40px;background-image:url("/img/bg.png")}\n' + b".x{margin:0}\n" * 200
SHOP_JS = (b'var c = document.createElement("img"); c.src = "/img/c.png"; document.body.appendChild(c);\n'
           + b"".join(b"var w%d = %d;\n" % (i, i) for i in range(300)))


def shop_exchanges() -> list[Exchange]:
    """Nine objects over http:// only (as mm-webrecord recorded a site with headless Chromium):
    the document, a stylesheet with a background image, a script inserting an image, two
    images, and two images its onload handler fetches later."""
    return [
        Exchange(SHOP, content_type="text/html; charset=utf-8", body=SHOP_HTML),
        Exchange("http://shop.test/css/shop.css", content_type="text/css", body=SHOP_CSS),
        Exchange("http://shop.test/js/shop.js", content_type="application/javascript", body=SHOP_JS),
        Exchange("http://shop.test/img/a.png", content_type="image/png", body=_png(11, 80)),
        Exchange("http://shop.test/img/b.png", content_type="image/png", body=_png(12, 70)),
        Exchange("http://shop.test/img/bg.png", content_type="image/png", body=_png(13, 50)),
        Exchange("http://shop.test/img/c.png", content_type="image/png", body=_png(14, 60)),
        Exchange(LATE[0], content_type="image/png", body=_png(15, 120)),
        Exchange(LATE[1], content_type="image/png", body=_png(16, 110)),
    ]


def test_a_plain_http_recording_is_reported_as_it_was_loaded(clawbed_cli: Path, tmp_path: Path) -> None:
    """A recorded site over http:// (issue 21): the run's header names the protocol the loads
    really use (HTTP/1.1 over plain HTTP, not the HTTP/2 offered on TLS); the server's TCP
    sampler watches port 80 too, so every load has a TCP series; and every load counts the
    same objects — those fetched after onload included — not whichever won a race."""
    _needs_root()
    exchanges = shop_exchanges()
    folder = write_recording(tmp_path / "recorded-shop", exchanges)
    sizes = {e.url: len(e.body) for e in exchanges}
    proc = subprocess.run([str(clawbed_cli), "replay", "--trace", str(TRACE), "--page", f"mahimahi:{folder}",
                           "--runs-dir", str(tmp_path / "runs"), "--name", "shop", "--schemes", "cubic", "--runs", "2",
                           "--loader", "browser", "--http", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    said = " ".join(proc.stderr.split())  # the console wraps long lines
    assert "browser loader, HTTP/1.1 over plain HTTP" in said and "loader, HTTP/2" not in said, said
    assert "protocol of the loads: http/1.1 (2 load(s))" in said, said
    run_dir = tmp_path / "runs" / "shop"
    records = read_results(run_dir)
    assert len(records) == 2
    for r in records:
        assert r.ok and r.protocol == "http/1.1", r.error
        # The TCP series of the load's port-80 flows (the sampler watched 443 only before).
        tcp = (run_dir / r.load_dir / "tcp.csv").read_text().splitlines()
        assert len(tcp) > 1 and r.flows and r.flows >= 1, (r.load, len(tcp), r.flows)
        # Every object, the two fetched after onload too, in every load.
        objects = {o["url"]: o["bytes"] for o in r.objects}
        assert objects == sizes, (r.load, sorted(set(sizes) - set(objects)))
        assert r.n_objects == len(exchanges) and r.bytes_total == sum(sizes.values())
        assert all(o["protocol"] == "http/1.1" for o in r.objects)
        late = [o for o in r.objects if o["url"] in LATE]
        assert all(o["start_ms"] > r.plt_ms for o in late), (r.plt_ms, late)  # really after onload
