"""The emulator's configuration as a validated model, written as the JSON file ``clawbed-emu`` reads.

The keys, defaults and ranges mirror the binary's (``emulator/dataplane/src/config/`` and
``emulator/cell/src/config.rs``; the binary is the authority and checks everything again);
the cell's policies (scheduler, queue policy, loss model) and their parameters are not
mirrored but read from the binary's own list, ``policies.json`` (:data:`POLICIES`),
so a mistake is reported here, naming the field in the binary's notation
(``ues[1].rate``), before the emulator starts. Unknown keys are refused, as the binary
refuses them.

Build one for a topology with :meth:`EmulatorConfig.for_topology`; write it with
:meth:`EmulatorConfig.write`.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

# Re-exported: callers take the scheduler names and default from the config module.
from clawbed.emulator.events import EventError, check_events
from clawbed.emulator.policies import DEFAULT_SCHEDULER as DEFAULT_SCHEDULER
from clawbed.emulator.policies import POLICIES
from clawbed.emulator.policies import SCHEDULERS as SCHEDULERS
from clawbed.emulator.topology import CellTopology
from clawbed.errors import InputError
from clawbed.netns import IFNAME_MAX

#: Most UEs the binary accepts.
MAX_UES = 64
#: Upper bound of every configured delay, ms.
MAX_DELAY_MS = 10_000.0
#: Default diag feed port on 127.0.0.1 in each UE namespace.
DEFAULT_DIAG_PORT = 5775
#: CPU numbers an affinity list may hold (glibc's CPU_SETSIZE).
MAX_CPUS = 1024

_RATE_UNITS = {"": 1.0, "bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
_RATE = re.compile(r"^([0-9]*\.?[0-9]+)([a-z]*)$")
_IFNAME = re.compile(rf"^[A-Za-z0-9._-]{{1,{IFNAME_MAX}}}$")


class ConfigError(InputError):
    """An invalid emulator setting; the message names the field (``ues[0].rate``) or flag."""


def parse_rate_bps(text: str) -> int:
    """A rate like ``12mbit``, ``1.5Mbit``, ``500kbit``, ``1gbit``, ``800bit`` or ``800`` in bit/s.

    Byte units (``mbps``, ``MB``) are refused, as the binary refuses them: tc's ``mbps``
    means megabytes per second, a classic trap.
    """
    match = _RATE.match(text.strip().lower())
    if not match or match.group(2) not in _RATE_UNITS:
        unit = match.group(2) if match else ""
        hint = f"unknown unit {unit!r}; " if unit else ""
        raise ValueError(f"{text!r} is not a rate like 12mbit ({hint}use bit, kbit, mbit or gbit; byte units are not accepted)")
    bps = round(float(match.group(1)) * _RATE_UNITS[match.group(2)])
    if not 1 <= bps <= 10**12:
        raise ValueError(f"{text!r}: a rate must be between 1 bit/s and 1000 gbit/s")
    return bps


class Mode(str, Enum):
    """What drives the downlink capacity."""

    CELL = "cell"          #: a PHY trace per UE drives the LTE cell model
    MAHIMAHI = "mahimahi"  #: a Mahimahi delivery-opportunity trace per UE, open loop
    RATE = "rate"          #: a constant rate per UE, open loop


def check_scheduler(name: str) -> str:
    """``name`` if it is a scheduler's, else a ValueError listing them."""
    if name not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {name!r} (one of {', '.join(SCHEDULERS)})")
    return name


#: A scheduler's name, validated (for models outside the emulator's, e.g. experiment specs).
SchedulerName = Annotated[str, AfterValidator(check_scheduler)]


def _check_param(param: dict[str, Any], value: Any) -> Any:
    kind = param["type"]
    ok = False
    if kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool) and param["min"] <= value <= param["max"]
    elif kind == "real":
        ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
              and param["min"] <= value <= param["max"])
    if not ok:
        expected = "true or false" if kind == "bool" else f"{'an integer' if kind == 'integer' else 'a number'} in " \
                                                          f"{param['min']}..={param['max']}"
        raise ValueError(f"{param['name']}: must be {expected}, got {value!r}")
    return value


