"""One settings vocabulary: what ``clawbed emu run``, ``clawbed replay``, suite specs'
conditions and fidelity rows all accept, spelled the same everywhere and checked in one place.

Each setting is one :class:`Setting` in :data:`SETTINGS`: its name is the key of a spec's
condition (and of a fidelity row's, which are suite specs) and the field of
:class:`~clawbed.replay.run.ReplayConfig`; its flag is ``--`` plus the name with dashes. The
CLIs' options are made from the registry (:func:`options`), the spec's condition checks each
key with the same :func:`check`, and the emulator's config keys come from one function
(:func:`emulator_fields`), so a setting means the same thing whichever door it came in by.
``docs/settings.md`` is the reference, written from the registry (:func:`reference_markdown`;
a test fails when it is stale).

Adding a setting: one ``register(Setting(...))`` below (or in the module that implements it),
a field of the same name on ``ReplayConfig`` and on the spec's ``Condition``, and where it
acts (:func:`emulator_fields` for the cell, the replay and ``emu run`` for the hosts). The
tests in ``tests/test_settings.py`` check that every door lists it.

A setting with ``emu=False`` needs what only a replay has (a web server, a wired host): ``emu
run`` runs the user's own command and servers, so it does not offer it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import click

from clawbed import tcpstack
from clawbed.claw.client.fast import DEFAULT_IMPL, IMPLS
from clawbed.claw.server.sysctls import check_overrides
from clawbed.emulator.config import check_policy, parse_rate_bps
from clawbed.emulator.events import EventError, check_event, parse_event
from clawbed.emulator.policies import POLICIES, default_policy, policy_names
from clawbed.errors import InputError
from clawbed.replay import rmem
from clawbed.replay.network.crosstraffic import MAX_UE_FLOWS, parse_flow, ue_flow_from
from clawbed.units import parse_size_bytes

#: The diag feed's delivery timings (emulator/DIAG_FEED.md, "Feed timing").
FEED_TIMINGS = ("phone", "ideal")
#: How a setting's flag takes values: one value, an on/off switch, a repeatable flag whose
#: values form a list, or a repeatable ``KEY=VALUE`` flag whose values form a table.
Kind = Literal["value", "switch", "list", "table"]
#: What a setting acts on, for the reference and the help's grouping.
Part = Literal["cell", "network", "server", "ue", "page"]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Setting:
    """One setting of the vocabulary."""

    #: The spec key and config field; the flag is ``--`` + name with dashes.
    name: str
    #: One line for ``--help`` and the reference.
    help: str
    #: Any value (a spec's YAML value, or :attr:`parse`'s result) → its canonical form; a
    #: ValueError says what is wrong with the value (the caller names the key or flag).
    check: Callable[[Any], Any]
    #: One flag value's text → a value for :attr:`check` (an item, for list and table kinds).
    parse: Callable[[str], Any] = str
    default: Any = None
    kind: Kind = "value"
    metavar: str = "VALUE"
    part: Part = "cell"
    #: ``clawbed emu run`` offers it (False: it needs a page load, a web server or a wired host).
    emu: bool = True
    #: A setting that scenario ids hashed before this registry existed stays in every id;
    #: the others count only when set, so the ids of specs without them do not change.
    always_hashed: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> list[str]:
        """The flag, and for a repeatable one its singular too (``--events`` and ``--event``)."""
        if self.kind in ("list", "table") and self.flag.endswith("s"):
            return [self.flag, self.flag[:-1]]
        return [self.flag]

    def empty(self) -> Any:
        """The value of an unset setting."""
        return {"list": [], "table": {}}.get(self.kind, self.default)


#: name → setting, in the order the help and the reference list them.
SETTINGS: dict[str, Setting] = {}


def register(setting: Setting) -> Setting:
    if setting.name in SETTINGS:
        raise ValueError(f"setting {setting.name!r} is registered twice")
    SETTINGS[setting.name] = setting
    return setting


def check(name: str, value: Any) -> Any:
    """``value`` of setting ``name`` in canonical form; a ValueError names nothing but the value."""
    setting = SETTINGS[name]
    if value is None or (setting.kind in ("list", "table") and not value):
        return setting.empty()
    return setting.check(value)


def check_all(values: Mapping[str, Any], *, as_flags: bool = False, where: str = "") -> dict[str, Any]:
    """Every setting of ``values`` checked; an InputError names the key (after ``where``),
    or the flag with ``as_flags``."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        if name not in SETTINGS:
            raise InputError(f"{where}{name}: not a setting; one of {', '.join(SETTINGS)}")
        try:
            out[name] = check(name, value)
        except ValueError as e:
            raise InputError(f"{where}{SETTINGS[name].flag if as_flags else name}: {e}") from None
    return out


