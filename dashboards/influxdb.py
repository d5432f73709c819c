"""The project's own InfluxDB 1.x server: started on demand, bound to 127.0.0.1, data under
the state folder, and reused by every later run while it is up.

Layout (``<state>/influxdb/``, ``<state>`` = :func:`clawbed.paths.state_dir`)::

    influxdb.conf    the config this module writes (loopback only, no reporting, no _internal)
    influxd.json     pid file: {"pid", "port", "config", "started_unix_s"} of the running server
    influxd.log      its log
    meta/ data/ wal/ its storage

The server is an :class:`~clawbed.netns.OwnedProcess` in its own session, so it outlives the
command that started it; a later command finds it through the pid file (checked against
``/proc/<pid>/cmdline``, so a reused PID is never mistaken for it) and stops it by that PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from clawbed.errors import ClawbedError
from clawbed.files import atomic_write
from clawbed.netns import OwnedProcess
from clawbed.paths import state_dir

#: Default HTTP port (InfluxDB's usual one); ``$CLAWBED_INFLUX_PORT`` overrides it.
DEFAULT_PORT = 8086
#: The database every clawbed series goes to.
DATABASE = "clawbed"
#: Seconds to wait for ``/ping`` after starting (it answers in ~0.1 s).
READY_TIMEOUT_S = 15.0
#: Seconds between SIGTERM and SIGKILL when stopping.
STOP_TIMEOUT_S = 10.0
PID_FILE = "influxd.json"
CONFIG_FILE = "influxdb.conf"
LOG_FILE = "influxd.log"


class InfluxError(ClawbedError):
    """The InfluxDB server could not be started, reached or stopped; says which and why."""


def default_port() -> int:
    """``$CLAWBED_INFLUX_PORT`` or :data:`DEFAULT_PORT`."""
    raw = os.environ.get("CLAWBED_INFLUX_PORT", str(DEFAULT_PORT))
    try:
        port = int(raw)
    except ValueError:
        raise InfluxError(f"CLAWBED_INFLUX_PORT={raw!r} is not a port number") from None
    if not 1 <= port <= 65535 - 2:
        raise InfluxError(f"CLAWBED_INFLUX_PORT={port} is out of range (1..65533; the RPC port is port + 2)")
    return port


def influx_dir() -> Path:
    """``<state>/influxdb``: the server's config, pid file, log and storage."""
    return state_dir() / "influxdb"


def config_text(root: Path, port: int) -> str:
    """The server's config: storage under ``root``, HTTP on 127.0.0.1:``port`` and the
    backup RPC on 127.0.0.1:``port + 2`` (InfluxDB binds it on every address by default)."""
    return f"""# Written by clawbed.dashboards.influxdb; rewritten on each start.
reporting-disabled = true
bind-address = "127.0.0.1:{port + 2}"

[meta]
  dir = "{root / 'meta'}"

[data]
  dir = "{root / 'data'}"
  wal-dir = "{root / 'wal'}"
  query-log-enabled = false

[http]
  enabled = true
  bind-address = "127.0.0.1:{port}"
  auth-enabled = false
  log-enabled = false

[monitor]
  # No _internal database: it would cost CPU on a shared machine for nothing we read.
  store-enabled = false

[subscriber]
  enabled = false

[continuous_queries]
  enabled = false

[logging]
  level = "warn"
"""


@dataclass(frozen=True)
class ServerInfo:
    """A running server: its PID and HTTP port."""

    pid: int
    port: int
    config: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _binary() -> str:
    path = shutil.which("influxd")
    if path is None:
        raise InfluxError("influxd not found: install Debian's influxdb package (scripts/provision.sh does)")
    return path


