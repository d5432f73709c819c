"""Both ends' TCP stacks: the UE's explicit TCP settings, and stack eras (docs/tcp-stacks.md).

This machine runs one 6.x kernel for the server and the UE. A run makes that kernel behave
as another kernel's TCP did with the knobs this one still has:

- per-namespace sysctls (``net.ipv4.tcp_*``);
- route options (``ip route change … initcwnd N initrwnd N``) on the namespace's routes;
- interface offloads (``ethtool -K DEV gro off``) on the namespace's device towards the cell;
- parameters of the congestion-control code (``/sys/module/tcp_cubic/parameters/*``). These
  are **global to the kernel**, not per namespace: every namespace's Cubic (other runs' too)
  sees them while a run holds them. A run writes one only when it differs, records the value
  it found, and puts it back at the end unless someone else changed it meanwhile.

An era (:class:`StackEra`) is one registration in :data:`ERAS`: the values of every knob it
sets, each with the kernel version that changed that knob's default (:class:`Knob.since`).
Every era, ``current`` included, sets the same sysctl keys and module parameters, so a run
never keeps a value some earlier run or the host left. What no knob can bring back (code
paths without a switch) is listed per era in :attr:`StackEra.cannot` and explained in
docs/tcp-stacks.md.

The UE's own defaults (:data:`UE_SYSCTLS`) are set explicitly at every run: a new namespace
takes most TCP sysctls from the kernel's compiled-in defaults, but its congestion control from
the host's (this machine's is bbr), so it is set to cubic, Android's default.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawbed.errors import InputError
from clawbed.netns import Namespace, ResourceError

#: The sysctls a run may set in a namespace: the network stack's only.
SYSCTL_KEY = re.compile(r"net\.(ipv4|core)\.[a-z0-9_]+")

#: Offload settings (short name → ethtool's feature name as ``ethtool -k`` prints it).
OFFLOAD_FEATURES: dict[str, str] = {
    "gro": "generic-receive-offload",
    "gso": "generic-segmentation-offload",
    "tso": "tcp-segmentation-offload",
    "lro": "large-receive-offload",
}
_ON = ("on", "true", "1", "yes")
_OFF = ("off", "false", "0", "no")

#: Where the congestion-control modules' parameters are (global to the kernel).
MODULE_PARAMS_DIR = Path("/sys/module")


def check_sysctls(values: Mapping[str, Any]) -> None:
    """A ValueError naming the first entry that is not a ``net.ipv4.*`` / ``net.core.*`` key
    with a value."""
    for key, value in values.items():
        if not SYSCTL_KEY.fullmatch(str(key)) or not str(value).strip():
            raise ValueError(f"{key}={value}: a net.ipv4.* or net.core.* key and a value expected")


def offload_state(name: str, value: Any) -> str:
    """``on`` or ``off`` for one offload setting's value (``off``, False, ``0`` …); a
    ValueError names the entry."""
    if name not in OFFLOAD_FEATURES:
        raise ValueError(f"{name}={value}: not an offload; one of {', '.join(OFFLOAD_FEATURES)}")
    text = str(value).strip().lower()
    if text in _ON:
        return "on"
    if text in _OFF:
        return "off"
    raise ValueError(f"{name}={value}: on or off expected")


def check_offloads(values: Mapping[str, Any]) -> dict[str, str]:
    """``{gro: off, …}`` in canonical form (``on``/``off``); a ValueError names the entry."""
    return {str(k): offload_state(str(k), v) for k, v in values.items()}


# --- eras -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Knob:
    """One value an era sets."""

    value: str
    #: The kernel version (and change) that made today's default differ, or since when this
    #: value has held: the citation for the value (docs/tcp-stacks.md has the list).
    since: str


@dataclass(frozen=True)
class StackEra:
    """A kernel's TCP as this kernel can be made to behave: the knobs, each cited."""

    name: str
    #: The kernel it stands for, e.g. ``Linux 4.4 (2016)``.
    kernel: str
    #: Whose stack it was (which paper's servers or phones), one line.
    description: str
    #: ``net.ipv4.*`` sysctls set in the namespace.
    sysctls: Mapping[str, Knob]
    #: ``ip route`` options set on every route of the namespace (``initcwnd``, ``initrwnd``), segments.
    route: Mapping[str, Knob]
    #: ``tcp_cubic`` module parameters, global to the kernel (:data:`MODULE_PARAMS_DIR`).
    cubic: Mapping[str, Knob]
    #: Offloads on the namespace's device towards the cell (short names of :data:`OFFLOAD_FEATURES`).
    offloads: Mapping[str, Knob] = field(default_factory=dict)
    #: What no knob brings back (each explained in docs/tcp-stacks.md).
    cannot: tuple[str, ...] = ()

    def sysctl_values(self) -> dict[str, str]:
        return {k: v.value for k, v in self.sysctls.items()}

    def describe(self) -> dict[str, Any]:
        """For the manifest: every knob with its value and citation."""
        def table(knobs: Mapping[str, Knob]) -> dict[str, dict[str, str]]:
            return {k: {"value": v.value, "since": v.since} for k, v in knobs.items()}
        return {"name": self.name, "kernel": self.kernel, "description": self.description,
                "sysctls": table(self.sysctls), "route": table(self.route), "cubic": table(self.cubic),
                "offloads": table(self.offloads), "cannot": list(self.cannot)}


