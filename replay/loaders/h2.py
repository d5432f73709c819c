"""Load a page with an HTTP/2 client (httpx) as a browser would fetch it; print a LoadResult.

Run inside the UE namespace: ``python -m clawbed.replay.loaders.h2 URL [--timeout-s S]
[--http1] [--resolve HOST=ADDRESS …] [--ca-cert PEM]`` (or ``--serve`` instead of a URL: one
load request a line, ``worker.py``; each load has a client and connections of its own). The HTML is fetched first; every
object's references (in HTML the resources its tags load — stylesheets, preloads, scripts,
images, frames — and ``url()`` in its styles; CSS ``url()`` and ``@import``; path and URL
literals of known file types in scripts) and a redirect's ``Location`` are requested as soon as
that object has arrived, all concurrently over one HTTP/2 connection per origin (or up to six
HTTP/1.1 connections, as browsers use per host, ``--http1-connections``; plain ``http://``
origins are HTTP/1.1).
References are followed on the page's origin, or, with ``--resolve``, on every host named
there (a recorded site's); a content-encoded body is decoded to read its references (the
bytes counted are those received). With ``--ca-cert`` the server's certificate is verified
against that CA, else not at all. No parsing, layout or script time: the PLT (first request
start to the last object's end) is the network's share of a browser's PLT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import ssl
import sys
import time
import zlib
from html.parser import HTMLParser
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

from clawbed.replay.loaders.access import parse_resolve
from clawbed.replay.loaders.result import LoadResult, ObjectTiming, protocol_name
from clawbed.replay.loaders.worker import serve

if TYPE_CHECKING:
    import httpx

#: Connections per host a browser opens for HTTP/1.1.
HTTP1_CONNECTIONS = 6
#: The most HTTP/1.1 connections per host this loader is asked for (a browser-like client;
#: Chromium's WebSocket pool, its largest per-host limit, allows 255).
MAX_HTTP1_CONNECTIONS = 64

_CSS_REF = re.compile(r'url\(\s*["\']?([^"\')]+)["\']?\s*\)', re.I)
_CSS_IMPORT = re.compile(r'@import\s+["\']([^"\']+)["\']', re.I)
_JS_REF = re.compile(r'["\']((?:(?:https?:)?//[^"\'\s/]+)?/[^"\'\s?#]*\.(?:html?|css|m?js|png|jpe?g|gif|webp|svg|'
                     r'woff2?|ttf|otf)(?:\?[^"\'\s#]*)?)["\']', re.I)
#: ``<link rel>`` values a browser fetches while loading the page.
_FETCHED_LINKS = frozenset({"stylesheet", "preload", "modulepreload"})


class _HtmlReferences(HTMLParser):
    """The URLs an HTML document's markup makes a browser fetch (as written)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.refs: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k.lower(): v or "" for k, v in attrs}
        if tag == "link" and _FETCHED_LINKS & set(a.get("rel", "").lower().split()):
            self.refs.append(a.get("href", ""))
        elif tag in ("script", "img", "iframe", "frame", "embed") or (tag == "input" and a.get("type") == "image"):
            self.refs.append(a.get("src", ""))
        elif tag == "object":
            self.refs.append(a.get("data", ""))
        elif tag == "video":
            self.refs.append(a.get("poster", ""))
        if "style" in a:
            self.refs += _CSS_REF.findall(a["style"])
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.refs += _CSS_REF.findall(data) + _CSS_IMPORT.findall(data)


def references(body: bytes, content_type: str) -> list[str]:
    """URLs (as written) that an object of ``content_type`` makes a browser fetch."""
    text = body.decode("utf-8", errors="replace")
    content_type = content_type.lower()
    if "html" in content_type:
        parser = _HtmlReferences()
        parser.feed(text)
        parser.close()
        refs = parser.refs
    elif "css" in content_type:
        refs = _CSS_REF.findall(text) + _CSS_IMPORT.findall(text)
    elif "javascript" in content_type or "ecmascript" in content_type:
        refs = _JS_REF.findall(text)
    else:
        return []
    refs = [r.strip() for r in refs]
    return [r for r in refs if r and not r.lower().startswith(("data:", "#", "javascript:", "about:", "blob:"))]


