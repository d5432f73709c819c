"""Receive-window caps of real phones, as a setting of the UE namespace's TCP.

Phones of the bufferbloat study capped ``net.ipv4.tcp_rmem``'s maximum per network type, so
the receive window — and with it the sender's in-flight data and cwnd — stopped at a fixed
size ("flat TCP", docs/fidelity-table.md rows BB-3, BB-4, LTE-8). :data:`PHONE_RMEM_MAX` is
that table, BB12 App. B Table 2 as quoted in the fidelity table's parameter section §7 B
(bytes; "—" entries of the paper are left out)::

    network   Galaxy S2 (AT&T)  HTC EVO Shift (Sprint)  Droid Charge (Verizon)  LG G2x (T-Mobile)
    WiFi      110208            110208                  393216                  393216
    UMTS      110208            393216                  196608                  110208
    EDGE      35040             393216                  35040                   35040
    GPRS      11680             393216                  11680                   11680
    HSPA+     262144            —                       —                       262144
    WiMAX     —                 524288                  —                       —
    LTE       —                 —                       484848                  —
    Default   110208            110208                  484848                  110208

A UE setting (``clawbed replay --ue-rmem``, a suite condition's ``ue_rmem:``) is one of:

- ``PHONE`` — that phone's *Default* column (e.g. ``droid-charge``: 484848);
- ``PHONE:NETWORK`` — one cell of the table (``galaxy-s2:hspa+``: 262144);
- ``BYTES`` — any maximum, as a byte count or a size (``131712``, ``256KiB``): e.g. LTE13
  §7.2's initial advertised window of 131,712 B, or BB12's better caps 655360 / 917504;
- ``MIN,DEFAULT,MAX`` — all three ``tcp_rmem`` values (sizes as above), e.g. an Android
  per-network ``tcp_buffer_sizes`` entry. The default sets the first receive buffer, and with it
  how fast the advertised window may open in a connection's first round trips.

What is set in the UE namespace (:meth:`UeRmem.apply`), and why:

- ``tcp_rmem`` = ``4096 D MAX``: MAX from the table; the minimum 4096 is Linux's; the default
  D is the 87380 of the Linux 2.6/3.0 kernels these phones ran (BB12 §2.1, LTE13 §3.2: Android
  4.0.4 on 3.0.8), never above MAX. The paper gives only the maximum (§7 B);
- ``tcp_moderate_rcvbuf`` = 1: receive-buffer auto-tuning on, as those kernels shipped it
  (the cap binds because auto-tuning grows the buffer up to MAX; with it off the window would
  stay at D).

The advertised window is the buffer minus the kernel's overhead share (this kernel's
``scaling_ratio``, ~half to three quarters of MAX), as on the phone's own kernel
(``tcp_adv_win_scale``); the sender sees the window the kernel really advertises.

Without a setting the replay keeps its uncapped :data:`UNCAPPED` (8 MiB maximum).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clawbed.errors import InputError
from clawbed.units import parse_size_bytes

#: Per phone, per network type, ``tcp_rmem`` max in bytes (BB12 App. B Table 2; module docstring).
PHONE_RMEM_MAX: dict[str, dict[str, int]] = {
    "galaxy-s2": {"wifi": 110208, "umts": 110208, "edge": 35040, "gprs": 11680, "hspa+": 262144,
                  "default": 110208},
    "htc-evo-shift": {"wifi": 110208, "umts": 393216, "edge": 393216, "gprs": 393216, "wimax": 524288,
                      "default": 110208},
    "droid-charge": {"wifi": 393216, "umts": 196608, "edge": 35040, "gprs": 11680, "lte": 484848,
                     "default": 484848},
    "lg-g2x": {"wifi": 393216, "umts": 110208, "edge": 35040, "gprs": 11680, "hspa+": 262144,
               "default": 110208},
}
#: Each phone's carrier in the study (for the manifest and help texts).
PHONE_CARRIER = {"galaxy-s2": "AT&T", "htc-evo-shift": "Sprint", "droid-charge": "Verizon", "lg-g2x": "T-Mobile"}
#: ``tcp_rmem`` min and default of the phones' kernels (Linux 2.6/3.0 defaults), bytes.
PHONE_RMEM_MIN = 4096
PHONE_RMEM_DEFAULT = 87380
#: ``tcp_moderate_rcvbuf`` as the phones had it (auto-tuning on, the Linux default).
PHONE_MODERATE_RCVBUF = 1
#: The replay's UE without a setting: min, default, max bytes (the maximum, 8 MiB, is well
#: above the largest window any scheme reaches on the bundled traces).
UNCAPPED = (4096, 131072, 8 << 20)
#: Accepted maxima, bytes: at least the minimum, at most 1 GiB.
MIN_BYTES, MAX_BYTES = PHONE_RMEM_MIN, 1 << 30


@dataclass(frozen=True)
class UeRmem:
    """The UE's receive-buffer setting: what is written into the UE namespace."""

    #: What was asked (``droid-charge``, ``galaxy-s2:hspa+``, ``262144``).
    setting: str
    tcp_rmem: tuple[int, int, int]
    moderate_rcvbuf: int
    #: (phone, network) when taken from the table, else None.
    phone: str | None = None
    network: str | None = None

    @property
    def max_bytes(self) -> int:
        return self.tcp_rmem[2]

    def apply(self, ns: Any) -> None:
        """Write the sysctls into namespace ``ns`` (a :class:`clawbed.netns.Namespace`)."""
        ns.sysctl("net.ipv4.tcp_rmem", " ".join(str(v) for v in self.tcp_rmem))
        ns.sysctl("net.ipv4.tcp_moderate_rcvbuf", self.moderate_rcvbuf)

    def describe(self) -> dict[str, Any]:
        source = None
        if self.phone is not None:
            source = (f"BB12 App. B Table 2: {self.phone} ({PHONE_CARRIER[self.phone]}), "
                      f"{self.network or 'default'}")
        return {"setting": self.setting, "tcp_rmem": list(self.tcp_rmem), "tcp_moderate_rcvbuf": self.moderate_rcvbuf,
                "phone": self.phone, "network": self.network, "source": source}