#: name → era; ``current`` is today's kernel as it is.
ERAS: dict[str, StackEra] = {}


def register(era: StackEra) -> StackEra:
    if era.name in ERAS:
        raise ValueError(f"stack era {era.name!r} is registered twice")
    ERAS[era.name] = era
    return era


def get_era(name: str, flag: str = "--server-stack") -> StackEra:
    """The era called ``name``; an InputError names ``flag`` and the eras there are."""
    try:
        return ERAS[name]
    except (KeyError, TypeError):
        raise InputError(f"{flag} {name!r}: one of {', '.join(ERAS)} (docs/tcp-stacks.md)") from None


def check_era(value: Any) -> str:
    """A settings check: the name of a registered era (ValueError otherwise)."""
    if not isinstance(value, str) or value not in ERAS:
        raise ValueError(f"{value!r}: one of {', '.join(ERAS)} (docs/tcp-stacks.md)")
    return value


def _k(value: str | int, since: str) -> Knob:
    return Knob(str(value), since)


# Today's kernel, stated: the values a new namespace of this 6.x kernel gets.
_CUBIC_DEFAULTS = {
    "hystart": _k(1, "HyStart in Cubic since 2.6.29, on by default"),
    "hystart_detect": _k(3, "ACK train + delay detection (3) since 2.6.29"),
    "hystart_low_window": _k(16, "16 segments since 2.6.29"),
    "hystart_ack_delta_us": _k(2000, "2 ms; a parameter in µs since 5.7 (hystart_ack_delta in ms before)"),
    "beta": _k(717, "717/1024 since 2.6.26 (Cubic's multiplicative decrease 0.7)"),
    "fast_convergence": _k(1, "on since Cubic came (2.6.13)"),
    "tcp_friendliness": _k(1, "on since Cubic came (2.6.13)"),
    "initial_ssthresh": _k(0, "0 (no initial ssthresh) since 2.6.13"),
}

