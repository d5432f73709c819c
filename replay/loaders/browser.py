"""Load a page in headless Chromium (Debian's, driven by Playwright) and print a LoadResult.

Run inside the UE namespace: ``python -m clawbed.replay.loaders.browser URL [--timeout-s S]
[--http1] [--resolve HOST=ADDRESS …] [--cert-spki HASH] [--ca-cert PEM]``, or with ``--serve``
instead of a URL to take one load request a line (``worker.py``) while Playwright's driver
stays up. Every load is a fresh browser process with a fresh profile and the memory cache
disabled through CDP, so every object is fetched in full and nothing (connections, caches,
the browser's network-quality estimate) carries over between loads. With ``--serve
--keep-connections`` one browser serves every load instead, each in a new tab with the cache
disabled: objects are still fetched in full, but over the connections the earlier loads left
open, as a user's browser does between page views (the SPDY paper's persistent connection). PLT comes from the
Navigation Timing Level 2 entry (loadEventEnd − startTime), objects from Resource Timing.

What a load counts: every object the page fetched from the navigation's start until the network
was quiet after the load event — no request of the page in flight for :data:`QUIET_S` — at most
:data:`QUIET_MAX_S` after it (a page still fetching then is noted; what had arrived counts). So
objects a page fetches after onload (an onload handler's images, a deferred script's) count in
every load alike, not only in those where they happened to arrive before the timings were read.

HTTP/1.1 connections per host: Chromium's limit is 6 (``g_max_sockets_per_group`` of its
socket pool manager), and no command-line switch or policy of a stock Chromium sets it, so this
loader honours 6 only and refuses any other ``--http1-connections`` (the h2 loader takes any).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from types import FrameType
from typing import TYPE_CHECKING

from clawbed.replay.loaders.access import parse_resolve
from clawbed.replay.loaders.result import LoadResult, ObjectTiming
from clawbed.replay.loaders.worker import serve

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page, Playwright

CHROMIUM = "/usr/bin/chromium"

#: How long no request of the page must be in flight after the load event before the load's
#: objects are read, s: longer than a page's usual post-onload timers (a few hundred ms at most).
QUIET_S = 0.5
#: The longest wait for that quiet after the load event, s (a page that polls is never quiet).
QUIET_MAX_S = 10.0
#: Chromium's HTTP/1.1 connections per host (its socket pool's per-group limit); nothing a
#: stock Chromium takes changes it.
CHROMIUM_HTTP1_CONNECTIONS = 6

#: Chromium flags: no sandbox (root in a namespace), no GPU, and no traffic of the browser's
#: own (the machine's network is closed and background requests would disturb the
#: measurement); no QUIC, as the server speaks TCP. The server's certificate is accepted by
#: its key (``--cert-spki``: :func:`certificate_flags`), else any certificate is.
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu",
    "--disable-background-networking", "--disable-component-update", "--no-first-run",
    "--disable-sync", "--disable-quic",
]


def certificate_flags(spki_sha256: str | None) -> list[str]:
    """Accept the server's certificate by its public key (base64 SHA-256 of its
    SubjectPublicKeyInfo; Chromium honours this with a profile folder, which every load has),
    or, without one, any certificate."""
    if spki_sha256:
        return [f"--ignore-certificate-errors-spki-list={spki_sha256}"]
    return ["--ignore-certificate-errors"]


def resolver_flags(resolve: dict[str, str], server_address: str | None = None) -> list[str]:
    """Resolve each host name to its address and no other name at all, and let the server's
    own address through as it is. A recorded page's references to hosts it does not hold fail
    at once instead of waiting on DNS, and the browser's own look-ups (Chromium resolves
    accounts.google.com and update.googleapis.com at start, and again every few seconds while
    unanswered) never reach the UE's uplink: they would wake an idle radio before the page's
    first packet, and keep a kept browser's radio from ever demoting."""
    if not resolve and not server_address:
        return []
    rules = [f"MAP {host} {address}" for host, address in sorted(resolve.items())] + ["MAP * ~NOTFOUND"]
    if server_address:
        rules.append(f"EXCLUDE {server_address}")  # an address URL: not a name to map
    return ["--host-resolver-rules=" + ", ".join(rules)]

