"""Experiment specs: a YAML matrix over traces × pages × conditions × seeds, schemes and
repetitions, validated with errors that name the file and the key path, and expanded into
scenarios with stable ids.

A spec (every key but ``suite`` and ``matrix`` or ``matrices`` is optional)::

    suite: ci                         # the suite's name (the store's key)
    description: PLT of claw vs cubic on a small page
    loader: h2                        # browser | h2
    repetitions: 3                    # loads per scheme per scenario
    seeds: [1]                        # cell model, page and synth:<preset> trace seeds
    synth_seconds: 60                 # length of the synth:<preset> traces, s
    load_timeout_s: 60
    matrix:
      traces: [busy-cell, "synth:idle-cell", ../my.cbt]   # sample name, synth:<preset>, or a path
      pages: [set-01]
      schemes: [claw, cubic]
      conditions:
        - name: base                  # the condition's label (default c<index>)
          http: "2"                   # "2" | "1.1"
          core_rtt_ms: 50
          bs_buffer: 3MiB
          wireline_rate: 20mbit
          scheduler: proportional-fair
          cross_traffic: [{kind: bulk, flows: 2, scheme: cubic}]
          other_ues: [{kind: page, page: set-01, scheme: cubic}]
          ue_rmem: galaxy-s2          # the UE's tcp_rmem cap: a phone, PHONE:NETWORK or bytes
          drwa: true                  # DRWA at the UE
          rrc: umts                   # the cell's RRC/DRX model: lte (the emulator's default), umts, off,
                                      # or {kind: umts, dch_tail_ms: 3000} (emulator/policies.json)
          stall: {kind: poisson, mean_interval_s: 10, min_ms: 200, max_ms: 3000}   # or off (default)
          idle_before_s: 60           # the replay waits this long, nothing sent, before each load
          keep_connections: true      # one browser for all loads: connections carry over (one scheme)
          server_sysctls: {net.ipv4.tcp_slow_start_after_idle: "1"}   # over the schemes' common ones

Instead of ``matrix``, ``matrices`` lists several named matrices (each with the keys above
and a ``name``): the suite's scenarios are their union, so one spec can hold settings that
are not one product, like the CLAW paper's figures (``suites/paper.yaml``). A scenario that
two of them share is run once, with the schemes of both; a condition name means the same
settings throughout the spec. ``paper:`` lists the paper's numbers that ``clawbed suite
report`` sets beside the testbed's (:class:`PaperNumber`). ``extends: OTHER.yaml`` takes every
key of that spec (beside this one) that this one does not set: a quick copy of a suite with
fewer repetitions stays in step with it.

One scenario is (trace, page, condition, seed): one replay, whose schemes are loaded in turn
(A B A B …) ``repetitions`` times each. Its id hashes its settings only — not the schemes nor
the repetitions — so adding a scheme or repetitions to a suite keeps the ids, and the loads
already measured count. Its *label* (``trace/page/condition/s<seed>``) is what a regression
check matches a baseline by, so a baseline survives a change of a condition's value.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from clawbed.claw.schemes import SCHEMES
from clawbed.emulator.config import DEFAULT_SCHEDULER, parse_rate_bps
from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT, shared_data, state_dir
from clawbed.replay import pages, settings
from clawbed.replay.network.crosstraffic import MAX_OTHER_UES, CrossTrafficSpec, OtherUeSpec
from clawbed.replay.run import HTTP_VERSIONS, LOADERS, MAX_IDLE_BEFORE_S
from clawbed.traces.inputs import as_trace, needs_import
from clawbed.traces.synth import PRESETS

SAMPLE_TRACES = REPO_ROOT / "traces" / "samples"
SYNTH_PREFIX = "synth:"
#: A trace in the third-party data folder (``shared:real-logs/<log>``): tests and the real-cell
#: suites use it; a spec naming one loads only where that folder is.
SHARED_PREFIX = "shared:"
_SEGMENT_TEXT = re.compile(r"best|[0-9.]*:[0-9.]*")
#: The key by which a spec takes another one's keys (``extends: paper.yaml``).
EXTENDS_KEY = "extends"
#: Length of the scenario id (hex digits of a SHA-256): 48 bits, collision-free for any suite.
ID_HEX_DIGITS = 12


class SpecError(InputError):
    """A spec that cannot be used; the message names the file and the key path of each defect."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CrossTraffic(_Strict):
    """Wired cross traffic sharing the wireline bottleneck, from a host of its own behind it."""

    #: ``bulk``: iperf3 flows for the whole load; ``onoff``: web-like transfers of
    #: ``object_bytes`` separated by exponential think times of mean ``off_ms``.
    kind: Literal["bulk", "onoff"]
    flows: int = Field(1, ge=1, le=64)
    #: The cross flows' scheme: any registered one without a part on a UE (a wired host has none).
    scheme: Annotated[str, AfterValidator(lambda v: _check_cross_scheme(v))] = "cubic"
    object_bytes: int = Field(200_000, gt=0)
    off_ms: float = Field(500.0, gt=0)