def check_policy(category: str, choice: Any) -> dict[str, Any]:
    """A policy choice of ``category`` (a name, or a mapping with ``kind`` and parameters) as
    the table the binary reads, ``{"kind": name, **params}``; a ValueError names what is wrong."""
    if isinstance(choice, str):
        choice = {"kind": choice}
    if not isinstance(choice, dict) or not isinstance(choice.get("kind"), str):
        raise ValueError("must be a policy name, or a table with `kind` and the policy's parameters")
    entry = POLICIES[category]
    policy = next((p for p in entry["policies"] if p["name"] == choice["kind"]), None)
    if policy is None:
        names = ", ".join(p["name"] for p in entry["policies"])
        raise ValueError(f"unknown {category} {choice['kind']!r} (one of {names})")
    params = {p["name"]: p for p in policy["params"]}
    for key, value in choice.items():
        if key == "kind":
            continue
        if key not in params:
            known = ", ".join(params) or "none"
            raise ValueError(f"{key}: unknown parameter of {category} {policy['name']!r} (its parameters: {known})")
        _check_param(params[key], value)
    return dict(choice)


def _default_policy(category: str) -> Any:
    return Field(default_factory=lambda: {"kind": POLICIES[category]["default"]},
                 description=f"{POLICIES[category]['summary']}: a name or a table with kind and parameters "
                             f"(default {POLICIES[category]['default']})")


#: A policy choice of each category (checked against the catalogue).
SchedulerPolicy = Annotated[dict[str, Any], BeforeValidator(lambda v: check_policy("scheduler", v))]
LossPolicy = Annotated[dict[str, Any], BeforeValidator(lambda v: check_policy("loss", v))]
QueuePolicy = Annotated[dict[str, Any], BeforeValidator(lambda v: check_policy("queue", v))]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_enum_values=False)


class HarqConfig(_Model):
    """HARQ: retransmission of failed transport blocks."""

    rtt_ms: int = Field(8, ge=1, le=16, description="transmission → retransmission, ms")
    max_tx: int = Field(4, ge=1, le=8, description="transmissions before RLC takes over")
    bler: float = Field(0.1, ge=0.0, le=1.0, description="first-transmission failure probability without a trace column")
    retx_bler: float = Field(0.41, ge=0.0, le=1.0, description="failure probability after a failure")


class RlcConfig(_Model):
    """RLC acknowledged mode."""

    retx_delay_ms: int = Field(40, ge=0, le=1000, description="HARQ gives up → RLC retransmission ready, ms")
    max_retx: int = Field(1, ge=0, le=32, description="RLC retransmissions before a loss")


class RsrqConfig(_Model):
    """RSRQ measurement from the true allocation (Eq. 6)."""

    noise_db: float = Field(0.5, ge=0.0, le=20.0, description="Gaussian noise σ, dB")
    quant_db: float = Field(0.0625, ge=0.0, le=1.0, description="quantisation step, dB (0: none)")
    hold_ms: int = Field(1, ge=1, le=10_000, description="measurement period, ms")


def _rrc_legacy(table: dict[str, Any]) -> dict[str, Any]:
    """A ``cell.rrc`` table without ``kind`` (the former switch and the fidelity suite's keys), read as
    the binary reads it (``emulator/cell/src/rrc.rs``, ``legacy_table``): ``enabled = false`` → ``off``;
    else the kind from ``profile`` (``lte`` by default, ``3g``/``umts``, ``off``); ``hold_downlink``
    must be true (the models always hold); ``promotion_ms`` without quartiles is a fixed delay."""
    table = dict(table)
    enabled = table.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled: must be true or false, got {enabled!r}")
    profile = table.pop("profile", "lte")
    if table.pop("hold_downlink", True) is not True:
        raise ValueError("hold_downlink: the RRC models always hold downlink data (true)")
    if not enabled:
        return {"kind": "off"}
    kinds = {"lte": "lte", "3g": "umts", "umts": "umts", "off": "off"}
    if profile not in kinds:
        raise ValueError(f"profile: must be \"lte\", \"3g\"/\"umts\" or \"off\", got {profile!r}")
    kind = kinds[profile]
    if kind == "lte" and "promotion_ms" in table and "promotion_p25_ms" not in table \
            and "promotion_p75_ms" not in table:
        table["promotion_p25_ms"] = table["promotion_p75_ms"] = table["promotion_ms"]
    return {"kind": kind, **table}


