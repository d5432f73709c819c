"""Start a loader worker inside a namespace and collect its one-line JSON result."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

from clawbed.netns import Namespace, ResourceError, Resources
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