class OtherUe(_Strict):
    """Another UE of the cell with traffic of its own (a page load loop or a bulk download).
    In a condition's ``other_ues``, ``count: N`` in an entry stands for N such UEs."""

    kind: Literal["page", "bulk"]
    #: The UE's scheme: any registered one (an instance of its own on that UE).
    scheme: Annotated[str, AfterValidator(lambda v: _check_other_ue_scheme(v))] = "cubic"
    page: Annotated[str, AfterValidator(lambda v: _check_named_page(v))] = "set-01"
    #: ``page``: mean think time between the UE's downloads, ms (None: 1 s, a phone reloading).
    off_ms: float | None = Field(None, gt=0, le=3_600_000)


class Condition(_Strict):
    """Network conditions of a scenario; None keeps the replay's default."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
    http: Literal["2", "1.1"] = "2"
    core_rtt_ms: float | None = None
    #: Base-station queue per UE: a size such as ``3MiB`` or a byte count.
    bs_buffer: str | int | None = None
    #: Wireline bottleneck between the core and the server, e.g. ``20mbit``.
    wireline_rate: str | None = None
    #: netem on the wired link to the server, each direction (see ``clawbed replay --help``).
    wired_delay_ms: float = Field(0.0, ge=0, le=10_000)
    wired_jitter_ms: float = Field(0.0, ge=0, le=10_000)
    wired_loss_pct: float = Field(0.0, ge=0, le=100)
    wired_reorder_pct: float = Field(0.0, ge=0, le=100)
    #: The cell's scheduler, queue policy and loss model: a policy name of
    #: emulator/policies.json or a table ``{kind: NAME, <its parameters>}``.
    scheduler: str | dict[str, Any] = DEFAULT_SCHEDULER
    queue: str | dict[str, Any] | None = None
    loss: str | dict[str, Any] | None = None
    #: Air interface delay, ms; the UE's uplink rate (``5mbit``); RSRQ noise σ, dB.
    air_delay_ms: float | None = None
    uplink_rate: str | None = None
    rsrq_noise_db: float | None = None
    cross_traffic: list[CrossTraffic] = []
    other_ues: list[OtherUe] = []
    #: The UE's receive-buffer cap: a phone of BB12's table (``galaxy-s2``), ``PHONE:NETWORK``
    #: or bytes (replay/rmem.py); None: uncapped.
    ue_rmem: str | int | None = None
    #: DRWA at the UE (replay/drwa.py).
    drwa: StrictBool = False
    #: The CLAW client each UE runs (replay's ``claw_client``): fast or reference.
    claw_client: str = "fast"
    #: How the UEs' diag feeds are delivered (replay's ``feed_timing``): ``phone`` or ``ideal``.
    feed_timing: str = "phone"
    #: Background flows on the replay's own UE (replay's ``flows``, replay/flows.py): entries such
    #: as ``{kind: poisson, rate_per_s: 2, bytes: [10000, 100000], rmem: 262144, drwa: true}``.
    flows: list[dict[str, Any]] = []
    #: Scripted events of the emulator (replay's ``events``, emulator/events.py): entries such as
    #: ``{kind: drop, in_flight_bytes: 300000}`` or ``{kind: outage, at_ms: 3000, ms: 500}``.
    events: list[dict[str, Any]] = []
    #: nginx gzip on the fly (replay's ``gzip``); HTTP/1.1 connections per host of the loader
    #: (the browser loader: 6 only).
    gzip: StrictBool = False
    h1_connections_per_host: int = 6
    #: The cell's RRC/DRX model (``cell.rrc``): a policy name of emulator/policies.json (``lte``,
    #: ``umts``, ``off``) or a table ``{kind: NAME, <its parameters>}``; None: the emulator's default.
    rrc: str | dict[str, Any] | None = None
    #: The link-layer stall process (``cell.stall``): ``off``, ``poisson`` or a table with
    #: ``kind`` and its parameters; None: the emulator's default (off).
    stall: str | dict[str, Any] | None = None
    #: Seconds the replay waits before each load, the emulator running and nothing sent, so the
    #: UE's radio demotes as between the SPDY paper's page views (60 s apart).
    idle_before_s: float = Field(0.0, ge=0, le=MAX_IDLE_BEFORE_S)
    #: One browser for all of a scenario's loads, so connections carry over between them
    #: (replay's ``keep_connections``; the browser loader and one scheme only).
    keep_connections: StrictBool = False
    #: Server sysctls over the schemes' common ones (replay's ``server_sysctls``).
    server_sysctls: dict[str, str] = {}
    #: Both ends' TCP stack eras, the UE's sysctls and its TUN's offloads (clawbed/tcpstack.py).
    server_stack: str = "current"
    ue_stack: str = "current"
    ue_sysctls: dict[str, str] = {}
    ue_offloads: dict[str, str] = {}

    @field_validator(*(name for name in settings.SETTINGS), mode="before")
    @classmethod
    def _setting(cls, v: Any, info: ValidationInfo) -> Any:
        """The one check of the settings vocabulary (replay/settings.py); its ValueError names the value."""
        assert info.field_name is not None
        return settings.check(info.field_name, v)

    @field_validator("other_ues", mode="before")
    @classmethod
    def _expand_counts(cls, v: Any) -> Any:
        """Each entry with ``count: N`` as N entries; at most MAX_OTHER_UES in all."""
        if not isinstance(v, list):
            return v
        expanded: list[Any] = []
        for i, entry in enumerate(v):
            if isinstance(entry, dict) and "count" in entry:
                entry = dict(entry)
                count = entry.pop("count")
                if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                    raise ValueError(f"other_ues[{i}].count {count!r}: must be a whole number ≥ 1")
                expanded += [entry] * count
            else:
                expanded.append(entry)
        if len(expanded) > MAX_OTHER_UES:
            raise ValueError(f"{len(expanded)} other UEs (counts included): at most {MAX_OTHER_UES} (the cell "
                             f"holds {MAX_OTHER_UES + 1} UEs with the replay's)")
        return expanded

    @field_validator("http", mode="before")
    @classmethod
    def _http_as_text(cls, v: Any) -> Any:
        # YAML reads `http: 2` as an int and `http: 1.1` as a float.
        return str(v) if isinstance(v, (int, float)) else v

    @field_validator("wireline_rate")
    @classmethod
    def _rate(cls, v: str | None) -> str | None:
        if v is not None:
            parse_rate_bps(v)
        return v

    @model_validator(mode="after")
    def _cross_needs_wireline(self) -> Condition:
        if self.cross_traffic and self.wireline_rate is None:
            raise ValueError("cross_traffic shares the wireline bottleneck: set wireline_rate too")
        # Jitter and reordering vary a delay: the same rule as the replay's (Impairment's).
        if self.wired_jitter_ms and not self.wired_delay_ms:
            raise ValueError("wired_jitter_ms varies a delay: set wired_delay_ms too")
        if self.wired_reorder_pct and not self.wired_delay_ms:
            raise ValueError("wired_reorder_pct: netem reorders by delaying the other packets; set wired_delay_ms too")
        return self

    @property
    def bs_buffer_bytes(self) -> int | None:
        return None if self.bs_buffer is None else settings.size_bytes(self.bs_buffer)

    def settings(self) -> dict[str, Any]:
        """The shared settings (replay/settings.py) of this condition, for a replay's config."""
        return {name: getattr(self, name) for name in settings.SETTINGS}


