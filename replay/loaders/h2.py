"""Load a page with an HTTP/2 client (httpx) as a browser would fetch it; print a LoadResult.

Run inside the UE namespace: ``python -m clawbed.replay.loaders.h2 URL [--timeout-s S]
[--http1]``. The HTML is fetched first; every object's references (HTML ``src``/``href``,
CSS ``url()``, path literals in scripts) are requested as soon as that object has arrived,
all concurrently over one HTTP/2 connection (or up to six HTTP/1.1 connections, as browsers
use per host). No parsing, layout or script time: the PLT (first request start to the last
object's end) is the network's share of a browser's PLT.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from urllib.parse import urljoin, urlsplit

from clawbed.replay.loaders.result import LoadResult, ObjectTiming, protocol_name

#: Connections per host a browser opens for HTTP/1.1.
HTTP1_CONNECTIONS = 6

_HTML_REF = re.compile(r'(?:src|href)\s*=\s*["\']([^"\']+)["\']', re.I)
_CSS_REF = re.compile(r'url\(\s*["\']?([^"\')]+)["\']?\s*\)', re.I)
_JS_REF = re.compile(r'["\'](/[^"\'\s]+\.(?:html?|css|m?js|png|jpe?g|gif|webp|svg|woff2?|ttf|otf))["\']', re.I)


def references(body: bytes, content_type: str) -> list[str]:
    """URLs (as written) that an object of ``content_type`` makes a browser fetch."""
    text = body.decode("utf-8", errors="replace")
    if "html" in content_type:
        refs = _HTML_REF.findall(text) + _CSS_REF.findall(text)
    elif "css" in content_type:
        refs = _CSS_REF.findall(text)
    elif "javascript" in content_type:
        refs = _JS_REF.findall(text)
    else:
        return []
    return [r for r in refs if not r.startswith(("data:", "#", "javascript:"))]


async def _load(url: str, http1: bool, objects: list[ObjectTiming], failures: list[str]) -> float:
    """Fetch ``url`` and everything it references; fill ``objects``; return the PLT, ms."""
    import httpx

    limits = httpx.Limits(max_connections=HTTP1_CONNECTIONS if http1 else 1)
    async with httpx.AsyncClient(http1=True, http2=not http1, verify=False, limits=limits,
                                 timeout=None, headers={"Cache-Control": "no-cache"}) as client:
        origin = urlsplit(url)
        seen = {url}
        t0 = time.perf_counter()

        async def fetch(target: str) -> None:
            start_ms = (time.perf_counter() - t0) * 1000
            size = 0
            keep = bytearray()
            async with client.stream("GET", target) as response:
                content_type = response.headers.get("content-type", "")
                parse = any(t in content_type for t in ("html", "css", "javascript"))
                async for chunk in response.aiter_raw():
                    size += len(chunk)
                    if parse:
                        keep += chunk
            end_ms = (time.perf_counter() - t0) * 1000
            objects.append(ObjectTiming(target, round(start_ms, 3), round(end_ms, 3), size,
                                        protocol_name(response.http_version)))
            if response.status_code >= 400:
                failures.append(f"{target} ({response.status_code})")
                return
            children = []
            for ref in references(bytes(keep), content_type):
                absolute = urljoin(target, ref)
                if urlsplit(absolute).netloc == origin.netloc and absolute not in seen:
                    seen.add(absolute)
                    children.append(fetch(absolute))
            await asyncio.gather(*children)

        await fetch(url)
        return max(o.end_ms for o in objects)


def load(url: str, timeout_s: float, http1: bool) -> LoadResult:
    """One cold load of ``url``; failures become ``ok=False`` with the reason."""
    objects: list[ObjectTiming] = []
    failures: list[str] = []
    result = LoadResult(ok=False, loader="h2", url=url, objects=objects)
    try:
        plt_ms = asyncio.run(asyncio.wait_for(_load(url, http1, objects, failures), timeout_s))
    except asyncio.TimeoutError:
        result.error = f"load of {url} did not finish in {timeout_s} s"
    except Exception as e:  # connection refused, TLS failure, protocol error: report, not crash
        result.error = f"load of {url} failed: {type(e).__name__}: {e}"
    else:
        if failures:
            result.error = f"HTTP errors: {', '.join(failures[:5])}"
        else:
            result.ok, result.plt_ms = True, plt_ms
    result.bytes_total = sum(o.bytes for o in objects)
    result.protocol = objects[0].protocol if objects else None
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clawbed.replay.loaders.h2", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="load timeout, seconds")
    parser.add_argument("--http1", action="store_true", help="use HTTP/1.1 (six connections) instead of HTTP/2")
    args = parser.parse_args(argv)
    result = load(args.url, args.timeout_s, args.http1)
    print(result.to_json(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