def _stall_legacy(table: dict[str, Any]) -> dict[str, Any]:
    """A ``cell.stall`` table without ``kind``: ``enabled = false`` → ``off``, else ``poisson``."""
    table = dict(table)
    enabled = table.pop("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError(f"enabled: must be true or false, got {enabled!r}")
    return {"kind": "poisson", **table} if enabled else {"kind": "off"}


def _switched(category: str, value: Any, legacy: Any) -> dict[str, Any]:
    if isinstance(value, dict) and "kind" not in value:
        value = legacy(value)
    return check_policy(category, value)


#: The RRC/DRX model (``lte`` default, ``umts``, ``off``) and the stall process (``off`` default,
#: ``poisson``): policies like the others, whose kind-less tables read as switches.
RrcPolicy = Annotated[dict[str, Any], BeforeValidator(lambda v: _switched("rrc", v, _rrc_legacy))]
StallPolicy = Annotated[dict[str, Any], BeforeValidator(lambda v: _switched("stall", v, _stall_legacy))]


class CellConfig(_Model):
    """The cell as a whole (the binary's ``cell`` table)."""

    n_rb: Literal[6, 15, 25, 50, 75, 100] | None = Field(None, description="RBs; default: the trace's")
    n_antennas: int | None = Field(None, ge=1, le=2, description="transmit antenna ports; default: the trace's")
    scheduler: SchedulerPolicy = _default_policy("scheduler")
    loss: LossPolicy = _default_policy("loss")
    default_other_users: int = Field(1, ge=1, le=255, description="other users when the trace does not say")
    harq: HarqConfig = Field(default_factory=HarqConfig)
    rlc: RlcConfig = Field(default_factory=RlcConfig)
    rsrq: RsrqConfig = Field(default_factory=RsrqConfig)
    rrc: RrcPolicy = _default_policy("rrc")
    stall: StallPolicy = _default_policy("stall")


class UeCellConfig(_Model):
    """Per-UE parameters of the cell model (a UE's ``cell`` table)."""

    queue_limit_bytes: int = Field(3 * 1024 * 1024, ge=1, le=1 << 30, description="BS drop-tail limit, bytes")
    rsrp_dbm: float = Field(-90.0, ge=-140.0, le=-44.0, description="RSRP when the trace has none, dBm")
    queue: QueuePolicy = _default_policy("queue")


class Delays(_Model):
    """One-way delays of the emulated path, ms."""

    core_down_ms: float = Field(25.0, ge=0.0, le=MAX_DELAY_MS, description="core → base station")
    core_up_ms: float = Field(25.0, ge=0.0, le=MAX_DELAY_MS, description="base station → core")
    air_ms: float = Field(1.0, ge=0.0, le=MAX_DELAY_MS, description="end of the carrying subframe → delivery, both ways")
    sr_period_ms: float = Field(10.0, ge=0.0, le=MAX_DELAY_MS, description="uplink scheduling-request period")
    grant_delay_ms: float = Field(8.0, ge=0.0, le=MAX_DELAY_MS, description="scheduling request → first uplink subframe")
    core_delay_trace: Path | None = Field(None, description="CSV t_ms,core_delay_ms overriding the constants")
    ignore_trace_core_delay: bool = False

    @field_validator("core_delay_trace")
    @classmethod
    def _exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"{path} is not a file")
        return path.resolve() if path is not None else None


def _check_ifname(name: str | None) -> str | None:
    if name is not None and not _IFNAME.match(name):
        raise ValueError(f"{name!r} must be 1..{IFNAME_MAX} letters, digits, '-', '_' or '.'")
    return name


def _check_prefix(route: str) -> str:
    if route != "default":
        try:
            ipaddress.IPv4Network(route)
        except ValueError as e:
            raise ValueError(f"{route!r} is not 'default' or an IPv4 prefix with zero host bits ({e})") from None
    return route