#: Pages that are folders on disk (a user's files, a Mahimahi recording): a path relative to the spec.
_PATH_PAGES = (pages.DIR_PREFIX, "mahimahi:")


def _check_page(name: str) -> str:
    if name not in pages.NAMED_PAGES and not (name.startswith(_PATH_PAGES) and len(name.split(":", 1)[1]) > 0):
        raise ValueError(f"unknown page {name!r}; one of {', '.join(pages.NAMED_PAGES)}, dir:PATH[@INDEX] or "
                         f"mahimahi:DIR[@URL] (PATH and DIR relative to the spec)")
    return name


def _check_named_page(name: str) -> str:
    if name not in pages.NAMED_PAGES:
        raise ValueError(f"unknown page {name!r}; one of {', '.join(pages.NAMED_PAGES)}")
    return name


def resolve_page(name: str, spec_dir: Path) -> str:
    """A page as the replay takes it: a folder page's path made absolute against the spec's folder."""
    if not name.startswith(_PATH_PAGES):
        return name
    prefix, _, rest = name.partition(":")
    path, at, tail = rest.partition("@")
    return f"{prefix}:{(spec_dir / path).resolve()}{at}{tail}"


def _check_trace(name: str) -> str:
    if name.startswith(SYNTH_PREFIX) and name[len(SYNTH_PREFIX):] not in PRESETS:
        raise ValueError(f"{name!r}: unknown preset; one of {', '.join(SYNTH_PREFIX + p for p in PRESETS)}")
    return name