CURRENT = register(StackEra(
    "current", "this machine's kernel (6.x)", "today's Linux TCP, as the testbed's kernel ships it",
    sysctls={
        "net.ipv4.tcp_recovery": _k(1, "RACK on (4.4); since 4.18 it replaces the RFC 6675 dupthresh "
                                       "detection (b38a51fec1c1)"),
        "net.ipv4.tcp_early_retrans": _k(3, "TLP on (3.10, 6ba8a3b19e76); early retransmit removed in 4.11 "
                                            "(bec41a11dd3d)"),
        "net.ipv4.tcp_frto": _k(2, "F-RTO on; RFC 5682 implementation since 3.10"),
        "net.ipv4.tcp_comp_sack_nr": _k(44, "SACK compression (4.18; this sysctl 9c21d2fc41c0, default 44)"),
        "net.ipv4.tcp_comp_sack_delay_ns": _k(1_000_000, "1 ms cap of the SACK compression timer (4.18)"),
        "net.ipv4.tcp_autocorking": _k(1, "auto corking (3.14)"),
        "net.ipv4.tcp_tso_rtt_log": _k(9, "TSO sizes grow with small min_rtt (5.18, 65466904b015)"),
        "net.ipv4.tcp_limit_output_bytes": _k(4 << 20, "TSQ limit 4 MiB (6.16, commit 9ea3bfa61b09)"),
        "net.ipv4.tcp_pingpong_thresh": _k(1, "delayed-ACK ping-pong after 1 exchange (3 from 2019, "
                                               "4a41f453bedf, until the 2022 revert; sysctl since 6.7)"),
    },
    route={"initcwnd": _k(10, "IW10 since 2.6.39")},
    cubic=_CUBIC_DEFAULTS,
    cannot=(),
))

#: What the 3.x/4.x eras have in common and no knob of this kernel brings back.
_CANNOT_OLD = (
    "tcp_adv_win_scale: gone since 6.6 (dfa2f0483360: the window is the buffer times a measured scaling_ratio)",
    "HyStart's 5.7 rework (µs clocks, the ACK-train threshold for short RTTs, pacing awareness): code, no switch",
    "the receive side's autotuning changes (4.19-6.x: rcvq_space, receive-queue awareness): code, no switch",
    "FACK loss detection: retired in 4.15 (tcp_fack is a no-op since)",
)

LINUX_4_4 = register(StackEra(
    "linux-4.4", "Linux 4.4 (2016)",
    "the CLAW paper's server: a 2016 Linux (4.4, e.g. Ubuntu 16.04's kernel)",
    sysctls={
        "net.ipv4.tcp_recovery": _k(1, "RACK added in 4.4 with this default; in 4.4 it only detects lost "
                                       "retransmissions (every loss since 4.11, in place of RFC 6675 "
                                       "since 4.18): the same value, a wider meaning today"),
        "net.ipv4.tcp_early_retrans": _k(3, "TLP (3.10); 4.4's 3 also meant delayed early retransmit, "
                                            "removed in 4.11"),
        "net.ipv4.tcp_frto": _k(2, "RFC 5682 F-RTO since 3.10"),
        "net.ipv4.tcp_comp_sack_nr": _k(0, "no SACK compression before 4.18 (0 disables it)"),
        "net.ipv4.tcp_comp_sack_delay_ns": _k(1_000_000, "unused with tcp_comp_sack_nr 0"),
        "net.ipv4.tcp_autocorking": _k(1, "auto corking since 3.14"),
        "net.ipv4.tcp_tso_rtt_log": _k(0, "0 = TSO sizes from the pacing rate only, as before 5.18"),
        "net.ipv4.tcp_limit_output_bytes": _k(262144, "TSQ's 4.x limit, 256 KiB (131072 when TSQ came "
                                                      "in 3.6; raised to 1 MiB in 5.x, 4 MiB in 6.16)"),
        "net.ipv4.tcp_pingpong_thresh": _k(1, "1, as every kernel before 5.1"),
    },
    route={"initcwnd": _k(10, "IW10 since 2.6.39"),
           "initrwnd": _k(20, "the SYN's receive window of ~20 MSS (29200 B) until 4.20 raised it to "
                              "~64 KB (commit a337531b942b)")},
    cubic=_CUBIC_DEFAULTS,
    cannot=_CANNOT_OLD + (
        "early retransmit (RFC 5827, 3.5-4.10): removed in 4.11; RACK (tcp_recovery 1) covers its cases",
        "RACK limited to lost retransmissions (4.4's scope): today's RACK detects every loss",
    ),
))