class _TunSide(_Model):
    """A side of the emulator: the namespace its TUN is made in, the TUN's name, the
    prefixes routed into it."""

    netns: str = Field(min_length=1)
    tun: str | None = None
    routes: list[str] = Field(default_factory=list)

    @field_validator("tun")
    @classmethod
    def _tun(cls, name: str | None) -> str | None:
        return _check_ifname(name)

    @field_validator("routes")
    @classmethod
    def _routes(cls, routes: list[str]) -> list[str]:
        return [_check_prefix(r) for r in routes]


class CoreConfig(_TunSide):
    """The core side: its namespace and TUN (servers listen on ``address``)."""

    address: ipaddress.IPv4Address = ipaddress.IPv4Address("10.200.0.1")
    routes: list[str] = Field(default_factory=list, description="extra prefixes into the core TUN (UE addresses are routed anyway)")


class UeConfig(_TunSide):
    """One emulated UE: its namespace and TUN, what drives its links, its diag port."""

    address: ipaddress.IPv4Address | None = None
    routes: list[str] = Field(default_factory=lambda: ["default"])
    trace: Path | None = Field(None, description="PHY trace (.cbt/.csv), mode cell")
    trace_offset_ms: int = Field(0, ge=0, description="where in the trace this UE starts, ms")
    mahimahi_trace: Path | None = Field(None, description="Mahimahi downlink trace, mode mahimahi")
    uplink_mahimahi_trace: Path | None = Field(None, description="Mahimahi uplink trace (any mode)")
    rate: str | None = Field(None, description="downlink rate, mode rate, e.g. 12mbit")
    uplink_rate: str | None = Field(None, description="uplink rate (any mode), e.g. 5mbit")
    uplink_queue_limit_bytes: int = Field(3 * 1024 * 1024, ge=1, le=1 << 30,
                                          description="drop-tail limit of the UE's uplink buffer, bytes")
    diag_port: int = Field(DEFAULT_DIAG_PORT, ge=0, le=65535, description="0: any free port")
    diag_file: bool = Field(True, description="write this UE's feed to diag-ue<N>.jsonl/.mi2log (with diag.file); "
                                              "off for a big cell's background UEs (about 1 MB/s each)")
    cell: UeCellConfig = Field(default_factory=UeCellConfig)

    @field_validator("rate", "uplink_rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate_bps(value)
        return value

    @field_validator("trace", "mahimahi_trace", "uplink_mahimahi_trace")
    @classmethod
    def _exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"{path} is not a file")
        return path.resolve() if path is not None else None

    @model_validator(mode="after")
    def _one_uplink_source(self) -> UeConfig:
        if self.uplink_rate is not None and self.uplink_mahimahi_trace is not None:
            raise ValueError("give uplink_rate or uplink_mahimahi_trace, not both")
        return self


class Mi2logConfig(_Model):
    """The diag feed as diag log packets, the phone's own format (``DIAG_FEED.md``)."""

    file: bool = Field(True, description="also write diag-ue<N>.mi2log (only while `file` is on)")
    tcp: bool = Field(True, description="serve the byte stream on 127.0.0.1:<diag_port + 1> in the UE namespace")
    pty: bool = Field(False, description="serve it on a pseudo-terminal too (path in the ready line)")


class FeedTiming(str, Enum):
    """How the live diag feed is delivered (``DIAG_FEED.md``, "Feed timing")."""

    PHONE = "phone"
    IDEAL = "ideal"


class PhoneTiming(_Model):
    """A phone's packing of its diag feed, measured on real logs
    (``traces/diaglog/phone-feed-timing.json``, 0xB173 packets)."""

    records_per_packet: int = Field(21, ge=1, le=255, description="subframes with a transport block that fill a "
                                    "packet, which then goes at once (the most a real 0xB173 packet held)")
    flush_period_ms: int = Field(300, ge=1, le=10_000, description="the modem's flush tick, ms (the commonest "
                                 "spacing of the real logs' packets that were not full)")