def decoded(body: bytes, content_encoding: str) -> bytes | None:
    """``body`` with its content codings undone (gzip, deflate; br when the brotli module is
    there); None when one cannot be."""
    for coding in reversed([c.strip().lower() for c in content_encoding.split(",") if c.strip()]):
        try:
            if coding in ("gzip", "x-gzip"):
                body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
            elif coding == "deflate":
                try:
                    body = zlib.decompress(body)
                except zlib.error:  # raw deflate, as some servers send it
                    body = zlib.decompress(body, -zlib.MAX_WBITS)
            elif coding == "br":
                import brotli  # not installed here: the load notes what it cannot read
                body = brotli.decompress(body)
            elif coding != "identity":
                return None
        except Exception:  # a decoder's error or no decoder: unreadable
            return None
    return body


def _client(scheme: str, http1: bool, resolve: dict[str, str], ca_cert: str | None,
            http1_connections: int = HTTP1_CONNECTIONS) -> httpx.AsyncClient:
    """A client for one origin: HTTP/2 on one connection for https (unless ``http1``), else
    HTTP/1.1 on up to ``http1_connections``; host names resolved through ``resolve``."""
    import httpcore
    import httpx

    if ca_cert:
        context = ssl.create_default_context(cafile=ca_cert)
    else:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    h2 = scheme == "https" and not http1
    connections = 1 if h2 else http1_connections

    class Resolving(httpcore.AsyncNetworkBackend):
        """Connects to a host name's address from ``resolve`` (no DNS: the UE has none)."""

        def __init__(self) -> None:
            self.inner = httpcore.AnyIOBackend()

        async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                              local_address: str | None = None, socket_options=None):  # noqa: ANN001, ANN202
            address = resolve.get(host.lower(), host)
            return await self.inner.connect_tcp(address, port, timeout=timeout, local_address=local_address,
                                                socket_options=socket_options)

        async def sleep(self, seconds: float) -> None:
            await self.inner.sleep(seconds)

    transport = httpx.AsyncHTTPTransport(verify=context, http1=True, http2=h2,
                                         limits=httpx.Limits(max_connections=connections))
    # httpx has no setting for name resolution: its connection pool is made again with the same
    # settings and the resolving network backend (httpx is pinned in requirements.lock).
    transport._pool = httpcore.AsyncConnectionPool(ssl_context=context, max_connections=connections, http1=True,
                                                   http2=h2, network_backend=Resolving())
    return httpx.AsyncClient(transport=transport, timeout=None, follow_redirects=False,
                             headers={"Cache-Control": "no-cache"})


async def _load(url: str, http1: bool, objects: list[ObjectTiming], failures: list[str], notes: list[str],
                resolve: dict[str, str], ca_cert: str | None, redirects: set[str],
                http1_connections: int = HTTP1_CONNECTIONS) -> float:
    """Fetch ``url`` and everything it references; fill ``objects``; return the PLT, ms."""
    origin = urlsplit(url)
    clients: dict[tuple[str, str], httpx.AsyncClient] = {}

    def followed(target: str) -> bool:
        split = urlsplit(target)
        if split.scheme not in ("http", "https"):
            return False
        if resolve:
            return (split.hostname or "") in resolve
        return split.netloc == origin.netloc

    async with contextlib.AsyncExitStack() as stack:
        def client_for(target: str) -> httpx.AsyncClient:
            split = urlsplit(target)
            key = (split.scheme, split.netloc.lower())
            if key not in clients:
                clients[key] = _client(split.scheme, http1, resolve, ca_cert, http1_connections)
                stack.push_async_callback(clients[key].aclose)
            return clients[key]

        seen = {url}
        t0 = time.perf_counter()

        async def fetch(target: str) -> None:
            start_ms = (time.perf_counter() - t0) * 1000
            size = 0
            keep = bytearray()
            async with client_for(target).stream("GET", target) as response:
                content_type = response.headers.get("content-type", "")
                encoding = response.headers.get("content-encoding", "")
                parse = any(t in content_type.lower() for t in ("html", "css", "javascript", "ecmascript"))
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if parse or encoding:  # an encoded body is decoded for its decoded size
                        keep += chunk
            end_ms = (time.perf_counter() - t0) * 1000
            body = decoded(bytes(keep), encoding) if encoding else bytes(keep)
            objects.append(ObjectTiming(target, round(start_ms, 3), round(end_ms, 3), size,
                                        protocol_name(response.http_version),
                                        size if not encoding else (len(body) if body is not None else None)))
            if response.status_code >= 400:
                failures.append(f"{target} ({response.status_code})")
                return
            refs: list[str] = []
            if 300 <= response.status_code < 400 and "location" in response.headers:
                redirects.add(target)
                refs = [response.headers["location"]]
            elif parse:
                if body is None:
                    notes.append(f"references not read: {target} (content-encoding "
                                 f"{response.headers.get('content-encoding')})")
                else:
                    refs = references(body, content_type)
            children = []
            for ref in refs:
                absolute = urljoin(target, ref).split("#")[0]
                if followed(absolute) and absolute not in seen:
                    seen.add(absolute)
                    children.append(fetch(absolute))
            await asyncio.gather(*children)

        await fetch(url)
        return max(o.end_ms for o in objects)