ANDROID_3_10 = register(StackEra(
    "android-3.10", "Android's Linux 3.10 (2015)",
    "the CLAW paper's phones: a 2015 Android kernel (3.10, Android 5/6)",
    sysctls={
        "net.ipv4.tcp_recovery": _k(0, "no RACK before 4.4 (0: RFC 6675 dupthresh detection)"),
        "net.ipv4.tcp_early_retrans": _k(3, "TLP added in 3.10 with this default"),
        "net.ipv4.tcp_frto": _k(2, "RFC 5682 F-RTO since 3.10"),
        "net.ipv4.tcp_comp_sack_nr": _k(0, "no SACK compression before 4.18: one SACK per out-of-order "
                                           "segment"),
        "net.ipv4.tcp_comp_sack_delay_ns": _k(1_000_000, "unused with tcp_comp_sack_nr 0"),
        "net.ipv4.tcp_autocorking": _k(0, "no auto corking before 3.14"),
        "net.ipv4.tcp_tso_rtt_log": _k(0, "TSO sizes from the pacing rate only, as before 5.18"),
        "net.ipv4.tcp_limit_output_bytes": _k(131072, "TSQ's limit when it came in 3.6"),
        "net.ipv4.tcp_pingpong_thresh": _k(1, "1, as every kernel before 5.1"),
    },
    route={"initcwnd": _k(10, "IW10 since 2.6.39"),
           "initrwnd": _k(60, "Android's tcp_default_init_rwnd (an Android kernel sysctl, 2014), set to "
                              "60 segments by the Android framework")},
    cubic=_CUBIC_DEFAULTS,
    cannot=_CANNOT_OLD + (
        "the phone's own network driver (its GRO, its interrupt batching): not in the kernel's TCP; the "
        "UE's GRO is a setting of its own (ue_offloads gro)",
    ),
))

LINUX_3_0 = register(StackEra(
    "linux-3.0", "Linux 3.0 (2011-2013 phones)",
    "the 2012-2013 studies' phones (Android 4.0 on Linux 3.0, LTE13 §3.2; BB12's 2.6/3.0 kernels)",
    sysctls={
        "net.ipv4.tcp_recovery": _k(0, "no RACK before 4.4"),
        "net.ipv4.tcp_early_retrans": _k(0, "neither early retransmit (3.5) nor TLP (3.10): a tail loss "
                                            "waits for the RTO"),
        "net.ipv4.tcp_frto": _k(2, "F-RTO (SACK-enhanced, 2) was the default; its code was rewritten in 3.10"),
        "net.ipv4.tcp_comp_sack_nr": _k(0, "no SACK compression before 4.18"),
        "net.ipv4.tcp_comp_sack_delay_ns": _k(1_000_000, "unused with tcp_comp_sack_nr 0"),
        "net.ipv4.tcp_autocorking": _k(0, "no auto corking before 3.14"),
        "net.ipv4.tcp_tso_rtt_log": _k(0, "TSO sizes from the pacing rate only, as before 5.18"),
        "net.ipv4.tcp_limit_output_bytes": _k(1 << 30, "no TSQ before 3.6: a limit no flow reaches"),
        "net.ipv4.tcp_pingpong_thresh": _k(1, "1, as every kernel before 5.1"),
    },
    route={"initcwnd": _k(10, "IW10 since 2.6.39"),
           "initrwnd": _k(20, "the SYN's ~20 MSS receive window of 2.6.39-4.19")},
    cubic=_CUBIC_DEFAULTS,
    cannot=_CANNOT_OLD + (
        "the pre-3.10 F-RTO code and undo heuristics: rewritten in 3.10, no switch",
        "TSO autosizing (3.12) and TSQ (3.6) as such: approximated by limits, not removed",
    ),
))