def _is_ours(pid: int, config: Path) -> bool:
    """True when ``pid`` runs influxd with ``config`` (not a PID reused by something else)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and Path(argv[0].decode(errors="replace")).name == "influxd" and \
        str(config).encode() in argv


def ping(url: str, timeout_s: float = 1.0) -> bool:
    """True when the server at ``url`` answers ``/ping`` (HTTP 204)."""
    try:
        return httpx.get(f"{url}/ping", timeout=timeout_s).status_code == 204
    except httpx.HTTPError:
        return False


class InfluxServer:
    """The server whose files are under ``root`` (default :func:`influx_dir`)."""

    def __init__(self, root: Path | None = None, port: int | None = None) -> None:
        self.root = (root or influx_dir()).resolve()
        self.port = port if port is not None else default_port()

    @property
    def pid_file(self) -> Path:
        return self.root / PID_FILE

    @property
    def config_path(self) -> Path:
        return self.root / CONFIG_FILE

    def running(self) -> ServerInfo | None:
        """The server started from this folder, if its process is still alive."""
        try:
            record = json.loads(self.pid_file.read_text())
            info = ServerInfo(int(record["pid"]), int(record["port"]), Path(record["config"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return info if _is_ours(info.pid, info.config) else None

    def ensure(self) -> ServerInfo:
        """The running server, started first if it is not; the :data:`DATABASE` exists."""
        info = self.running() or self.start()
        create_database(info.url)
        return info

    def start(self) -> ServerInfo:
        """Start the server (refused if one from this folder runs) and wait until it answers."""
        if (existing := self.running()) is not None:
            raise InfluxError(f"InfluxDB from {self.root} already runs (pid {existing.pid}, port {existing.port})")
        url = f"http://127.0.0.1:{self.port}"
        if ping(url):
            raise InfluxError(f"another InfluxDB already answers on 127.0.0.1:{self.port} (not started from "
                              f"{self.root}): stop it, or choose another port with CLAWBED_INFLUX_PORT")
        for sub in ("meta", "data", "wal"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        with atomic_write(self.config_path, "w") as f:
            f.write(config_text(self.root, self.port))
        proc = OwnedProcess([_binary(), "run", "-config", str(self.config_path)], name="influxd",
                            log_path=self.root / LOG_FILE)
        info = ServerInfo(proc.pid, self.port, self.config_path)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ping(url, timeout_s=0.5):
            if not proc.alive():
                raise InfluxError(f"influxd exited with status {proc.popen.returncode} while starting: "
                                  f"{self._log_tail()}")
            if time.monotonic() > deadline:
                proc.close()
                raise InfluxError(f"influxd did not answer on {url} within {READY_TIMEOUT_S} s: {self._log_tail()}")
            time.sleep(0.05)
        with atomic_write(self.pid_file, "w") as f:
            json.dump({"pid": info.pid, "port": info.port, "config": str(info.config),
                       "started_unix_s": round(time.time(), 3)}, f)
        return info

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Stop the server started from this folder (SIGTERM, SIGKILL after ``timeout_s``);
        return its PID, or None when none was running."""
        info = self.running()
        if info is None:
            self.pid_file.unlink(missing_ok=True)
            return None
        os.kill(info.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _is_ours(info.pid, info.config) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_ours(info.pid, info.config):
            os.kill(info.pid, signal.SIGKILL)
        _reap(info.pid)
        self.pid_file.unlink(missing_ok=True)
        return info.pid

    def _log_tail(self) -> str:
        log = self.root / LOG_FILE
        return log.read_text(errors="replace")[-1500:].strip() if log.exists() else "(no log)"


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status if it is our child (started by this process), so that it
    does not linger as a zombie whose cmdline still reads as influxd."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not our child: its own parent (or init) reaps it
        if done:
            return
        time.sleep(0.02)


def query(url: str, q: str, *, database: str = DATABASE, timeout_s: float = 10.0) -> list[dict]:
    """Run one InfluxQL statement; return its ``series`` (empty when no data). Errors raise."""
    try:
        response = httpx.post(f"{url}/query", params={"db": database, "q": q, "epoch": "ns"}, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise InfluxError(f"InfluxDB at {url}: {e}") from e
    if response.status_code != 200:
        raise InfluxError(f"InfluxDB at {url} answered {response.status_code} to {q!r}: {response.text.strip()}")
    results = response.json().get("results", [])
    if not results:
        raise InfluxError(f"InfluxDB at {url} returned no result for {q!r}")
    if "error" in results[0]:
        raise InfluxError(f"InfluxQL {q!r}: {results[0]['error']}")
    return results[0].get("series", [])


def create_database(url: str, database: str = DATABASE) -> None:
    """Create ``database`` (a no-op when it exists)."""
    query(url, f'CREATE DATABASE "{database}"', database=database)