def _check_scheme(name: str) -> str:
    if name not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; one of {', '.join(sorted(SCHEMES))}")
    return name


def _check_cross_scheme(name: str) -> str:
    _check_scheme(name)
    try:
        CrossTrafficSpec(kind="bulk", scheme=name).check(flag="scheme")
    except InputError as e:
        raise ValueError(str(e).removeprefix("scheme: ")) from None
    return name


def _check_other_ue_scheme(name: str) -> str:
    _check_scheme(name)
    try:
        OtherUeSpec(scheme=name).check(flag="scheme")
    except InputError as e:
        raise ValueError(str(e).removeprefix("scheme: ")) from None
    return name


def _check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as e:
        raise ValueError(f"{pattern!r} is not a regular expression: {e}") from None
    return pattern


def label_matches(pattern: str, label: str) -> bool:
    """Whether a paper number's ``match`` (a regular expression) picks the scenario ``label``."""
    return re.search(pattern, label) is not None


def _unique(v: list[Any]) -> list[Any]:
    dup = sorted({str(x) for x in v if v.count(x) > 1})
    if dup:
        raise ValueError(f"listed twice: {', '.join(dup)}")
    return v


class Matrix(_Strict):
    traces: Annotated[list[Annotated[str, AfterValidator(_check_trace)]], Field(min_length=1),
                      AfterValidator(_unique)]
    pages: Annotated[list[Annotated[str, AfterValidator(_check_page)]], Field(min_length=1), AfterValidator(_unique)]
    schemes: Annotated[list[Annotated[str, AfterValidator(_check_scheme)]], Field(min_length=1),
                       AfterValidator(_unique)]
    conditions: list[Condition] = Field(default_factory=lambda: [Condition()], min_length=1)

    @model_validator(mode="after")
    def _unique_condition_names(self) -> Matrix:
        names = [c.name or f"c{i}" for i, c in enumerate(self.conditions)]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"condition names must be unique; repeated: {', '.join(sorted(dup))}")
        return self