#: The UE namespace's TCP sysctls without a setting, set at every run (the era's and the user's
#: go over them). Besides the era's keys (``current``'s values): the congestion control, which a
#: new namespace would otherwise take from the host.
UE_SYSCTLS: dict[str, str] = {
    "net.ipv4.tcp_congestion_control": "cubic",
    "net.ipv4.tcp_sack": "1",
    "net.ipv4.tcp_timestamps": "1",
    "net.ipv4.tcp_window_scaling": "1",
    "net.ipv4.tcp_moderate_rcvbuf": "1",
    "net.ipv4.tcp_slow_start_after_idle": "1",
}


def ue_sysctls_for(era: StackEra, overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the UE namespace gets: :data:`UE_SYSCTLS`, then the era's, then the user's."""
    return {**UE_SYSCTLS, **era.sysctl_values(), **(overrides or {})}


# --- applying -------------------------------------------------------------------------------


def read_sysctls(ns: Namespace, keys: list[str]) -> dict[str, str]:
    """The values of ``keys`` in ``ns`` (whitespace-normalised), read by one process."""
    if not keys:
        return {}
    script = "; ".join(f"echo \"$(cat {shlex.quote(_sysctl_path(k))})\"" for k in keys)
    lines = ns.run(["sh", "-c", script]).stdout.split("\n")
    values = {k: " ".join(line.split()) for k, line in zip(keys, lines)}
    missing = [k for k, v in values.items() if not v]
    if missing:
        raise ResourceError(f"in namespace {ns.name}: no sysctl {', '.join(missing)} in this kernel")
    return values


def write_sysctls(ns: Namespace, values: Mapping[str, str]) -> None:
    """Set ``values`` in ``ns`` by one process; a failure names the sysctl."""
    if not values:
        return
    script = "; ".join(f"echo {shlex.quote(str(v))} > {shlex.quote(_sysctl_path(k))} || "
                       f"{{ echo {shlex.quote(k)} >&2; exit 1; }}" for k, v in values.items())
    proc = ns.run(["sh", "-c", script], check=False)
    if proc.returncode != 0:
        raise ResourceError(f"in namespace {ns.name}: setting sysctl {proc.stderr.strip()} failed")


def _sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


def _route_lines(ns: Namespace) -> list[str]:
    """The namespace's IPv4 routes of the main table that go to a device, as ``ip`` prints them."""
    out = ns.run(["ip", "-4", "-o", "route", "show"]).stdout
    return [line.strip() for line in out.splitlines() if " dev " in f" {line} " and line.strip()]


_ROUTE_OPTION = re.compile(r"\s+(initcwnd|initrwnd|quickack)\s+\S+")


def _offload_states(ns: Namespace, device: str) -> dict[str, tuple[str, bool]]:
    """short name → (``on``/``off``, fixed) of the device's offloads."""
    out = ns.run(["ethtool", "-k", device]).stdout
    by_feature = {}
    for line in out.splitlines():
        name, _, rest = line.strip().partition(":")
        words = rest.split()
        if words:
            by_feature[name] = (words[0], "[fixed]" in rest)
    return {short: by_feature[long] for short, long in OFFLOAD_FEATURES.items() if long in by_feature}


@dataclass
class AppliedStack:
    """What one end's stack setting set, with what it found, to record and to undo."""

    end: str
    era: str
    namespace: str
    device: str | None
    #: key → {"value": set, "previous": found}
    sysctls: dict[str, dict[str, str]] = field(default_factory=dict)
    #: {"route": the line set, "previous": the line found}
    routes: list[dict[str, str]] = field(default_factory=list)
    offloads: dict[str, dict[str, str]] = field(default_factory=dict)
    #: module/parameter → {"value", "previous", "written": "yes"/"no"}; global to the kernel.
    module_params: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The server's era sysctls (and the user's), set at each load with the scheme's common ones.
    per_load_sysctls: dict[str, str] = field(default_factory=dict)
    _undo: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def describe(self) -> dict[str, Any]:
        return {"end": self.end, "era": self.era, "namespace": self.namespace, "device": self.device,
                "sysctls": self.sysctls, "routes": self.routes, "offloads": self.offloads,
                "module_params": self.module_params, "per_load_sysctls": self.per_load_sysctls,
                "module_params_note": "global to the kernel (every namespace), restored at the end"}

    def summary(self) -> str:
        """One line for the terminal: what was set."""
        parts = [f"{k.rpartition('.')[2]}={v['value']}" for k, v in self.sysctls.items()]
        if self.per_load_sysctls:  # set by the scheme's set-up (a replay's: at each load)
            parts.append("with the scheme's sysctls " + ", ".join(f"{k.rpartition('.')[2]}={v}"
                                                                  for k, v in self.per_load_sysctls.items()))
        parts += [f"route {r['route']}" for r in self.routes]
        parts += [f"{k} {v['value']}" for k, v in self.offloads.items()]
        changed = [f"{k}={v['value']} (was {v['previous']})" for k, v in self.module_params.items()
                   if v["written"] == "yes"]
        if changed:
            parts.append("kernel-wide " + ", ".join(changed))
        return f"{self.end} stack {self.era} in {self.namespace}: " + "; ".join(parts)

    def restore(self) -> None:
        """Undo in reverse order; the namespace's own settings go with it when it is gone, the
        module parameters (global) are always put back (unless someone changed them since)."""
        while self._undo:
            undo = self._undo.pop()
            with contextlib.suppress(ResourceError, OSError):
                undo()