def load(url: str, timeout_s: float, http1: bool, resolve: dict[str, str] | None = None,
         ca_cert: str | None = None, http1_connections: int = HTTP1_CONNECTIONS) -> LoadResult:
    """One cold load of ``url``; failures become ``ok=False`` with the reason. ``http1_connections``:
    HTTP/1.1 connections per host (a browser's six by default; Mozilla 1.4 used two)."""
    objects: list[ObjectTiming] = []
    failures: list[str] = []
    notes: list[str] = []
    redirects: set[str] = set()
    result = LoadResult(ok=False, loader="h2", url=url, objects=objects, notes=notes)
    try:
        plt_ms = asyncio.run(asyncio.wait_for(
            _load(url, http1, objects, failures, notes, resolve or {}, ca_cert, redirects, http1_connections),
            timeout_s))
    except TimeoutError:
        result.error = f"load of {url} did not finish in {timeout_s} s"
    except Exception as e:  # connection refused, TLS failure, protocol error: report, not crash
        result.error = f"load of {url} failed: {type(e).__name__}: {e}"
    else:
        if failures:
            result.error = f"HTTP errors: {', '.join(failures[:5])}"
        else:
            result.ok, result.plt_ms = True, plt_ms
    result.bytes_total = sum(o.bytes for o in objects)
    if all(o.decoded_bytes is not None for o in objects):
        result.bytes_decoded = sum(o.decoded_bytes or 0 for o in objects)
    # The document's protocol (a redirect that led to it may have come over another).
    result.protocol = next((o.protocol for o in objects if o.url not in redirects), None)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clawbed.replay.loaders.h2", description=__doc__)
    parser.add_argument("url", nargs="?", help="the page to load once (or --serve)")
    parser.add_argument("--serve", action="store_true",
                        help="take load requests on stdin, one JSON line each, until it ends (worker.py)")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="load timeout, seconds")
    parser.add_argument("--http1", action="store_true", help="use HTTP/1.1 (six connections) instead of HTTP/2")
    parser.add_argument("--resolve", action="append", metavar="HOST=ADDRESS",
                        help="connect to ADDRESS for HOST (repeatable); references are followed on these hosts")
    parser.add_argument("--ca-cert", help="verify the server's certificate against this CA (PEM)")
    parser.add_argument("--http1-connections", type=int, default=HTTP1_CONNECTIONS,
                        help=f"HTTP/1.1 connections per host (default {HTTP1_CONNECTIONS}, as browsers)")
    parser.add_argument("--cert-spki", help="the certificate's key (the browser pins it; unused here)")
    parser.add_argument("--server-address", help="the server's address (the browser's; this client resolves no "
                                                 "name but --resolve's anyway)")
    args = parser.parse_args(argv)
    if (args.url is None) == (not args.serve):
        parser.error("give a URL or --serve, not both")
    if not 1 <= args.http1_connections <= MAX_HTTP1_CONNECTIONS:
        parser.error(f"--http1-connections {args.http1_connections}: must be 1..{MAX_HTTP1_CONNECTIONS}")
    resolve = parse_resolve(args.resolve)
    if args.serve:
        return serve(lambda url, timeout_s: load(url, timeout_s, args.http1, resolve, args.ca_cert,
                                                 args.http1_connections), "h2")
    result = load(args.url, args.timeout_s, args.http1, resolve, args.ca_cert, args.http1_connections)
    print(result.to_json(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