# --- value checks and parsers ---------------------------------------------------------------


def _policy(category: str) -> Callable[[Any], Any]:
    def check_choice(value: Any) -> Any:
        table = check_policy(category, value)
        # A table of its kind only is the name: the same settings, the same scenario id.
        return table["kind"] if set(table) == {"kind"} else table

    return check_choice


def parse_policy(category: str) -> Callable[[str], Any]:
    """``NAME`` or ``NAME:KEY=VALUE,...`` → the name, or ``{"kind": NAME, KEY: VALUE, ...}``,
    each parameter typed as the registry (``emulator/policies.json``) declares it."""

    def parse(text: str) -> Any:
        name, _, rest = text.partition(":")
        names = policy_names(category)
        if name not in names:
            raise ValueError(f"{name!r}: one of {', '.join(names)}")
        if not rest:
            return name
        params = next(p for p in POLICIES[category]["policies"] if p["name"] == name)["params"]
        types = {p["name"]: p["type"] for p in params}
        choice: dict[str, Any] = {"kind": name}
        for item in rest.split(","):
            key, eq, raw = item.partition("=")
            key = key.strip()
            if not eq or key not in types:
                raise ValueError(f"{item!r}: give KEY=VALUE with KEY one of {', '.join(types) or 'none'} "
                                 f"({name}'s parameters)")
            try:
                choice[key] = {"integer": int, "real": float}.get(types[key], _bool)(raw.strip())
            except ValueError:
                kind = {"integer": "an integer", "real": "a number"}.get(types[key], "true or false")
                raise ValueError(f"{key}={raw!r}: not {kind}") from None
        return choice

    return parse


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ValueError(text)
    return text.lower() == "true"


def _float_range(lo: float, hi: float) -> Callable[[Any], float]:
    def check_float(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{value!r}: a number is expected")
        if not lo <= value <= hi:
            raise ValueError(f"{value:g}: must be {lo:g}..{hi:g}")
        return float(value)

    return check_float


def _int_range(lo: int, hi: int) -> Callable[[Any], int]:
    def check_int(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r}: an integer is expected")
        if not lo <= value <= hi:
            raise ValueError(f"{value}: must be {lo}..{hi}")
        return value

    return check_int


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r}: an integer is expected") from None


def _size(value: Any) -> str | int:
    """A size such as ``3MiB`` or a byte count, 1 byte .. 1 GiB; kept as given (ids hash it)."""
    try:
        n = value if isinstance(value, int) and not isinstance(value, bool) else parse_size_bytes(str(value))
    except InputError:
        raise ValueError(f"{value!r} is not a size like 65536, 512KiB or 3MiB") from None
    if not 1 <= n <= 1 << 30:
        raise ValueError(f"{value!r} must be 1 byte .. 1 GiB")
    return value if isinstance(value, int) else str(value)


def _rate(value: Any) -> str:
    parse_rate_bps(str(value))  # a ValueError says what a rate looks like
    return str(value)