#: Collects the measurement once the network is quiet after the load event. Sizes:
#: encodedBodySize is the body as received (compressed, when the server compresses),
#: decodedBodySize the body after its content coding; transferSize is 0 only for a cache hit.
_COLLECT_JS = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource');
  const brokenImages = Array.from(document.images)
      .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);
  const one = e => ({url: e.name, start_ms: e.startTime, end_ms: e.responseEnd,
                     bytes: e.encodedBodySize, decoded: e.decodedBodySize, transfer: e.transferSize,
                     protocol: e.nextHopProtocol, status: e.responseStatus, initiator: e.initiatorType});
  const failedFonts = Array.from(document.fonts).filter(f => f.status === 'error').map(f => f.family);
  const icons = [new URL('/favicon.ico', document.baseURI).href,
                 ...Array.from(document.querySelectorAll('link[rel~="icon" i]')).map(l => l.href)];
  return {plt_ms: nav.loadEventEnd - nav.startTime, load_ended: nav.loadEventEnd > 0,
          protocol: nav.nextHopProtocol, objects: [one(nav), ...res.map(one)],
          broken_images: brokenImages, failed_fonts: failedFonts, icons: icons};
}"""


def browser_flags(http1: bool, resolve: dict[str, str] | None, spki_sha256: str | None,
                  server_address: str | None = None) -> list[str]:
    """Chromium's command-line flags for a load."""
    return (CHROMIUM_FLAGS + certificate_flags(spki_sha256) + resolver_flags(resolve or {}, server_address)
            + (["--disable-http2"] if http1 else []))


#: Where a browser's profile goes when it is a memory file system (else the temporary folder).
#: A fresh profile is some hundred files made and removed per load; on ext4, after many loads,
#: making them scans the inode bitmaps past the recently deleted ones in the kernel, where this
#: non-preemptible kernel lets no real-time thread in: the cell's clock stood still up to 0.8 ms
#: at a time behind Chromium's ThreadPoolForeground threads (docs/timing.md, section 2).
PROFILE_PARENT_CANDIDATES = ("/dev/shm",)


def profile_parent(mounts: str | None = None) -> str | None:
    """The first of :data:`PROFILE_PARENT_CANDIDATES` that is a writable tmpfs mount point (in
    ``mounts``, ``/proc/self/mounts``'s text), else None (the system's temporary folder)."""
    if mounts is None:
        try:
            with open("/proc/self/mounts") as f:
                mounts = f.read()
        except OSError:
            return None
    tmpfs = {fields[1] for fields in (line.split() for line in mounts.splitlines())
             if len(fields) >= 3 and fields[2] == "tmpfs"}
    for candidate in PROFILE_PARENT_CANDIDATES:
        if candidate in tmpfs and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return None


def launch(pw: Playwright, profile: str, flags: list[str], spki_sha256: str | None) -> BrowserContext:
    """A headless Chromium with its profile in ``profile``, its Resource Timing buffer large
    enough for any page."""
    ctx = pw.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=flags,
                                                ignore_https_errors=not spki_sha256)
    # The default buffer holds 250 entries; larger pages would lose objects.
    ctx.add_init_script("performance.setResourceTimingBufferSize(100000)")
    return ctx