def choices() -> list[str]:
    """Every phone and phone:network the table knows (for help and error texts)."""
    return [*PHONE_RMEM_MAX, *(f"{p}:{n}" for p, nets in PHONE_RMEM_MAX.items() for n in nets if n != "default")]


def _from_bytes(setting: str, max_bytes: int, flag: str) -> UeRmem:
    if not MIN_BYTES <= max_bytes <= MAX_BYTES:
        raise InputError(f"{flag} {setting}: a receive-buffer maximum must be {MIN_BYTES} bytes .. 1 GiB")
    return UeRmem(setting, (PHONE_RMEM_MIN, min(UNCAPPED[1], max_bytes), max_bytes), PHONE_MODERATE_RCVBUF)


def _triple(text: str, flag: str) -> UeRmem:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise InputError(f"{flag} {text}: MIN,DEFAULT,MAX takes three sizes, not {len(parts)}")
    values = []
    for name, part in zip(("MIN", "DEFAULT", "MAX"), parts):
        try:
            values.append(parse_size_bytes(part, flag))
        except InputError:
            raise InputError(f"{flag} {text}: {name} {part!r} is not a size (e.g. 4096, 1MiB)") from None
    low, default, high = values
    if not MIN_BYTES <= high <= MAX_BYTES:
        raise InputError(f"{flag} {text}: MAX must be {MIN_BYTES} bytes .. 1 GiB")
    if not 0 < low <= default <= high:
        raise InputError(f"{flag} {text}: needs 0 < MIN ≤ DEFAULT ≤ MAX")
    return UeRmem(text, (low, default, high), PHONE_MODERATE_RCVBUF)


def resolve(value: str | int | None, flag: str = "--ue-rmem") -> UeRmem | None:
    """``PHONE``, ``PHONE:NETWORK``, a byte count / size, or ``MIN,DEFAULT,MAX`` → the
    setting (None → None).

    Errors name ``flag`` (``--ue-rmem`` on the command line, ``ue_rmem`` in a spec) and what
    would be accepted."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputError(f"{flag} {value!r}: give a phone ({', '.join(PHONE_RMEM_MAX)}), PHONE:NETWORK or bytes")
    if isinstance(value, int):
        return _from_bytes(str(value), value, flag)
    text = str(value).strip()
    phone, _, network = text.lower().partition(":")
    if phone in PHONE_RMEM_MAX:
        nets = PHONE_RMEM_MAX[phone]
        if network and network not in nets:
            known = ", ".join(n for n in nets if n != "default")
            raise InputError(f"{flag} {text}: BB12's table has no {network!r} value for {phone}; it has {known}")
        max_bytes = nets[network or "default"]
        default = min(PHONE_RMEM_DEFAULT, max_bytes)
        return UeRmem(text, (PHONE_RMEM_MIN, default, max_bytes), PHONE_MODERATE_RCVBUF, phone,
                      network or None)
    if "," in text:
        return _triple(text, flag)
    if text and (text[0].isdigit()):
        try:
            max_bytes = parse_size_bytes(text, flag)
        except InputError:
            raise InputError(f"{flag} {text}: not a size (e.g. 262144 or 256KiB) nor a phone "
                             f"({', '.join(PHONE_RMEM_MAX)})") from None
        return _from_bytes(text, max_bytes, flag)
    raise InputError(f"{flag} {text!r}: unknown phone; one of {', '.join(PHONE_RMEM_MAX)} (optionally "
                     f":NETWORK, e.g. galaxy-s2:hspa+), or a byte count such as 262144")


def read_back(ns: Any) -> dict[str, Any]:
    """The receive-buffer sysctls in force in namespace ``ns`` (for the manifest)."""
    out = ns.run(["cat", "/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/ipv4/tcp_moderate_rcvbuf"]).stdout.split()
    return {"tcp_rmem": [int(v) for v in out[:3]], "tcp_moderate_rcvbuf": int(out[3])}