class DiagConfig(_Model):
    """Diag feed options."""

    stats_period_ms: int = Field(1, ge=1, description="period of the cumulative RLC/PDCP statistics, ms")
    file: bool = Field(True, description="also write each UE's feed to diag-ue<N>.jsonl (off for a big cell: "
                                         "the feed then costs nothing while no subscriber is connected)")
    mi2log: Mi2logConfig = Field(default_factory=Mi2logConfig)
    feed_timing: FeedTiming = Field(FeedTiming.PHONE, description="how the live feed is delivered: phone (in "
                                    "packets, late, as a phone's diag port) or ideal (each subframe as it happens)")
    phone: PhoneTiming = Field(default_factory=PhoneTiming)


class AffinityConfig(_Model):
    """CPUs each of the emulator's threads may run on (empty: any)."""

    writer_with_cell: bool = Field(True, description="cb-tx on cb-cell's CPU unless tx names its own; neither named: "
                                   "both on the last CPU the emulator may use (they wake at the same instants)")
    cell: list[int] = Field(default_factory=list, description="cb-cell: the subframe clock")
    tx: list[int] = Field(default_factory=list, description="cb-tx: every TUN write")
    io: list[int] = Field(default_factory=list, description="cb-io: every TUN read")
    diag: list[int] = Field(default_factory=list, description="cb-diag: the diag feed")
    record: list[int] = Field(default_factory=list, description="cb-record: ground truth and packet log")

    @field_validator("cell", "tx", "io", "diag", "record")
    @classmethod
    def _cpus(cls, cpus: list[int]) -> list[int]:
        for cpu in cpus:
            if not 0 <= cpu < MAX_CPUS:
                raise ValueError(f"CPU {cpu} is not in 0..{MAX_CPUS - 1}")
        return cpus