def _choice(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def check_choice(value: Any) -> str:
        if value not in choices:
            raise ValueError(f"{value!r}: one of {', '.join(choices)}")
        return str(value)

    return check_choice


def _switch(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{value!r}: true or false")
    return value


def _sysctls(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError("a table of sysctl: value")
    table = {str(k): str(v) for k, v in value.items()}
    check_overrides(table)
    return table


def _ue_sysctls(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError("a table of sysctl: value")
    table = {str(k): str(v) for k, v in value.items()}
    tcpstack.check_sysctls(table)
    return table


def _ue_offloads(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError("a table of offload: on|off")
    return tcpstack.check_offloads(value)


def _ue_rmem(value: Any) -> str | int:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"{value!r}: a phone, PHONE:NETWORK, bytes or MIN,DEFAULT,MAX")
    try:
        rmem.resolve(value, "")
    except InputError as e:
        raise ValueError(str(e).strip()) from None
    return value


def _feed_timing(value: Any) -> str:
    if value not in FEED_TIMINGS:
        raise ValueError(f"{value!r}: one of {', '.join(FEED_TIMINGS)}")
    return str(value)


def parse_key_value(text: str) -> tuple[str, str]:
    """One ``KEY=VALUE`` of a table setting's flag."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise ValueError(f"{text!r}: KEY=VALUE expected")
    return key.strip(), value.strip()


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text!r}: a number is expected") from None


def _flow(text: str) -> dict[str, Any]:
    """One ``--flow`` value (``poisson:rate_per_s=2,bytes=100000``) → its entry as a spec writes it."""
    try:
        return parse_flow(text, flag="").describe()
    except InputError as e:
        raise ValueError(str(e).strip()) from None


def _flows(value: Any) -> list[dict[str, Any]]:
    """A list of flow entries (mappings, as a spec writes them) → each checked, every key written out."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{value!r}: a list of flows ({{kind: bulk}}, {{kind: poisson, rate_per_s: 2}}, ...)")
    if len(value) > MAX_UE_FLOWS:
        raise ValueError(f"{len(value)} flows: at most {MAX_UE_FLOWS}")
    out = []
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise ValueError(f"[{i}] {entry!r}: a flow is a mapping with a kind (bulk, onoff, poisson)")
        try:
            out.append(ue_flow_from(entry, flag=f"[{i}]").describe())
        except InputError as e:
            raise ValueError(str(e)) from None
    return out


def _events(value: Any) -> list[dict[str, Any]]:
    """A list of scripted events (tables with kind and parameters, as a spec writes them) → each
    checked (emulator/events.py); the UE numbers are checked with the cell's UEs, by the emulator's config."""
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"{value!r}: a list of events ({{kind: outage, at_ms: 3000, ms: 500}}, ...)")
    out = []
    for i, entry in enumerate(value):
        try:
            out.append(check_event(entry))
        except EventError as e:
            raise ValueError(f"[{i}].{e.key}: {e.problem}") from None
    return out


# --- the registry ---------------------------------------------------------------------------

for _category, _what in (("scheduler", "the cell's scheduler"), ("queue", "the base station's queue policy, each UE"),
                         ("loss", "the cell's transmission loss model (HARQ/RLC)"),
                         ("rrc", "the cell's RRC/DRX model"), ("stall", "link-layer stalls that hold data")):
    _names = "|".join(policy_names(_category))
    register(Setting(
        _category, f"{_what}: {', '.join(policy_names(_category))}, optionally with parameters "
                   f"(NAME:KEY=VALUE,...; emulator/policies.json); default {default_policy(_category)}",
        check=_policy(_category), parse=parse_policy(_category),
        default=default_policy(_category) if _category == "scheduler" else None,
        metavar=f"[{_names}][:KEY=VALUE,...]", part="cell", always_hashed=_category == "scheduler"))

register(Setting("events", "a scripted event (repeatable), KIND:KEY=VALUE,...: drop (one of at_ms, packet, seq_byte, "
                           "in_flight_bytes), outage (at_ms, ms), capacity (at_ms, factor, ms), burst (at_ms, ms, "
                           "share); ue (default 0) for all but burst; at_ms counts from the emulator's start and from "
                           "each seek (a replay's: each load's start), e.g. drop:in_flight_bytes=300000 "
                           "(emulator/events.json)",
                 check=_events, parse=parse_event, kind="list", metavar="KIND:KEY=VALUE,...", part="cell"))
register(Setting("bs_buffer", "the base station's queue per UE, e.g. 3MiB (default 3MiB)", check=_size,
                 metavar="SIZE", part="cell", always_hashed=True))
register(Setting("core_rtt_ms", "core network round trip, split evenly over both directions, ms (default: the "
                                "trace's core_delay_ms column, else 50)",
                 check=_float_range(0, 10_000), parse=_number, metavar="MS", part="network", always_hashed=True))
register(Setting("air_delay_ms", "air interface delay, end of the carrying subframe to delivery, each way, ms "
                                 "(default 1)",
                 check=_float_range(0, 10_000), parse=_number, metavar="MS", part="cell"))
register(Setting("uplink_rate", "the UE's uplink rate, e.g. 5mbit (default: the trace's uplink capacity)",
                 check=_rate, metavar="RATE", part="cell"))
register(Setting("rsrq_noise_db", "RSRQ measurement noise σ, dB (default 0.5)", check=_float_range(0, 20),
                 parse=_number, metavar="DB", part="cell"))
register(Setting("server_sysctls", "a server sysctl (net.ipv4.* / net.core.*) over the schemes' common ones, "
                                   "repeatable, e.g. net.ipv4.tcp_slow_start_after_idle=1",
                 check=_sysctls, parse=parse_key_value, kind="table", metavar="KEY=VALUE", part="server"))
register(Setting("server_stack", f"the server's TCP as a kernel of that era had it: {', '.join(tcpstack.ERAS)} "
                                 f"(sysctls, route options, Cubic's parameters; default current: this kernel as "
                                 f"it is; docs/tcp-stacks.md)",
                 check=tcpstack.check_era, default="current", metavar="ERA", part="server"))
register(Setting("ue_stack", f"the UE's TCP as a phone kernel of that era had it: {', '.join(tcpstack.ERAS)} "
                             f"(default current; docs/tcp-stacks.md)",
                 check=tcpstack.check_era, default="current", metavar="ERA", part="ue"))
register(Setting("ue_sysctls", "a UE sysctl (net.ipv4.* / net.core.*) over the UE's defaults and its era's, "
                               "repeatable, e.g. net.ipv4.tcp_comp_sack_nr=0",
                 check=_ue_sysctls, parse=parse_key_value, kind="table", metavar="KEY=VALUE", part="ue"))
register(Setting("ue_offloads", f"an offload of the UE's TUN on or off ({', '.join(tcpstack.OFFLOAD_FEATURES)}), "
                                f"repeatable, e.g. gro=off (which also stops the emulator's merged, GRO-like "
                                f"writes to the UEs); default: the TUN's own (gro, gso, tso on)",
                 check=_ue_offloads, parse=parse_key_value, kind="table", metavar="NAME=on|off", part="ue"))
register(Setting("ue_rmem", "cap the UE's TCP receive buffer as a phone of BB12's table did (galaxy-s2, "
                            "htc-evo-shift, droid-charge, lg-g2x; e.g. galaxy-s2:hspa+), at BYTES, or all three "
                            "tcp_rmem values MIN,DEFAULT,MAX (default 4096,131072,8MiB)",
                 check=_ue_rmem, metavar="PHONE[:NETWORK]|BYTES|MIN,DEFAULT,MAX", part="ue"))
register(Setting("feed_timing", "how the UEs' diag feeds (what CLAW's client reads) are delivered: phone (in log "
                                "packets, late, as a phone's diag port: when 21 subframes had a transport block or at a "
                                "300 ms flush tick, measured on real logs: traces/diaglog/phone-feed-timing.json) or "
                                "ideal (each subframe as it happens); default phone",
                 check=_feed_timing, default="phone", metavar="phone|ideal", part="ue"))
register(Setting("claw_client", "the CLAW client each UE runs: fast (compiled, claw/client-rs; default) or "
                                "reference (the Python one, claw/client/)", check=_choice(IMPLS), default=DEFAULT_IMPL,
                 metavar="|".join(IMPLS), part="ue"))
register(Setting("drwa", "DRWA at the UE: advertise λ·RTT_min/RTT·cwnd_est (BB12 §5, λ = 3, α = 7/8)",
                 check=_switch, default=False, kind="switch", part="ue"))
register(Setting("flows", "a background flow on UE 0 (the replay's own), sharing its base-station queue with the page "
                          "(repeatable): bulk, onoff (bytes, off_ms) or poisson (rate_per_s, bytes: one size or "
                          "several as 10000/1MB; sigma), each with its own scheme and window (rmem: its socket's "
                          "receive buffer; drwa), e.g. poisson:rate_per_s=2,bytes=100000,rmem=262144 (replay/flows.py)",
                 check=_flows, parse=_flow, kind="list", metavar="KIND[:KEY=VALUE,...]", part="ue"))
register(Setting("gzip", "nginx compresses text responses (HTML, CSS, JS, JSON, SVG) with gzip on the fly "
                         "(default off: the bytes on the wire are the files'; not for a recorded site)",
                 check=_switch, default=False, kind="switch", part="server", emu=False))
# 64: MAX_HTTP1_CONNECTIONS of replay/loaders/h2.py (not imported: the loaders pull in more).
register(Setting("h1_connections_per_host", "HTTP/1.1 connections per host the loader opens, 1..64 (default 6; "
                                            "the browser loader takes 6 only: Chromium's limit is fixed)",
                 check=_int_range(1, 64), parse=_integer, default=6, metavar="N", part="page", emu=False))


# --- the doors ------------------------------------------------------------------------------


def names(door: Literal["emu", "replay"]) -> list[str]:
    """The settings ``door`` offers, in registry order."""
    return [s.name for s in SETTINGS.values() if door == "replay" or s.emu]


def _option(setting: Setting) -> Callable[[F], F]:
    def convert(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            if setting.kind == "switch":
                return value
            if setting.kind == "value":
                return None if value is None else check(setting.name, setting.parse(value))
            items = [setting.parse(v) for v in value]
            if setting.kind == "table":
                return check(setting.name, dict(items))
            return check(setting.name, items)
        except ValueError as e:
            raise click.BadParameter(str(e), ctx=ctx, param=param) from None

    if setting.kind == "switch":
        flag = setting.flag
        return click.option(f"{flag}/--no-{flag[2:]}", setting.name, default=setting.default, show_default=True,
                            help=setting.help)
    return click.option(*setting.flags, setting.name, multiple=setting.kind in ("list", "table"),
                        metavar=setting.metavar, callback=convert, help=setting.help)


def options(door: Literal["emu", "replay"]) -> Callable[[F], F]:
    """The click options of every setting ``door`` offers (registry order in ``--help``)."""

    def decorate(command: F) -> F:
        for name in reversed(names(door)):
            command = _option(SETTINGS[name])(command)
        return command

    return decorate


def take(kwargs: dict[str, Any], door: Literal["emu", "replay"]) -> dict[str, Any]:
    """Remove the settings' values from a command's keyword arguments: {name: value}."""
    return {name: kwargs.pop(name) for name in names(door)}


# --- where the cell's settings go -----------------------------------------------------------


def emulator_fields(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The emulator config's top-level keys and every UE's keys for the cell's settings in
    ``values`` (unset ones left to the emulator's defaults). The core delay is the caller's:
    a replay may move a wired delay into it."""
    cell: dict[str, Any] = {}
    for key in ("scheduler", "loss", "rrc", "stall"):
        if values.get(key) is not None:
            cell[key] = values[key]
    if values.get("rsrq_noise_db") is not None:
        cell["rsrq"] = {"noise_db": values["rsrq_noise_db"]}
    fields: dict[str, Any] = {"cell": cell} if cell else {}
    if values.get("air_delay_ms") is not None:
        fields["delays"] = {"air_ms": values["air_delay_ms"]}
    if values.get("events"):
        fields["events"] = list(values["events"])
    if values.get("feed_timing") is not None:
        fields["diag"] = {"feed_timing": values["feed_timing"]}
    ue: dict[str, Any] = {}
    ue_cell: dict[str, Any] = {}
    if values.get("bs_buffer") is not None:
        ue_cell["queue_limit_bytes"] = size_bytes(values["bs_buffer"])
    if values.get("queue") is not None:
        ue_cell["queue"] = values["queue"]
    if ue_cell:
        ue["cell"] = ue_cell
    if values.get("uplink_rate") is not None:
        ue["uplink_rate"] = values["uplink_rate"]
    if (values.get("ue_offloads") or {}).get("gro") == "off":
        # The emulator's merged writes to a UE's TUN are GRO's work done for it
        # (emulator/dataplane/src/offload.rs): without GRO every segment is its own packet.
        fields["tun_offload"] = False
    return fields, ue


def size_bytes(value: str | int) -> int:
    return value if isinstance(value, int) else parse_size_bytes(value)


def describe(values: Mapping[str, Any]) -> str:
    """The settings that are set, as flags, for a banner: ``--rrc umts --drwa``."""
    parts = []
    for name, value in values.items():
        setting = SETTINGS[name]
        if value is None or value == setting.empty() or (setting.kind == "switch" and value == setting.default):
            continue
        if setting.kind == "switch":
            parts.append(setting.flag if value else f"--no-{setting.flag[2:]}")
        elif setting.kind == "table":
            parts += [f"{setting.flag} {k}={v}" for k, v in value.items()]
        elif setting.kind == "list":
            parts += [f"{setting.flag} {_text(v)}" for v in value]
        else:
            parts.append(f"{setting.flag} {_text(value)}")
    return " ".join(parts)


def _text(value: Any) -> str:
    if isinstance(value, Mapping):
        rest = ",".join(f"{k}={'/'.join(map(str, v)) if isinstance(v, list) else v}" for k, v in value.items()
                        if k != "kind" and v is not None and v is not False)
        return f"{value.get('kind', '')}:{rest}" if "kind" in value else rest
    return str(value)


# --- the reference --------------------------------------------------------------------------


def reference_markdown(extra: Iterable[tuple[str, str]] = ()) -> str:
    """``docs/settings.md``: one row per setting (spec key, flag, where it acts, the doors)."""
    lines = [
        "# Settings",
        "",
        "<!-- Written by `python -m clawbed.replay.settings > docs/settings.md`; a test fails when it is stale. -->",
        "",
        "One vocabulary for `clawbed emu run`, `clawbed replay`, suite specs' conditions and",
        "fidelity rows: the spec key is the setting's name, the flag is `--` plus the name with",
        "dashes, and the same check runs whichever door a value came in by (`replay/settings.py`).",
        "A table setting's flag is repeated, one `KEY=VALUE` each; a list setting's flag is",
        "repeated, one item each; in a spec both are YAML (a mapping, a list).",
        "",
        "| spec key | flag | acts on | `emu run` | what |",
        "|---|---|---|---|---|",
    ]
    for s in SETTINGS.values():
        flag = f"`{s.flag}`" + ("" if s.kind != "switch" else f" / `--no-{s.flag[2:]}`")
        if s.kind in ("value", "list", "table"):
            flag = f"`{s.flag} {s.metavar}`"
        what = s.help.replace("|", "\\|")
        lines.append(f"| `{s.name}` | {flag.replace('|', chr(92) + '|')} | {s.part} | {'yes' if s.emu else 'no'} "
                     f"| {what} |")
    lines += ["", *(f"{a}: {b}" for a, b in extra)]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(reference_markdown())