class NamedMatrix(Matrix):
    """One of a spec's ``matrices``: a matrix with a name (a figure, a question)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")


class PaperNumber(_Strict):
    """A number from the paper that ``clawbed suite report`` sets beside the testbed's.

    ``match`` (and ``versus_match``) pick scenarios by a regular expression found in their
    label (``trace/page/condition/s<seed>``; a plain substring works as one). Metrics:
    ``plt_s`` the mean PLT of ``scheme``; ``reduction_pct`` ``scheme``'s mean-PLT reduction
    against ``versus`` (%, pooled over the matched scenarios, or the ``min``/``max`` over them
    with ``across``); ``worst_reduction_pct`` the same of the worst (longest) PLT; ``rank``
    where ``scheme``'s mean PLT ranks among every scheme measured there (1: lowest), for a
    claim without a number ("CLAW achieves the lowest PLT"). A number the testbed cannot measure says why:
    ``not_emulated`` (outside what it models) or ``missing`` (what it lacks to run it).
    """

    figure: str = Field(min_length=1)
    match: Annotated[str, Field(min_length=1), AfterValidator(_check_regex)]
    #: The ``versus`` side's scenarios when they differ from ``match``'s.
    versus_match: Annotated[str, AfterValidator(_check_regex)] | None = None
    metric: Literal["plt_s", "reduction_pct", "worst_reduction_pct", "rank"]
    scheme: Annotated[str, AfterValidator(_check_scheme)]
    versus: Annotated[str, AfterValidator(_check_scheme)] | None = None
    across: Literal["pooled", "min", "max"] = "pooled"
    value: float
    #: Where the number is in the paper (section, figure, the words it paraphrases).
    note: str = Field(min_length=1)
    not_emulated: str | None = None
    missing: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> PaperNumber:
        comparing = self.metric in ("reduction_pct", "worst_reduction_pct")
        if comparing and self.versus is None:
            raise ValueError(f"metric {self.metric} compares two schemes: set versus")
        if not comparing and (self.versus is not None or self.versus_match is not None):
            raise ValueError(f"metric {self.metric} has no versus side: drop versus/versus_match")
        if self.across != "pooled" and self.metric != "reduction_pct":
            raise ValueError("across min/max is for metric reduction_pct")
        if self.not_emulated is not None and self.missing is not None:
            raise ValueError("a number is either not_emulated or missing, not both")
        return self

    @property
    def measurable(self) -> bool:
        return self.not_emulated is None and self.missing is None


class Spec(_Strict):
    suite: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""
    loader: Literal["browser", "h2"] = "browser"
    repetitions: int = Field(3, ge=1, le=1000)
    seeds: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1), AfterValidator(_unique)] = [1]
    synth_seconds: int = Field(120, ge=1, le=3600)
    load_timeout_s: float = Field(60.0, gt=0)
    matrix: Matrix | None = None
    matrices: list[NamedMatrix] | None = Field(None, min_length=1)
    paper: list[PaperNumber] = []
    #: At most this many other UEs in any condition (the first ones, counts included): a
    #: small copy of a suite whose conditions fill the cell (``paper-quick.yaml``'s Fig 19).
    max_other_ues: int | None = Field(None, ge=0, le=MAX_OTHER_UES)

    @model_validator(mode="before")
    @classmethod
    def _cap_other_ues(cls, data: Any) -> Any:
        cap = data.get("max_other_ues") if isinstance(data, dict) else None
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
            return data  # no cap, or a bad one that the field's own check reports

        def capped(condition: Any) -> Any:
            entries = condition.get("other_ues") if isinstance(condition, dict) else None
            if not isinstance(entries, list):
                return condition
            kept, total = [], 0
            for entry in entries:
                n = entry.get("count", 1) if isinstance(entry, dict) else 1
                take = min(n, cap - total) if isinstance(n, int) else n
                if isinstance(take, int) and take <= 0:
                    break
                kept.append({**entry, "count": take} if isinstance(entry, dict) and "count" in entry else entry)
                total += take if isinstance(take, int) else 1
            return {**condition, "other_ues": kept}

        def capped_matrix(matrix: Any) -> Any:
            if not isinstance(matrix, dict) or not isinstance(matrix.get("conditions"), list):
                return matrix
            return {**matrix, "conditions": [capped(c) for c in matrix["conditions"]]}

        data = dict(data)
        if "matrix" in data:
            data["matrix"] = capped_matrix(data["matrix"])
        if isinstance(data.get("matrices"), list):
            data["matrices"] = [capped_matrix(m) for m in data["matrices"]]
        return data

    @model_validator(mode="after")
    def _one_matrix_form(self) -> Spec:
        if (self.matrix is None) == (self.matrices is None):
            raise ValueError("give either matrix or matrices (a list of named matrices)")
        if self.matrices is not None:
            names = [m.name for m in self.matrices]
            dup = sorted({n for n in names if names.count(n) > 1})
            if dup:
                raise ValueError(f"matrices: names must be unique; repeated: {', '.join(dup)}")
            # A condition's name is in the scenario labels that reports and baselines match by.
            seen: dict[str, Condition] = {}
            for m in self.matrices:
                for i, c in enumerate(m.conditions):
                    name = c.name or f"c{i}"
                    if name in seen and seen[name] != c:
                        raise ValueError(f"matrices: condition {name!r} has different settings in two matrices "
                                         f"(matrix {m.name!r}); give them different names")
                    seen[name] = c
        return self

    @model_validator(mode="after")
    def _kept_connections(self) -> Spec:
        # A connection kept from one scheme's load would carry the next scheme's load.
        for m in self.all_matrices():
            for i, c in enumerate(m.conditions):
                if not c.keep_connections:
                    continue
                if self.loader != "browser":
                    raise ValueError(f"condition {c.name or f'c{i}'}: keep_connections needs the browser loader, "
                                     f"not {self.loader}")
                if len(m.schemes) > 1:
                    raise ValueError(f"condition {c.name or f'c{i}'}: keep_connections needs one scheme per "
                                     f"matrix, not {', '.join(m.schemes)} (a connection one scheme opened would "
                                     f"carry the next scheme's load)")
        return self

    @model_validator(mode="after")
    def _browser_connections(self) -> Spec:
        # Chromium's HTTP/1.1 connections per host are fixed: refused at load time, not mid-suite.
        for m in self.all_matrices():
            for i, c in enumerate(m.conditions):
                if self.loader == "browser" and c.h1_connections_per_host != 6:
                    raise ValueError(f"condition {c.name or f'c{i}'}: h1_connections_per_host "
                                     f"{c.h1_connections_per_host}: the browser loader cannot set it (Chromium opens "
                                     f"up to 6 per host, and no switch of it changes that); use loader: h2")
        return self

    def all_matrices(self) -> list[Matrix]:
        """``matrix`` or each of ``matrices``."""
        return [self.matrix] if self.matrix is not None else list(self.matrices or [])

    def matrix_key(self, index: int) -> str:
        """The key path of the ``index``-th of :meth:`all_matrices` (for error messages)."""
        return "matrix" if self.matrix is not None else f"matrices[{index}]"


assert set(LOADERS) == {"browser", "h2"} and set(HTTP_VERSIONS) == {"2", "1.1"}, "spec out of step with replay"


def key_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's error location as a key path: ``matrix.conditions[2].core_rtt_ms``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "literal[", "str", "int")) or "[" in part:
            continue  # a union member's or validator's tag, not a key
        else:
            out += f".{part}" if out else part
    return out or "(top level)"


def _format_errors(source: str, error: ValidationError) -> str:
    lines = []
    for e in error.errors():
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{source}: {key_path(e['loc'])}: {msg}")
    return "\n".join(dict.fromkeys(lines))


def parse_spec(data: Any, source: str = "<spec>") -> Spec:
    """A validated :class:`Spec` from parsed YAML; :class:`SpecError` names ``source`` and each key."""
    if not isinstance(data, dict):
        raise SpecError(f"{source}: (top level): must be a mapping with at least 'suite' and 'matrix'")
    try:
        return Spec.model_validate(data)
    except ValidationError as e:
        raise SpecError(_format_errors(source, e)) from None


def load_spec(path: Path) -> LoadedSpec:
    """Read, validate and locate a spec file (relative trace paths are relative to it)."""
    try:
        text = path.read_text()
    except OSError as e:
        raise SpecError(f"{path}: {e.strerror or e}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise SpecError(f"{path.name}{where}: not valid YAML: {getattr(e, 'problem', None) or e}") from None
    if isinstance(data, dict) and EXTENDS_KEY in data:
        data = _extend(path, data)
    spec = parse_spec(data, path.name)
    loaded = LoadedSpec(spec, path.resolve())
    for mi, matrix in enumerate(spec.all_matrices()):
        for i, trace in enumerate(matrix.traces):
            if trace.startswith(SHARED_PREFIX) and loaded.trace_path(trace) is None:
                raise SpecError(f"{path.name}: {spec.matrix_key(mi)}.traces[{i}]: {trace!r}: not in the third-party "
                                f"data folder (CLAWBED_SHARED, or ../shared/data beside the repository); those "
                                f"recordings are not shipped with clawbed")
            if not trace.startswith(SYNTH_PREFIX) and loaded.trace_path(trace) is None:
                raise SpecError(f"{path.name}: {spec.matrix_key(mi)}.traces[{i}]: {trace!r} is neither a sample trace "
                                f"({', '.join(p.stem for p in sorted(SAMPLE_TRACES.glob('*.cbt')))}), "
                                f"nor synth:<preset>, nor a file")
    for mi, matrix in enumerate(spec.all_matrices()):
        for i, page in enumerate(matrix.pages):
            if page.startswith(_PATH_PAGES):
                try:
                    pages.get_page(resolve_page(page, path.resolve().parent))
                except InputError as e:
                    raise SpecError(f"{path.name}: {spec.matrix_key(mi)}.pages[{i}]: {e}") from None
    _check_paper(loaded, path.name)
    return loaded


def _extend(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """``extends: BASE`` (a spec file beside this one): BASE's keys, each top-level key of
    this file replacing BASE's (a smaller sibling of a suite stays in step with it)."""
    base_path = path.parent / str(data[EXTENDS_KEY])
    try:
        base = yaml.safe_load(base_path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"{path.name}: {EXTENDS_KEY}: cannot read {base_path}: {e}") from None
    if not isinstance(base, dict) or EXTENDS_KEY in base:
        raise SpecError(f"{path.name}: {EXTENDS_KEY}: {base_path.name} must be a spec mapping that extends nothing")
    return {**base, **{k: v for k, v in data.items() if k != EXTENDS_KEY}}