def load(url: str, timeout_s: float, http1: bool, resolve: dict[str, str] | None = None,
         spki_sha256: str | None = None, pw: Playwright | None = None,
         kept: BrowserContext | None = None, server_address: str | None = None) -> LoadResult:
    """One load of ``url``: cold, in a browser started for it, or in a new tab of ``kept``, a
    browser kept across loads (its connections too); failures become ``ok=False`` with the
    reason. ``resolve``: host names → the server's address; ``spki_sha256``: the server
    certificate's key; ``pw``: a running Playwright (a worker's), else one is started;
    ``server_address``: the server's address (with it, no other name or address resolves)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    notes: list[str] = []
    result = LoadResult(ok=False, loader="browser", url=url, notes=notes)
    with contextlib.ExitStack() as stack:
        if kept is None:
            profile = stack.enter_context(tempfile.TemporaryDirectory(prefix="clawbed-chromium-", dir=profile_parent()))
            driver = stack.enter_context(contextlib.nullcontext(pw) if pw else sync_playwright())
            ctx = launch(driver, profile, browser_flags(http1, resolve, spki_sha256, server_address), spki_sha256)
            stack.callback(ctx.close)
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
        else:
            ctx = kept
            page = ctx.new_page()
            stack.callback(page.close)
        cdp = ctx.new_cdp_session(page)
        cdp.send("Network.enable")
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        page.on("console",
                lambda m: notes.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("requestfailed", lambda r: notes.append(f"request failed: {r.url}: {r.failure}"))
        activity = _Activity()
        page.on("request", activity.started)
        page.on("requestfinished", activity.ended)
        page.on("requestfailed", activity.ended)
        began = time.monotonic()
        try:
            response = page.goto(url, wait_until="load", timeout=timeout_s * 1000)
            # loadEventEnd is set after the load handlers return, just after "load" fires.
            page.wait_for_function("performance.getEntriesByType('navigation')[0].loadEventEnd > 0",
                                   timeout=5000)
            left_s = timeout_s - (time.monotonic() - began)
            if not activity.wait_quiet(page, min(QUIET_MAX_S, max(left_s, 0.0))):
                notes.append(f"network not quiet {QUIET_MAX_S:g} s after the load event: "
                             f"{len(activity.in_flight)} request(s) still in flight (not counted)")
        except PlaywrightError as e:
            result.error = f"load of {url} failed: {str(e).splitlines()[0]}"
            response = None
        try:
            data = page.evaluate(_COLLECT_JS)
        except PlaywrightError as e:
            data = None
            result.error = result.error or f"reading timings failed: {str(e).splitlines()[0]}"
    if data is not None:
        result.objects = [ObjectTiming(o["url"], round(o["start_ms"], 3), round(o["end_ms"], 3),
                                       int(o["bytes"]), o["protocol"], int(o["decoded"])) for o in data["objects"]]
        result.bytes_total = sum(o.bytes for o in result.objects)
        result.bytes_decoded = sum(o.decoded_bytes or 0 for o in result.objects)
        result.protocol = data["protocol"] or None
        notes += [f"image not decoded: {u}" for u in data["broken_images"]]
        notes += [f"font not decoded: {f}" for f in data["failed_fonts"]]
        notes += [f"served from cache: {o['url']}" for o in data["objects"]
                  if o["transfer"] == 0 and o["bytes"] > 0]
        # The browser's own favicon fetch is not the page's: a missing one is noted, not a failure.
        favicon = [o for o in data["objects"] if o["initiator"] == "other" and o["url"] in data["icons"]]
        notes += [f"favicon not loaded: {o['url']} ({o['status']})" for o in favicon if o["status"] >= 400]
        bad = [f"{o['url']} ({o['status']})" for o in data["objects"] if o["status"] >= 400 and o not in favicon]
        if result.error is None and response is not None:
            if bad:
                result.error = f"HTTP errors: {', '.join(bad[:5])}"
            elif data["load_ended"]:
                result.plt_ms = round(data["plt_ms"], 3)
                result.ok = True
    result.error = None if result.ok else (result.error or "the load event did not end")
    return result


class _Activity:
    """The page's requests in flight and when the last one started or ended (Playwright's
    request events, delivered while the driver waits)."""

    def __init__(self) -> None:
        self.in_flight: set[object] = set()
        self.last_s = time.monotonic()

    def started(self, request: object) -> None:
        self.in_flight.add(request)
        self.last_s = time.monotonic()

    def ended(self, request: object) -> None:
        self.in_flight.discard(request)
        self.last_s = time.monotonic()

    def wait_quiet(self, page: Page, limit_s: float) -> bool:
        """Wait until no request has been in flight for :data:`QUIET_S`, at most ``limit_s``;
        whether it got quiet."""
        deadline = time.monotonic() + limit_s
        while True:
            now = time.monotonic()
            if not self.in_flight and now - self.last_s >= QUIET_S:
                return True
            if now >= deadline:
                return False
            # Playwright delivers the page's events while it waits.
            page.wait_for_timeout(max(10.0, min(100.0, (deadline - now) * 1000)))


def _stop(signum: int, frame: FrameType | None) -> None:
    # Unwind normally on SIGTERM so Playwright closes the browser it started.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m clawbed.replay.loaders.browser", description=__doc__)
    parser.add_argument("url", nargs="?", help="the page to load once (or --serve)")
    parser.add_argument("--serve", action="store_true",
                        help="take load requests on stdin, one JSON line each, until it ends (worker.py)")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="load timeout, seconds")
    parser.add_argument("--http1", action="store_true", help="disable HTTP/2 in the browser")
    parser.add_argument("--resolve", action="append", metavar="HOST=ADDRESS",
                        help="resolve HOST to ADDRESS (repeatable); with any, other names do not resolve")
    parser.add_argument("--cert-spki", help="accept only the certificate with this key (base64 SHA-256 of its SPKI)")
    parser.add_argument("--ca-cert", help="the server's CA (the h2 loader verifies with it; unused here)")
    parser.add_argument("--server-address",
                        help="the web server's address: the only address reached as it is; with it, names other "
                             "than --resolve's do not resolve (no look-up leaves the browser)")
    parser.add_argument("--http1-connections", type=int, default=CHROMIUM_HTTP1_CONNECTIONS,
                        help=f"HTTP/1.1 connections per host: Chromium's are fixed at {CHROMIUM_HTTP1_CONNECTIONS}, "
                             "so only that is taken")
    parser.add_argument("--keep-connections", action="store_true",
                        help="with --serve: one browser for every load, each in a new tab, so connections "
                             "carry over from load to load")
    args = parser.parse_args(argv)
    if (args.url is None) == (not args.serve):
        parser.error("give a URL or --serve, not both")
    if args.http1_connections != CHROMIUM_HTTP1_CONNECTIONS:
        parser.error(f"--http1-connections {args.http1_connections}: the browser loader cannot set it: Chromium "
                     f"opens up to {CHROMIUM_HTTP1_CONNECTIONS} HTTP/1.1 connections per host and no switch of it "
                     "changes that (the h2 loader takes any number)")
    if args.keep_connections and not args.serve:
        parser.error("--keep-connections: only with --serve (a single load has nothing to keep)")
    signal.signal(signal.SIGTERM, _stop)
    resolve = parse_resolve(args.resolve)
    if args.serve:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw, contextlib.ExitStack() as stack:
            kept = None
            if args.keep_connections:
                profile = stack.enter_context(tempfile.TemporaryDirectory(prefix="clawbed-chromium-",
                                                                          dir=profile_parent()))
                kept = launch(pw, profile, browser_flags(args.http1, resolve, args.cert_spki, args.server_address),
                              args.cert_spki)
                stack.callback(kept.close)
            return serve(lambda url, timeout_s: load(url, timeout_s, args.http1, resolve, args.cert_spki, pw=pw,
                                                     kept=kept, server_address=args.server_address), "browser")
    started = time.monotonic()
    try:
        result = load(args.url, args.timeout_s, args.http1, resolve, args.cert_spki,
                      server_address=args.server_address)
    except Exception as e:  # a worker always answers with one line, whatever broke
        result = LoadResult(ok=False, loader="browser", url=args.url,
                            error=f"browser loader failed after {time.monotonic() - started:.1f} s: "
                                  f"{type(e).__name__}: {e}")
    print(result.to_json(), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