class EmulatorConfig(_Model):
    """Everything ``clawbed-emu`` reads (its JSON config file)."""

    mode: Mode = Mode.CELL
    seed: int = Field(1, ge=0, lt=2**64)
    output_dir: Path = Field(description="diag files, ground truth, packet log (created by the emulator)")
    duration_s: float | None = Field(None, gt=0.0, le=1e7, description="stop after this much emulated time, s")
    loop_trace: bool = True
    background_trace: Path | None = Field(None, description="PHY trace of the cell's other users (mode cell); "
                                                            "default: UE 0's trace")
    realtime_priority: int | None = Field(None, ge=0, le=99, description="SCHED_FIFO priority of the cell and "
                                                                         "writer threads; 0: normal priority; "
                                                                         "default (unset): the binary's, 10")
    affinity: AffinityConfig = Field(default_factory=AffinityConfig)
    tun_offload: bool = Field(True, description="TUN segmentation offload: TCP super-packets in (split into "
                                                "segments at once), merged writes out")
    cpu_latency_qos: bool = Field(True, description="hold a 0 µs CPU wake-up latency request while running")
    max_packets: int = Field(65_536, ge=64, le=1 << 24, description="packet buffers in flight at most")
    mtu_bytes: int = Field(1500, ge=576, le=9000)
    delays: Delays = Field(default_factory=Delays)
    core: CoreConfig
    ues: list[UeConfig] = Field(min_length=1, max_length=MAX_UES)
    diag: DiagConfig = Field(default_factory=DiagConfig)
    cell: CellConfig = Field(default_factory=CellConfig)
    events: list[dict[str, Any]] = Field(default_factory=list,
                                         description="scripted events (clawbed.emulator.events): tables with kind "
                                                     "(drop, outage, capacity, burst) and parameters; at_ms counts "
                                                     "from time zero and from each seek")

    @field_validator("background_trace")
    @classmethod
    def _background_exists(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"{path} is not a file")
        return path.resolve() if path is not None else None

    @model_validator(mode="after")
    def _consistent(self) -> EmulatorConfig:
        # The checks the binary makes across fields, raised with the field's name so the
        # error reads the same as the binary's.
        needs = {Mode.CELL: ("trace", "a PHY trace per UE"), Mode.MAHIMAHI: ("mahimahi_trace", "a Mahimahi trace per UE"),
                 Mode.RATE: ("rate", "a rate per UE")}[self.mode]
        if self.background_trace is not None and self.mode != Mode.CELL:
            raise _FieldError("background_trace", "only mode cell has other users")
        addresses: dict[ipaddress.IPv4Address, int] = {}
        for i, ue in enumerate(self.ues):
            if getattr(ue, needs[0]) is None:
                raise _FieldError(f"ues[{i}].{needs[0]}", f"mode {self.mode.value} needs {needs[1]}")
            if ue.address is not None:
                if ue.address == self.core.address:
                    raise _FieldError(f"ues[{i}].address", f"{ue.address} is also the core's")
                if ue.address in addresses:
                    raise _FieldError(f"ues[{i}].address", f"{ue.address} is also UE {addresses[ue.address]}'s")
                addresses[ue.address] = i
        try:
            self.__dict__["events"] = check_events(self.events, len(self.ues))
        except EventError as e:
            raise _FieldError(e.key, e.problem) from None
        for i, event in enumerate(self.events):
            if event["kind"] == "burst" and self.mode != Mode.CELL:
                raise _FieldError(f"events[{i}].kind", "a burst of other users needs mode cell (an open-loop link "
                                                       "has no cell to share)")
        return self

    @classmethod
    def build(cls, **fields: Any) -> EmulatorConfig:
        """Validate ``fields``; a mistake raises :class:`ConfigError` naming the field."""
        try:
            return cls(**fields)
        except ValidationError as e:
            raise ConfigError(describe(e)) from None

    @classmethod
    def for_topology(
        cls,
        topo: CellTopology,
        *,
        output_dir: Path | str,
        ue: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        **fields: Any,
    ) -> EmulatorConfig:
        """A config whose core and UEs are ``topo``'s namespaces, TUNs, addresses and routes.

        ``ue`` gives the other UE keys (``trace``, ``rate``, ``cell``, ...): one dict for
        every UE, or one dict per UE. ``fields`` are the top-level keys (``mode``, ``seed``,
        ``delays``, ``cell``, ...).
        """
        per_ue = [dict(ue or {})] * len(topo.ues) if ue is None or isinstance(ue, dict) else [dict(u) for u in ue]
        if len(per_ue) != len(topo.ues):
            raise ConfigError(f"ues: {len(per_ue)} UE settings given for a topology of {len(topo.ues)} UEs")
        ues = [
            {**settings, "netns": node.name, "tun": node.tun, "address": node.address, "routes": node.routes}
            for node, settings in zip(topo.ues, per_ue)
        ]
        core = {"netns": topo.core.name, "tun": topo.core.tun, "address": topo.core.address, "routes": []}
        return cls.build(output_dir=Path(output_dir), mtu_bytes=topo.mtu_bytes, core=core, ues=ues, **fields)

    def to_json(self) -> dict[str, Any]:
        """The config as the binary reads it (absolute paths, unset optional keys left out)."""
        data = self.model_dump(mode="json", exclude_none=True)
        data["output_dir"] = str(self.output_dir.resolve())
        return data

    def write(self, path: Path | str) -> Path:
        """Write the JSON config file (the binary reads ``.json`` as JSON); return its path."""
        path = Path(path)
        if path.suffix != ".json":
            raise ValueError(f"{path}: the config file must end in .json (the binary reads other names as TOML)")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        return path


class _FieldError(ValueError):
    """A cross-field check's failure, carrying the field it is about."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _dotted(loc: tuple[int | str, ...]) -> str:
    """pydantic's location ``('ues', 1, 'rate')`` in the binary's notation ``ues[1].rate``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe(error: ValidationError) -> str:
    """Every problem of a ValidationError, each as ``config field `ues[1].rate`: <problem>``."""
    lines = []
    for e in error.errors():
        cause = e.get("ctx", {}).get("error")
        if isinstance(cause, _FieldError):
            lines.append(f"config field `{cause.field}`: {cause.problem}")
            continue
        field = _dotted(tuple(e["loc"]))
        message = str(cause) if isinstance(cause, ValueError) else e["msg"]
        if e["type"] == "extra_forbidden":
            message = "unknown key (a typo?)"
        lines.append(f"config field `{field}`: {message}")
    return "; ".join(lines)
