"""Loaders inside a namespace: :func:`run_load` starts one for a single load and collects its
one-line JSON result; :class:`LoaderWorker` keeps one for a run's loads (its interpreter and
Playwright's driver stay up; each load still has a browser or client of its own)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from clawbed.netns import Namespace, OwnedProcess, ResourceError, Resources
from clawbed.replay.loaders.access import ServerAccess
from clawbed.replay.loaders.result import LoadResult

LOADERS = ("browser", "h2")

#: Time a worker may take beyond the load's own timeout: interpreter and browser start,
#: and closing the browser, seconds.
WORKER_MARGIN_S = 20.0

_numbers = itertools.count(1)


def _tail(path: Path, n_lines: int = 8) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no stderr log)"
    return " | ".join(lines[-n_lines:]) or "(stderr empty)"


def run_load(res: Resources, ue_ns: Namespace, url: str, loader: str = "browser",
             timeout_s: float = 60.0, http1: bool = False, log_dir: Path | None = None,
             access: ServerAccess | None = None) -> LoadResult:
    """Load ``url`` once with ``loader`` ("browser" or "h2") running inside ``ue_ns``.

    The worker is an owned process of ``res``; its stderr goes to
    ``<log_dir or run dir>/load-<loader>-<n>.stderr``. A worker that dies, times out
    (``timeout_s`` plus :data:`WORKER_MARGIN_S`) or prints no result gives
    ``LoadResult(ok=False)`` whose error has the stderr tail; this never raises for a failed
    load, so a series of loads keeps what it measured. ``access`` (the server's
    ``WebServer.access``): the host names to resolve to it and how to trust its certificate;
    without it, loaders reach IP-address URLs and accept any certificate.
    """
    if loader not in LOADERS:
        raise ValueError(f"loader must be one of {LOADERS} (got {loader!r})")
    log = (log_dir or res.ledger.path.parent) / f"load-{loader}-{next(_numbers):04d}.stderr"
    argv = [sys.executable, "-m", f"clawbed.replay.loaders.{loader}", url, "--timeout-s", str(timeout_s)]
    if http1:
        argv.append("--http1")
    if access is not None:
        argv += access.argv()

    def failed(error: str) -> LoadResult:
        return LoadResult(ok=False, error=f"{error}; stderr ({log}): {_tail(log)}", loader=loader, url=url)

    try:
        proc = res.process(ue_ns.command(argv), name=f"loader-{loader}", stdout=subprocess.PIPE, log_path=log)
    except ResourceError as e:
        return LoadResult(ok=False, error=str(e), loader=loader, url=url)
    try:
        out, _ = proc.popen.communicate(timeout=timeout_s + WORKER_MARGIN_S)
    except subprocess.TimeoutExpired:
        return failed(f"{loader} loader did not finish within {timeout_s + WORKER_MARGIN_S:.0f} s (stopped)")
    finally:
        proc.close()
    lines = [line for line in out.decode(errors="replace").splitlines() if line.startswith("{")]
    if not lines:
        return failed(f"{loader} loader exited {proc.popen.returncode} without a result")
    try:
        return LoadResult.from_json(lines[-1])
    except (ValueError, TypeError) as e:
        return failed(f"{loader} loader printed an unreadable result ({e})")


class LoaderWorker:
    """One loader process in ``ue_ns`` answering a run's loads one after the other (``--serve``,
    ``worker.py``): the interpreter, its imports and Playwright's driver start once instead of
    once per load (about 0.5 s of every Chromium load, 0.15 s of every h2 load). Isolation is
    the same as :func:`run_load`'s: every load has a browser process with a fresh profile, or an
    HTTP client, of its own. A worker that dies, times out or answers nonsense is stopped and
    the load fails with the reason and its stderr tail; the next load starts a new one. Never
    raises for a failed load."""

    def __init__(self, res: Resources, ue_ns: Namespace, loader: str = "browser", *, http1: bool = False,
                 access: ServerAccess | None = None, log_dir: Path | None = None,
                 loader_args: Sequence[str] = ()) -> None:
        """``loader_args``: further options of the loader (e.g. the h2 loader's
        ``--http1-connections 2``)."""
        if loader not in LOADERS:
            raise ValueError(f"loader must be one of {LOADERS} (got {loader!r})")
        self.res, self.ue_ns, self.loader = res, ue_ns, loader
        self.argv = [sys.executable, "-m", f"clawbed.replay.loaders.{loader}", "--serve", *loader_args]
        if http1:
            self.argv.append("--http1")
        if access is not None:
            self.argv += access.argv()
        self.log_dir = log_dir or res.ledger.path.parent
        self._proc: OwnedProcess | None = None
        self._log: Path | None = None
        self._buffer = b""
        #: Workers started so far (1 unless one failed).
        self.started = 0

    def start(self) -> None:
        """Start the worker now (else the first load does)."""
        if self._proc is not None and self._proc.alive():
            return
        self._log = self.log_dir / f"load-{self.loader}-worker-{next(_numbers):04d}.stderr"
        self._proc = self.res.process(self.ue_ns.command(self.argv), name=f"loader-{self.loader}",
                                      stdout=subprocess.PIPE, stdin=subprocess.PIPE, log_path=self._log)
        self._buffer = b""
        self.started += 1

    def load(self, url: str, timeout_s: float = 60.0) -> LoadResult:
        """Load ``url`` once; the worker has ``timeout_s`` plus :data:`WORKER_MARGIN_S` to answer."""
        try:
            self.start()
        except ResourceError as e:
            return LoadResult(ok=False, error=str(e), loader=self.loader, url=url)
        proc = self._proc
        assert proc is not None and proc.popen.stdin is not None
        try:
            proc.popen.stdin.write(json.dumps({"url": url, "timeout_s": timeout_s}).encode() + b"\n")
            proc.popen.stdin.flush()
        except OSError as e:
            return self._failed(url, f"{self.loader} worker took no request ({e.strerror or e}; "
                                     f"exit status {proc.popen.poll()})")
        deadline = time.monotonic() + timeout_s + WORKER_MARGIN_S
        while True:
            line = self._line(deadline)
            if line is None:
                if proc.alive():
                    return self._failed(url, f"{self.loader} loader did not finish within "
                                             f"{timeout_s + WORKER_MARGIN_S:.0f} s (stopped)")
                return self._failed(url, f"{self.loader} worker exited {proc.popen.poll()} without a result")
            if line.startswith(b"{"):
                break
        try:
            return LoadResult.from_json(line.decode(errors="replace"))
        except (ValueError, TypeError) as e:
            return self._failed(url, f"{self.loader} loader printed an unreadable result ({e})")

    def _line(self, deadline: float) -> bytes | None:
        """The worker's next stdout line; None at EOF or at ``deadline``."""
        assert self._proc is not None and self._proc.popen.stdout is not None
        fd = self._proc.popen.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _failed(self, url: str, error: str) -> LoadResult:
        log = self._log
        self.close()
        tail = _tail(log) if log is not None else "(no stderr log)"
        return LoadResult(ok=False, error=f"{error}; stderr ({log}): {tail}", loader=self.loader, url=url)

    def close(self) -> None:
        """Stop the worker (end of its input, then SIGTERM if it lingers)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.popen.stdin is not None:
            with contextlib.suppress(OSError):
                proc.popen.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(timeout=2.0)
        proc.close()
        if proc.popen.stdout is not None:
            proc.popen.stdout.close()

    def __enter__(self) -> LoaderWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
