"""An owned nginx serving a materialized page over HTTPS (HTTP/2 or HTTP/1.1) in a namespace.

Everything nginx uses lives in a directory of the run (config, self-signed certificate,
pid, logs, temp paths), so several servers can run at once and nothing touches the system
nginx. The server must never be the bottleneck of a replay: ``sendfile``, large output
buffers, no compression (the bytes on the wire are the page's stated sizes), and
``Cache-Control: no-store`` with no validators so a browser refetches every object.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

from clawbed.netns import Namespace, OwnedProcess, ResourceError, Resources, socket_in_namespace

#: How long nginx may take to accept connections after start, seconds.
READY_TIMEOUT_S = 10.0

#: Access-log line: time (epoch s, ms resolution), request time (s), status, body bytes,
#: total bytes sent, protocol, URI. One record per request.
_LOG_FORMAT = '$msec $request_time $status $body_bytes_sent $bytes_sent $server_protocol "$request_uri"'
_LOG_LINE = re.compile(r'^(\S+) (\S+) (\d+) (\d+) (\d+) (\S+) "(.*)"$')

_MIME_TYPES = {
    "text/html": "html htm",
    "text/css": "css",
    "application/javascript": "js",
    "image/png": "png",
    "image/jpeg": "jpg jpeg",
    "font/woff": "woff",
    "application/json": "json",
}


@dataclass
class AccessRecord:
    """One request as nginx logged it."""

    time_s: float  # epoch seconds when the response was finished
    request_time_s: float  # first request byte read to last response byte written
    status: int
    body_bytes: int
    sent_bytes: int  # headers included
    protocol: str  # "HTTP/2.0" or "HTTP/1.1"
    uri: str


class WebServer:
    """nginx serving ``site_dir`` at ``https://address:port`` inside namespace ``ns``.

    ``address`` must already be configured in ``ns`` (nginx binds to it). The process is
    owned by ``res``: it is stopped by PID when the run's resources close (or by
    :meth:`close`). Run files go to ``<run dir>/web-<address>-<port>``, the run dir being the
    folder of the ledger.
    """

    def __init__(self, res: Resources, ns: Namespace, site_dir: Path, address: str,
                 http_version: str = "2", port: int = 443) -> None:
        if http_version not in ("2", "1.1"):
            raise ValueError(f"http_version must be '2' or '1.1' (got {http_version!r})")
        if not Path(site_dir).is_dir():
            raise ResourceError(f"web server: site directory {site_dir} does not exist")
        self.ns, self.address, self.port, self.http_version = ns, address, port, http_version
        self.site_dir = Path(site_dir).resolve()
        self.dir = (res.ledger.path.parent / f"web-{address}-{port}").resolve()
        for sub in ("logs", "temp"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.conf = self.dir / "nginx.conf"
        self.error_log = self.dir / "logs" / "error.log"
        self.access_log = self.dir / "logs" / "access.log"
        self._make_certificate()
        self.conf.write_text(self._config())
        argv = ["nginx", "-c", str(self.conf), "-p", str(self.dir), "-e", str(self.error_log)]
        test = ns.run([*argv, "-t"], check=False)
        if test.returncode != 0:
            raise ResourceError(f"nginx -t for {self.conf} in namespace {ns.name} failed: "
                                f"{test.stderr.strip()}")
        self.proc: OwnedProcess = res.process(ns.command(argv), name=f"nginx-{address}-{port}",
                                              log_path=self.dir / "logs" / "stderr.log")
        self._wait_ready()

    def _make_certificate(self) -> None:
        """A self-signed P-256 certificate for the address (loaders skip verification, but a
        matching name keeps the handshake what a real one would be)."""
        self.cert, self.key = self.dir / "cert.pem", self.dir / "key.pem"
        if self.cert.exists() and self.key.exists():
            return
        self.ns.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                     "-nodes", "-keyout", str(self.key), "-out", str(self.cert), "-days", "7",
                     "-subj", "/CN=clawbed-replay", "-addext", f"subjectAltName=IP:{self.address}"])

    def _config(self) -> str:
        listen = f"{self.address}:{self.port} ssl" + (" http2" if self.http_version == "2" else "")
        types = "\n".join(f"        {mime} {exts};" for mime, exts in _MIME_TYPES.items())
        temp = self.dir / "temp"
        return f"""# Written by clawbed.replay.webserver for one run; started with nginx -c/-p/-e.
daemon off;
# Workers read the run's site directory, which may sit in directories only root can enter.
user root;
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.error_log} warn;
events {{ worker_connections 4096; }}
http {{
    types {{
{types}
    }}
    default_type application/octet-stream;
    log_format clawbed '{_LOG_FORMAT}';
    access_log {self.access_log} clawbed;
    client_body_temp_path {temp}/client;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    # The server must never limit a load: zero-copy sends, no per-call send cap, large buffers.
    sendfile on;
    sendfile_max_chunk 0;
    tcp_nopush on;
    tcp_nodelay on;
    output_buffers 4 1m;
    gzip off;
    keepalive_timeout 120s;
    keepalive_requests 100000;
    server {{
        listen {listen};
        ssl_certificate {self.cert};
        ssl_certificate_key {self.key};
        ssl_protocols TLSv1.2 TLSv1.3;
        # Each load is a fresh client: no session resumption, every load a full handshake.
        ssl_session_cache off;
        ssl_session_tickets off;
        root {self.site_dir};
        # Every load must fetch every byte: no caching, no validators for revalidation.
        etag off;
        if_modified_since off;
        add_header Cache-Control "no-store" always;
        location / {{ try_files $uri =404; }}
    }}
}}
"""

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if not self.proc.alive():
                raise ResourceError(f"nginx in namespace {self.ns.name} exited at start "
                                    f"(status {self.proc.popen.returncode}): {self._error_tail()}")
            sock = socket_in_namespace(self.ns.name)
            sock.settimeout(0.5)
            try:
                sock.connect((self.address, self.port))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise ResourceError(f"nginx in namespace {self.ns.name} did not accept on "
                                        f"{self.address}:{self.port} within {READY_TIMEOUT_S} s: "
                                        f"{self._error_tail()}") from None
                time.sleep(0.02)
            finally:
                sock.close()

    def _error_tail(self, n_lines: int = 5) -> str:
        lines: list[str] = []
        for path in (self.error_log, self.dir / "logs" / "stderr.log"):
            if path.exists():
                lines += path.read_text(errors="replace").splitlines()
        return " | ".join(lines[-n_lines:]) or "(no error log)"

    def url(self, path: str = "/") -> str:
        """The URL of ``path`` (e.g. ``/index.html``) on this server."""
        host = f"{self.address}" if self.port == 443 else f"{self.address}:{self.port}"
        return f"https://{host}/{path.lstrip('/')}"

    def requests(self) -> list[AccessRecord]:
        """Every request logged so far, oldest first."""
        if not self.access_log.exists():
            return []
        records = []
        for line in self.access_log.read_text(errors="replace").splitlines():
            m = _LOG_LINE.match(line)
            if m:
                records.append(AccessRecord(float(m[1]), float(m[2]), int(m[3]), int(m[4]),
                                            int(m[5]), m[6], m[7]))
        return records

    def alive(self) -> bool:
        return self.proc.alive()

    def close(self) -> None:
        """Stop nginx (by PID; its workers exit with it)."""
        self.proc.close()
