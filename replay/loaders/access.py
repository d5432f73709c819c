"""How a loader reaches and trusts the replay's web server (kept light: the workers import it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerAccess:
    """How a loader reaches and trusts a replay's web server (``WebServer.access``).

    ``hosts`` resolve to ``address`` (a recorded site's host names; every other name fails to
    resolve: nothing outside the server is reached); ``ca_cert`` is the run's CA, which the h2
    loader verifies the server against; ``spki_sha256`` (base64 SHA-256 of the server
    certificate's public key) is what Chromium accepts the certificate by
    (``--ignore-certificate-errors-spki-list``: a browser profile trusts no CA of a run)."""

    address: str
    hosts: tuple[str, ...] = ()
    ca_cert: str | None = None
    spki_sha256: str | None = None

    def argv(self) -> list[str]:
        """The worker options that carry this (``--server-address``, ``--resolve HOST=ADDRESS``,
        ``--ca-cert``, ``--cert-spki``)."""
        out: list[str] = ["--server-address", self.address]
        for host in self.hosts:
            out += ["--resolve", f"{host}={self.address}"]
        if self.ca_cert:
            out += ["--ca-cert", self.ca_cert]
        if self.spki_sha256:
            out += ["--cert-spki", self.spki_sha256]
        return out


def parse_resolve(values: list[str] | None) -> dict[str, str]:
    """``--resolve HOST=ADDRESS`` options → {host: address}."""
    out: dict[str, str] = {}
    for value in values or []:
        host, sep, address = value.partition("=")
        if not sep or not host or not address:
            raise ValueError(f"--resolve {value!r}: HOST=ADDRESS expected")
        out[host.lower()] = address
    return out
