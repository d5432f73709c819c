"""An owned nginx serving a materialized page over HTTPS (HTTP/2 or HTTP/1.1) in a namespace.

Everything nginx uses lives in a directory of the run (config, certificate, pid, logs, temp
paths), so several servers can run at once and nothing touches the system nginx. The
certificate is signed by the run's own CA (``<run dir>/ca/``, made once per run) and names the
server's address and every host name it serves; :attr:`WebServer.access` tells a loader how to
reach and trust the server (:class:`~clawbed.replay.loaders.ServerAccess`). The server must
never be the bottleneck of a replay: ``sendfile``, large output buffers, no compression unless
asked (``gzip=True``: text types are compressed on the fly, :data:`GZIP_TYPES`; off, the bytes
on the wire are the page's stated sizes), and ``Cache-Control: no-store`` with no validators so
a browser refetches every object.

A site directory holding ``directory-site.json`` (a user's own folder, ``--page dir:PATH``,
materialized by :class:`clawbed.replay.pages.DirectoryPage`) is served from the folder that
index names, so a file of the user's called ``manifest.json`` is theirs, not the run's.

A site directory holding ``recorded-site.json`` (a recorded site, e.g. a Mahimahi recording
materialized by :mod:`clawbed.replay.mahimahi`) is served as recorded: every recorded URL
(scheme, host, port, path and query) with its recorded status, content type, headers and
body bytes, on one address for every host name (HTTPS on 443, HTTP/2 or 1.1; plain HTTP/1.1 on
80 for hosts recorded over HTTP); anything not recorded is a 404.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from clawbed.netns import Namespace, OwnedProcess, ResourceError, Resources, socket_in_namespace
from clawbed.replay.loaders.access import ServerAccess
from clawbed.replay.mahimahi import SITE_FORMAT, SITE_INDEX
from clawbed.replay.pages import DIRECTORY_FORMAT, DIRECTORY_INDEX

#: Content types nginx compresses with ``gzip=True`` (text/html always is): the text a page is
#: made of. Images and fonts are compressed formats already.
GZIP_TYPES = ("text/css", "application/javascript", "application/json", "image/svg+xml", "text/plain",
              "text/xml", "application/xml")
#: gzip's level (1 fast … 9 small): 6, the level zlib itself defaults to, a common server choice.
GZIP_LEVEL = 6
#: Responses shorter than this are sent as they are (the gzip header would outweigh the saving),
#: bytes.
GZIP_MIN_BYTES = 256

#: How long nginx may take to accept connections after start, seconds.
READY_TIMEOUT_S = 10.0

#: How long the run's CA and the server's certificate are valid, days.
CERT_DAYS = 30

#: Access-log line: time (epoch s, ms resolution), request time (s), status, body bytes,
#: total bytes sent, protocol, scheme, host, server port, URI. One record per request.
_LOG_FORMAT = ('$msec $request_time $status $body_bytes_sent $bytes_sent $server_protocol $scheme $host '
               '$server_port $connection "$request_uri"')
_LOG_LINE = re.compile(r'^(\S+) (\S+) (\d+) (\d+) (\d+) (\S+) (\S+) (\S+) (\d+) (\d+) "(.*)"$')

_MIME_TYPES = {
    "text/html": "html htm",
    "text/css": "css",
    "application/javascript": "js",
    "image/png": "png",
    "image/jpeg": "jpg jpeg",
    "font/woff": "woff",
    "application/json": "json",
    # What a user's own folder (``dir:``) may hold besides the generated pages' types.
    "image/gif": "gif",
    "image/webp": "webp",
    "image/avif": "avif",
    "image/svg+xml": "svg svgz",
    "image/x-icon": "ico",
    "font/woff2": "woff2",
    "font/ttf": "ttf",
    "font/otf": "otf",
    "text/plain": "txt",
    "text/xml": "xml",
    "application/wasm": "wasm",
    "video/mp4": "mp4",
    "video/webm": "webm",
    "audio/mpeg": "mp3",
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
    uri: str  # path and query, as requested
    scheme: str = "https"
    host: str = ""  # the request's host name (lower case)
    port: int = 443  # the server port it came to
    connection: int = 0  # nginx's serial number of the connection it came over

    @property
    def url(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return f"{self.scheme}://{self.host}{'' if self.port == default else f':{self.port}'}{self.uri}"


def read_access_log(path: Path) -> list[AccessRecord]:
    """Every request of an access log written by a :class:`WebServer`, oldest first."""
    if not Path(path).exists():
        return []
    records = []
    for line in Path(path).read_text(errors="replace").splitlines():
        m = _LOG_LINE.match(line)
        if m:
            records.append(AccessRecord(float(m[1]), float(m[2]), int(m[3]), int(m[4]), int(m[5]), m[6],
                                        m[11], m[7], m[8], int(m[9]), int(m[10])))
    return records


class WebServer:
    """nginx serving ``site_dir`` at ``https://address:port`` inside namespace ``ns``.

    ``address`` must already be configured in ``ns`` (nginx binds to it). The process is
    owned by ``res``: it is stopped by PID when the run's resources close (or by
    :meth:`close`). Run files go to ``<run dir>/web-<address>-<port>``, the run dir being the
    folder of the ledger. A recorded site (``site_dir/recorded-site.json``) is served under
    its host names, all on ``address``. ``gzip``: compress text responses on the fly
    (:data:`GZIP_TYPES`); a recorded site is served with its recorded encodings instead, so
    ``gzip`` is refused for one (it would not take effect).
    """

    def __init__(self, res: Resources, ns: Namespace, site_dir: Path, address: str,
                 http_version: str = "2", port: int = 443, gzip: bool = False) -> None:
        if http_version not in ("2", "1.1"):
            raise ValueError(f"http_version must be '2' or '1.1' (got {http_version!r})")
        if not Path(site_dir).is_dir():
            raise ResourceError(f"web server: site directory {site_dir} does not exist")
        self.ns, self.address, self.port, self.http_version = ns, address, port, http_version
        self.gzip = gzip
        self.site_dir = Path(site_dir).resolve()
        self.site = _read_site(self.site_dir)
        if self.site and gzip:
            raise ResourceError(f"web server: gzip on: the recorded site in {self.site_dir} is served with its "
                                "recorded bodies and encodings; compressing on the fly does not apply to it")
        #: The folder served for a page's plain files (a directory page's copy of the user's folder).
        self.docroot = _read_docroot(self.site_dir)
        self.hosts: tuple[str, ...] = tuple(self.site["hosts"]) if self.site else ()
        self.dir = (res.ledger.path.parent / f"web-{address}-{port}").resolve()
        self.ca_dir = (res.ledger.path.parent / "ca").resolve()
        for sub in ("logs", "temp"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self.conf = self.dir / "nginx.conf"
        self.error_log = self.dir / "logs" / "error.log"
        self.access_log = self.dir / "logs" / "access.log"
        self._make_certificate()
        self.access = ServerAccess(address=address, hosts=self.hosts, ca_cert=str(self.ca_cert),
                                   spki_sha256=self.spki_sha256)
        self.conf.write_bytes(self._config().encode("latin-1"))
        argv = ["nginx", "-c", str(self.conf), "-p", str(self.dir), "-e", str(self.error_log)]
        test = ns.run([*argv, "-t"], check=False)
        if test.returncode != 0:
            raise ResourceError(f"nginx -t for {self.conf} in namespace {ns.name} failed: "
                                f"{test.stderr.strip()}")
        self.proc: OwnedProcess = res.process(ns.command(argv), name=f"nginx-{address}-{port}",
                                              log_path=self.dir / "logs" / "stderr.log")
        self._wait_ready()

    # -- certificates -------------------------------------------------------------------------

    def _openssl(self, *argv: str) -> str:
        return self.ns.run(["openssl", *argv]).stdout

    def _make_certificate(self) -> None:
        """The run's CA (made by the run's first server) and this server's P-256 certificate
        signed by it, naming the address and every host name served. Loaders verify against
        the CA (h2) or pin the certificate's key (Chromium)."""
        self.ca_cert, ca_key = self.ca_dir / "ca.pem", self.ca_dir / "ca-key.pem"
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        if not (self.ca_cert.exists() and ca_key.exists()):
            self.ca_dir.mkdir(parents=True, exist_ok=True)
            ca_conf = self.ca_dir / "ca.cnf"
            ca_conf.write_text("[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = ca\n"
                               f"[dn]\nCN = clawbed replay CA {self.ca_dir.parent.name}\n"
                               "[ca]\nbasicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n"
                               "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n")
            self._openssl("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(self.ca_cert),
                          "-days", str(CERT_DAYS), "-config", str(ca_conf))
        self.cert, self.key = self.dir / "cert.pem", self.dir / "key.pem"
        csr, leaf_conf = self.dir / "cert.csr", self.dir / "cert.cnf"
        names = [f"IP.1 = {self.address}"] + [f"DNS.{i + 1} = {h}" for i, h in enumerate(self.hosts)]
        leaf_conf.write_text("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = clawbed-replay\n"
                             "[leaf]\nbasicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature\n"
                             "extendedKeyUsage = serverAuth\nsubjectKeyIdentifier = hash\n"
                             "authorityKeyIdentifier = keyid, issuer\nsubjectAltName = @names\n"
                             "[names]\n" + "\n".join(names) + "\n")
        self._openssl("req", "-new", *ec, "-keyout", str(self.key), "-out", str(csr), "-config", str(leaf_conf))
        self._openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca_cert), "-CAkey", str(ca_key),
                      "-set_serial", str(secrets.randbits(63)), "-days", str(CERT_DAYS), "-out", str(self.cert),
                      "-extfile", str(leaf_conf), "-extensions", "leaf")
        pem = self._openssl("x509", "-in", str(self.cert), "-pubkey", "-noout")
        der = base64.b64decode("".join(line for line in pem.splitlines() if not line.startswith("-----")))
        #: base64 SHA-256 of the certificate's SubjectPublicKeyInfo (what Chromium pins).
        self.spki_sha256 = base64.b64encode(hashlib.sha256(der).digest()).decode()

    # -- configuration ------------------------------------------------------------------------

    def _config(self) -> str:
        temp = self.dir / "temp"
        if self.site:
            types, servers = _recorded_config(self, self.site)
        else:
            types = "\n".join(f"        {mime} {exts};" for mime, exts in _MIME_TYPES.items())
            servers = self._page_server()
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
{self._gzip()}
    keepalive_timeout 120s;
    keepalive_requests 100000;
{servers}
}}
"""

    def _gzip(self) -> str:
        if not self.gzip:
            return "    gzip off;"
        return f"""    gzip on;
    gzip_types {' '.join(GZIP_TYPES)};
    gzip_comp_level {GZIP_LEVEL};
    gzip_min_length {GZIP_MIN_BYTES};
    gzip_vary on;"""

    @property
    def ports(self) -> tuple[int, ...]:
        """Every port nginx listens on, sorted (a recorded site's plain-HTTP hosts add 80):
        where the server's TCP flows are."""
        if not self.site:
            return (self.port,)
        return tuple(sorted({self.port, *(int(o["port"]) for o in self.site["objects"])}))

    def _tls(self) -> str:
        return f"""        ssl_certificate {self.cert};
        ssl_certificate_key {self.key};
        ssl_protocols TLSv1.2 TLSv1.3;
        # Each load is a fresh client: no session resumption, every load a full handshake.
        ssl_session_cache off;
        ssl_session_tickets off;"""

    def _listen(self, port: int, tls: bool) -> str:
        if not tls:
            return f"        listen {self.address}:{port};"
        return f"        listen {self.address}:{port} ssl" + (" http2;" if self.http_version == "2" else ";")

    def _page_server(self) -> str:
        return f"""    default_type application/octet-stream;
    server {{
{self._listen(self.port, True)}
{self._tls()}
        root {self.docroot};
        # Every load must fetch every byte: no caching, no validators for revalidation.
        etag off;
        if_modified_since off;
        add_header Cache-Control "no-store" always;
        location / {{ try_files $uri =404; }}
    }}"""

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
        """The URL of ``path`` (e.g. ``/index.html``) on this server; an absolute URL (a
        recorded site's) is returned as is: :attr:`access` resolves its host to this server."""
        if path.startswith(("http://", "https://")):
            return path
        host = f"{self.address}" if self.port == 443 else f"{self.address}:{self.port}"
        return f"https://{host}/{path.lstrip('/')}"

    def requests(self) -> list[AccessRecord]:
        """Every request logged so far, oldest first."""
        return read_access_log(self.access_log)

    def alive(self) -> bool:
        return self.proc.alive()

    def close(self) -> None:
        """Stop nginx (by PID; its workers exit with it)."""
        self.proc.close()


# -- recorded sites ---------------------------------------------------------------------------

def _read_site(site_dir: Path) -> dict | None:
    """The index of a recorded site in ``site_dir``, or None for a page's plain files."""
    path = site_dir / SITE_INDEX
    if not path.exists():
        return None
    try:
        site = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ResourceError(f"web server: cannot read the recorded site's index {path}: {e}") from e
    if not isinstance(site, dict) or site.get("format") != SITE_FORMAT:
        raise ResourceError(f"web server: {path} is not a {SITE_FORMAT} index")
    return site


def _read_docroot(site_dir: Path) -> Path:
    """The folder to serve a page's plain files from: ``site_dir``, or the sub-folder a
    directory page's index (:data:`DIRECTORY_INDEX`) names."""
    path = site_dir / DIRECTORY_INDEX
    if not path.exists():
        return site_dir
    try:
        index = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ResourceError(f"web server: cannot read the directory page's index {path}: {e}") from e
    if not isinstance(index, dict) or index.get("format") != DIRECTORY_FORMAT or not isinstance(
            index.get("docroot"), str):
        raise ResourceError(f"web server: {path} is not a {DIRECTORY_FORMAT} index with a docroot")
    docroot = (site_dir / index["docroot"]).resolve()
    if not docroot.is_dir() or site_dir not in docroot.parents:
        raise ResourceError(f"web server: {path}: docroot {index['docroot']!r} is not a folder inside {site_dir}")
    return docroot


def _q(text: str) -> str:
    """``text`` as a double-quoted nginx string (read literally)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _qv(text: str) -> str:
    """``text`` as a quoted nginx value that may hold variables: a literal ``$`` comes from
    ``$cb_dollar`` (a geo variable, whose value nginx never interprets)."""
    return _q(text.replace("$", "${cb_dollar}"))


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _site_key(obj: dict) -> str:
    """What the request of a recorded object looks like to nginx's ``$cb_object`` map."""
    return f"{obj['scheme']}://{obj['host']}:{obj['port']}{obj['target']}"


def _recorded_config(web: WebServer, site: dict) -> tuple[str, str]:
    """(``types`` block body, the rest of the ``http`` block) serving a recorded site.

    One ``map`` names the object of each request (``$scheme://$host:$server_port$request_uri``;
    nginx compares map keys case-insensitively), further maps give its treatment, body file,
    redirect target, content type and each replayed header. A body with a 2xx status is the
    file served as 200; other statuses are a ``return`` of the recorded code (redirects to the
    recorded ``Location``; a recorded body goes with an error status through ``error_page``).
    nginx sets no content type of its own (no ``types``, an empty ``default_type``): the
    recorded one is added with the other recorded headers."""
    objects: list[tuple[str, dict]] = []  # (id, object)
    seen: set[str] = set()
    for n, obj in enumerate(site["objects"]):
        key = _site_key(obj)
        if key.lower() in seen:
            continue
        seen.add(key.lower())
        objects.append((f"o{n}", obj))
    listens: dict[int, bool] = {web.port: True}
    for _, obj in objects:
        tls = obj["scheme"] == "https"
        if listens.setdefault(int(obj["port"]), tls) != tls:
            raise ResourceError(f"web server: the recorded site has port {obj['port']} with both http and https")

    treatment: list[str] = []
    files, locations, types = [], [], []
    header_vars: dict[tuple[str, int], str] = {}
    header_names: dict[tuple[str, int], str] = {}
    header_values: dict[str, list[str]] = {}
    redirects, bodiless, error_bodies = set(), set(), set()
    for oid, obj in objects:
        status, served = int(obj["status"]), obj["served"]
        if served == "redirect":
            redirects.add(status)
            serve = f"r{status}"
            locations.append(f"        {oid} {_qv(obj['location'])};")
        elif served == "empty":
            bodiless.add(status)
            serve = f"e{status}"
        elif status >= 300:
            error_bodies.add(status)
            serve = f"b{status}"
        else:
            serve = "ok"  # 2xx with a body: the file, as 200
        treatment.append(f"        {oid} {serve};")
        if obj.get("file"):
            files.append(f"        {oid} {_q(obj['file'])};")
        if obj.get("content_type"):
            types.append(f"        {oid} {_qv(obj['content_type'])};")
        counts: dict[str, int] = {}
        for name, value in obj["headers"]:
            low = name.lower()
            nth = counts.get(low, 0)
            counts[low] = nth + 1
            var = header_vars.setdefault((low, nth), f"$cb_h{len(header_vars)}")
            header_names.setdefault((low, nth), name)
            header_values.setdefault(var, []).append(f"        {oid} {_qv(value)};")

    longest = max((len(k) for k in seen), default=0)
    maps = [f"    map_hash_bucket_size {min(_pow2(longest + 64), 65536)};",
            f"    map_hash_max_size {max(2048, _pow2(4 * len(objects)))};",
            "    geo $cb_dollar { default \"$\"; }",
            '    map "$scheme://$host:$server_port$request_uri" $cb_object {\n        default "";\n'
            + "\n".join(f"        {_q(_site_key(o))} {oid};" for oid, o in objects) + "\n    }"]

    def by_object(var: str, lines: list[str]) -> str:
        return f'    map $cb_object {var} {{\n        default "";\n' + "\n".join(lines) + "\n    }"

    maps += [by_object("$cb_serve", treatment), by_object("$cb_file", files),
             by_object("$cb_location", locations), by_object("$cb_type", types)]
    maps += [by_object(var, lines) for var, lines in header_values.items()]
    adds = ["        add_header Content-Type $cb_type always;"]
    adds += [f"        add_header {_q(header_names[key])} {var} always;" for key, var in header_vars.items()]
    returns = ['            if ($cb_serve = "") { return 404; }']
    returns += [f"            if ($cb_serve = r{c}) {{ return {c} $cb_location; }}" for c in sorted(redirects)]
    returns += [f"            if ($cb_serve = e{c}) {{ return {c}; }}" for c in sorted(bodiless)]
    returns += [f"            if ($cb_serve = b{c}) {{ return {c}; }}" for c in sorted(error_bodies)]
    error_page = (f"        error_page {' '.join(str(c) for c in sorted(error_bodies))} @cb_body;\n"
                  if error_bodies else "")
    listen = "\n".join(web._listen(port, tls) for port, tls in sorted(listens.items()))
    server = f"""    default_type "";
    # Long recorded URLs: request lines and HTTP/2 header fields up to 64 KiB.
    large_client_header_buffers 4 64k;
{chr(10).join(maps)}
    server {{
{listen}
        server_name _;
{web._tls()}
        root {web.site_dir};
        # Every load must fetch every byte: no caching, no validators for revalidation.
        etag off;
        if_modified_since off;
        add_header Last-Modified "" always;  # an empty value removes the file's date
        # Redirects go to the recorded Location as it was written.
        absolute_redirect off;
        add_header Cache-Control "no-store" always;
        # Every object's size and timing visible to the page (Resource Timing), on any host.
        add_header Timing-Allow-Origin "*" always;
{chr(10).join(adds)}
{error_page}        location / {{
{chr(10).join(returns)}
            try_files $cb_file =404;
        }}
        location @cb_body {{ try_files $cb_file =404; }}
    }}"""
    return "", server