def _check_paper(loaded: LoadedSpec, source: str) -> None:
    """Each measurable paper number matches scenarios of the spec that run its schemes (a typo
    in ``match`` would otherwise show as "not run" only after the sweep)."""
    scenarios = loaded.scenarios()
    for i, p in enumerate(loaded.spec.paper):
        if not p.measurable:
            continue
        sides = [("match", p.match, p.scheme)]
        if p.versus is not None:
            sides.append(("versus_match" if p.versus_match else "match", p.versus_match or p.match, p.versus))
        for key, match, scheme in sides:
            hits = [s for s in scenarios if label_matches(match, s.label)]
            if not hits:
                raise SpecError(f"{source}: paper[{i}].{key}: {match!r} is in no scenario label of the suite "
                                f"(labels are trace/page/condition/s<seed>)")
            if not any(scheme in s.schemes for s in hits):
                raise SpecError(f"{source}: paper[{i}]: no scenario matching {match!r} runs scheme {scheme!r}")


@dataclass(frozen=True)
class Scenario:
    """One replay of a suite: a trace, a page, a condition and a seed; the suite's schemes,
    each loaded ``repetitions`` times."""

    id: str
    label: str
    suite: str
    trace: str
    page: str
    condition: Condition
    condition_name: str
    seed: int
    schemes: tuple[str, ...]
    repetitions: int
    loader: str
    synth_seconds: int
    load_timeout_s: float
    #: The trace file (for ``synth:`` traces: where it is generated, see :func:`materialize_trace`).
    trace_path: Path = field(compare=False)
    #: The page as the replay takes it (a folder page's path absolute; the label keeps the spec's words).
    page_source: str = field(default="", compare=False)

    def settings(self) -> dict[str, Any]:
        """What the id hashes: everything that changes what a load measures."""
        return scenario_settings(self.trace, self.page, self.condition, self.seed, self.loader,
                                 self.synth_seconds if self.trace.startswith(SYNTH_PREFIX) else None,
                                 self.load_timeout_s)