def apply_stack(ns: Namespace, *, end: str, era: StackEra, device: str | None,
                sysctls: Mapping[str, str], offloads: Mapping[str, str] | None = None,
                module_params_dir: Path = MODULE_PARAMS_DIR) -> AppliedStack:
    """Set ``sysctls`` (the caller's full table: defaults, era, user) in ``ns``, the era's route
    options on its routes, the era's and ``offloads`` on ``device``, and the era's Cubic
    parameters (kernel-wide). Returns what was set; :meth:`AppliedStack.restore` undoes it.
    On a failure everything set so far is undone and the error names the knob."""
    applied = AppliedStack(end, era.name, ns.name, device)
    try:
        previous = read_sysctls(ns, list(sysctls))
        write_sysctls(ns, sysctls)
        applied._undo.append(lambda: _restore_sysctls(ns, previous))
        applied.sysctls = {k: {"value": str(v), "previous": previous[k]} for k, v in sysctls.items()}
        if era.route:
            _apply_routes(ns, era, applied)
        wanted_offloads = {**{k: v.value for k, v in era.offloads.items()}, **(offloads or {})}
        if wanted_offloads:
            if device is None:
                raise InputError(f"{end} offloads {wanted_offloads}: this end has no device to set them on")
            _apply_offloads(ns, device, wanted_offloads, applied)
        _apply_module_params(era, applied, module_params_dir)
    except BaseException:
        applied.restore()
        raise
    return applied


def _restore_sysctls(ns: Namespace, previous: Mapping[str, str]) -> None:
    if Path(ns.path).exists():
        write_sysctls(ns, previous)


def _apply_routes(ns: Namespace, era: StackEra, applied: AppliedStack) -> None:
    options = [w for k, v in era.route.items() for w in (k, v.value)]
    for line in _route_lines(ns):
        base = _ROUTE_OPTION.sub("", line)
        argv = ["ip", "route", "change", *shlex.split(base), *options]
        proc = ns.run(argv, check=False)
        if proc.returncode != 0:
            raise ResourceError(f"in namespace {ns.name}: setting route options {' '.join(options)} on "
                                f"{base!r}: {proc.stderr.strip()}")
        applied.routes.append({"route": f"{base} {' '.join(options)}", "previous": line})

        def undo(line: str = line) -> None:
            if Path(ns.path).exists():
                ns.run(["ip", "route", "change", *shlex.split(line)], check=False)
        applied._undo.append(undo)


def _apply_offloads(ns: Namespace, device: str, wanted: Mapping[str, str], applied: AppliedStack) -> None:
    found = _offload_states(ns, device)
    for name, value in wanted.items():
        if name not in found:
            raise ResourceError(f"{device} in {ns.name}: ethtool shows no {OFFLOAD_FEATURES[name]}")
        state, fixed = found[name]
        if state == value:
            applied.offloads[name] = {"value": value, "previous": state}
            continue
        if fixed:
            raise InputError(f"offload {name}={value}: {device} has {name} fixed {state}")
        proc = ns.run(["ethtool", "-K", device, name, value], check=False)
        if proc.returncode != 0:
            raise ResourceError(f"ethtool -K {device} {name} {value} in {ns.name}: {proc.stderr.strip()}")
        applied.offloads[name] = {"value": value, "previous": state}

        def undo(name: str = name, state: str = state) -> None:
            if Path(ns.path).exists():
                ns.run(["ethtool", "-K", device, name, state], check=False)
        applied._undo.append(undo)


def _apply_module_params(era: StackEra, applied: AppliedStack, base: Path) -> None:
    """Write the era's Cubic parameters that differ; each undo checks the value is still ours."""
    for name, knob in era.cubic.items():
        path = base / "tcp_cubic" / "parameters" / name
        key = f"tcp_cubic/{name}"
        try:
            found = path.read_text().strip()
        except OSError as e:
            raise ResourceError(f"reading the kernel-wide parameter {path}: {e.strerror or e}") from e
        if found == knob.value:
            applied.module_params[key] = {"value": knob.value, "previous": found, "written": "no"}
            continue
        try:
            path.write_text(knob.value)
        except OSError as e:
            raise ResourceError(f"setting the kernel-wide parameter {path} to {knob.value}: "
                                f"{e.strerror or e}") from e
        applied.module_params[key] = {"value": knob.value, "previous": found, "written": "yes"}

        def undo(path: Path = path, ours: str = knob.value, found: str = found) -> None:
            if path.read_text().strip() == ours:  # another run's value since then stays
                path.write_text(found)
        applied._undo.append(undo)


def server_overrides(server_stack: str, server_sysctls: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server sysctls a scheme sets over its common ones: the era's, then the user's."""
    return {**get_era(server_stack, "--server-stack").sysctl_values(), **(server_sysctls or {})}


def set_both_ends(server_ns: Namespace, server_device: str | None, ues: Sequence[tuple[Namespace, str]], *,
                  server_stack: str = "current", ue_stack: str = "current",
                  ue_sysctls: Mapping[str, str] | None = None,
                  ue_offloads: Mapping[str, str] | None = None,
                  server_sysctls: Mapping[str, str] | None = None) -> list[AppliedStack]:
    """The server's era (its routes and Cubic's parameters; its sysctls are set with the
    scheme's, :func:`server_overrides`) and each UE's whole stack (defaults, era, the user's
    sysctls and offloads on its TUN). The caller restores each (last first); on a failure what
    was set is undone here."""
    server_era, ue_era = get_era(server_stack, "--server-stack"), get_era(ue_stack, "--ue-stack")
    done: list[AppliedStack] = []
    try:
        server = apply_stack(server_ns, end="server", era=server_era, device=server_device, sysctls={})
        server.per_load_sysctls = server_overrides(server_stack, server_sysctls)
        done.append(server)
        for ns, device in ues:
            done.append(apply_stack(ns, end="ue", era=ue_era, device=device, sysctls=ue_sysctls_for(ue_era, ue_sysctls),
                                    offloads=check_offloads(ue_offloads or {})))
    except BaseException:
        for applied in reversed(done):
            applied.restore()
        raise
    return done