def scenario_settings(trace: str, page: str, condition: Condition, seed: int, loader: str,
                      synth_seconds: int | None, load_timeout_s: float) -> dict[str, Any]:
    cond = condition.model_dump(mode="json", exclude={"name"})
    # Settings added later count only when set: the ids of conditions without them stay.
    unset = {name: s.empty() for name, s in settings.SETTINGS.items() if not s.always_hashed}
    for key, empty in (*unset.items(), ("idle_before_s", 0.0), ("keep_connections", False)):
        if cond.get(key) == empty:
            cond.pop(key, None)
    for other in cond.get("other_ues", []):
        if other.get("off_ms") is None:
            other.pop("off_ms", None)
    return {"trace": trace, "page": page, "condition": cond, "seed": seed, "loader": loader,
            "synth_seconds": synth_seconds, "load_timeout_s": load_timeout_s}


def scenario_id(settings: dict[str, Any]) -> str:
    """A stable id: the SHA-256 of the settings as canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:ID_HEX_DIGITS]


@dataclass(frozen=True)
class LoadedSpec:
    spec: Spec
    path: Path

    @property
    def name(self) -> str:
        return self.spec.suite

    def trace_path(self, trace: str) -> Path | None:
        """Where a trace file of the matrix lives (a sample's name, a path relative to the spec,
        or ``shared:<path>`` in the third-party data folder; any of them with ``@SEGMENT``); None:
        nowhere. A phone log or a Mahimahi trace is the log itself (:func:`materialize_trace`
        imports it)."""
        trace, _segment = split_segment(trace)
        if trace.startswith(SHARED_PREFIX):
            return shared_data(trace[len(SHARED_PREFIX):])
        sample = SAMPLE_TRACES / f"{trace}.cbt"
        if "/" not in trace and sample.is_file():
            return sample
        candidate = (self.path.parent / trace).resolve()
        return candidate if candidate.is_file() else None

    def scenarios(self) -> list[Scenario]:
        """Every scenario, in the order matrix, trace, page, condition, seed (the run order); a
        scenario in several matrices comes once, where it first appears, with all their schemes."""
        s = self.spec
        by_id: dict[str, Scenario] = {}
        for matrix in s.all_matrices():
            for trace in matrix.traces:
                for page in matrix.pages:
                    for ci, cond in enumerate(matrix.conditions):
                        cname = cond.name or f"c{ci}"
                        for seed in s.seeds:
                            sc = self._scenario(trace, page, cond, cname, seed, tuple(matrix.schemes))
                            if sc.id in by_id:
                                known = by_id[sc.id]
                                sc = replace(known, schemes=tuple(dict.fromkeys(known.schemes + sc.schemes)))
                            by_id[sc.id] = sc
        return list(by_id.values())

    def _scenario(self, trace: str, page: str, cond: Condition, cname: str, seed: int,
                  schemes: tuple[str, ...]) -> Scenario:
        s = self.spec
        synth = trace.startswith(SYNTH_PREFIX)
        settings = scenario_settings(trace, page, cond, seed, s.loader, s.synth_seconds if synth else None,
                                     s.load_timeout_s)
        path = synth_path(trace[len(SYNTH_PREFIX):], seed, s.synth_seconds) if synth else self.trace_path(trace)
        assert path is not None  # load_spec checked every trace
        return Scenario(id=scenario_id(settings), label=f"{trace}/{page}/{cname}/s{seed}", suite=s.suite, trace=trace,
                        page=page, condition=cond, condition_name=cname, seed=seed, schemes=schemes,
                        repetitions=s.repetitions, loader=s.loader, synth_seconds=s.synth_seconds,
                        load_timeout_s=s.load_timeout_s, trace_path=path,
                        page_source=resolve_page(page, self.path.parent))


def _imported_segment(source: Path, segment: str | None) -> Path:
    from clawbed.traces.io import read_trace, write_trace
    from clawbed.traces.segments import cut, parse_segment

    trace_path = as_trace(source)
    if segment is None:
        return trace_path
    out = trace_path.with_name(f"{trace_path.stem}@{segment.replace(':', '-')}.cbt")
    if not out.is_file():
        trace = read_trace(trace_path)
        write_trace(cut(trace, *parse_segment(segment, trace)), out)  # atomic, like every cached trace
    return out


def synth_path(preset: str, seed: int, seconds: int) -> Path:
    """The cache file of a generated trace (same preset, seed and length → same trace; the
    preset's fingerprint in the name, so a changed preset is not read from an old file)."""
    from clawbed.traces.synth import preset_fingerprint

    return state_dir() / "synth-traces" / f"{preset}-s{seed}-{seconds}s-{preset_fingerprint(preset)}.cbt"


def split_segment(trace: str) -> tuple[str, str | None]:
    """``LOG@SEGMENT`` → (LOG, SEGMENT): the span of a long log the loads use, ``best`` (the first
    informative one, traces/segments.py) or ``START:END`` in seconds; (trace, None) without one."""
    name, at, segment = trace.rpartition("@")
    if at and _SEGMENT_TEXT.fullmatch(segment):
        return name, segment
    return trace, None


def materialize_trace(scenario: Scenario) -> Path:
    """The scenario's trace file: a ``synth:<preset>`` trace generated, a phone log or Mahimahi
    trace imported (traces/inputs.py), a ``@SEGMENT`` cut, each on first use and cached."""
    _name, segment = split_segment(scenario.trace)
    if not scenario.trace.startswith(SYNTH_PREFIX) and (segment or needs_import(scenario.trace_path)):
        return _imported_segment(scenario.trace_path, segment)
    path = scenario.trace_path
    if scenario.trace.startswith(SYNTH_PREFIX) and not path.is_file():
        from clawbed.traces.io import write_trace
        from clawbed.traces.synth import synthesize

        trace = synthesize(scenario.trace[len(SYNTH_PREFIX):], scenario.synth_seconds * 1000, scenario.seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_trace(trace, path)  # atomic: a killed sweep never leaves half a trace in the cache
    return path
