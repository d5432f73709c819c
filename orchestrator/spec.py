"""Experiment specs: a YAML matrix over traces × pages × conditions × seeds, schemes and
repetitions, validated with errors that name the file and the key path, and expanded into
scenarios with stable ids.

A spec (every key but ``suite`` and ``matrix`` is optional)::

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

One scenario is (trace, page, condition, seed): one replay, whose schemes are loaded in turn
(A B A B …) ``repetitions`` times each. Its id hashes its settings only — not the schemes nor
the repetitions — so adding a scheme or repetitions to a suite keeps the ids, and the loads
already measured count. Its *label* (``trace/page/condition/s<seed>``) is what a regression
check matches a baseline by, so a baseline survives a change of a condition's value.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from clawbed.claw.schemes import SCHEMES
from clawbed.emulator.config import Scheduler, parse_rate_bps
from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT, state_dir
from clawbed.replay import pages
from clawbed.replay.cli import parse_size_bytes
from clawbed.replay.run import HTTP_VERSIONS, LOADERS
from clawbed.traces.synth import PRESETS

SAMPLE_TRACES = REPO_ROOT / "traces" / "samples"
SYNTH_PREFIX = "synth:"
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
    #: The cross flows' congestion control (a kernel CC: cubic, reno or bbr).
    scheme: Literal["cubic", "reno", "bbr"] = "cubic"
    object_bytes: int = Field(200_000, gt=0)
    off_ms: float = Field(500.0, gt=0)


class OtherUe(_Strict):
    """Another UE of the cell with traffic of its own (a page load loop or a bulk download)."""

    kind: Literal["page", "bulk"]
    scheme: Annotated[str, AfterValidator(lambda v: _check_scheme(v))] = "cubic"
    page: Annotated[str, AfterValidator(lambda v: _check_page(v))] = "set-01"


class Condition(_Strict):
    """Network conditions of a scenario; None keeps the replay's default."""

    name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
    http: Literal["2", "1.1"] = "2"
    core_rtt_ms: float | None = Field(None, gt=0, le=10_000)
    #: Base-station queue per UE: a size such as ``3MiB`` or a byte count.
    bs_buffer: str | int | None = None
    #: Wireline bottleneck between the core and the server, e.g. ``20mbit``.
    wireline_rate: str | None = None
    scheduler: Scheduler = Scheduler.PROPORTIONAL_FAIR
    cross_traffic: list[CrossTraffic] = []
    other_ues: list[OtherUe] = Field(default_factory=list, max_length=8)

    @field_validator("http", mode="before")
    @classmethod
    def _http_as_text(cls, v: Any) -> Any:
        # YAML reads `http: 2` as an int and `http: 1.1` as a float.
        return str(v) if isinstance(v, (int, float)) else v

    @field_validator("bs_buffer")
    @classmethod
    def _size(cls, v: str | int | None) -> str | int | None:
        if v is not None:
            try:
                bytes_ = v if isinstance(v, int) else parse_size_bytes(v)
            except InputError:
                raise ValueError(f"{v!r} is not a size like 65536, 512KiB or 3MiB") from None
            if not 1 <= bytes_ <= 1 << 30:
                raise ValueError(f"{v!r} must be 1 byte .. 1 GiB")
        return v

    @field_validator("wireline_rate")
    @classmethod
    def _rate(cls, v: str | None) -> str | None:
        if v is not None:
            parse_rate_bps(v)
        return v

    @model_validator(mode="after")
    def _cross_needs_wireline(self) -> "Condition":
        if self.cross_traffic and self.wireline_rate is None:
            raise ValueError("cross_traffic shares the wireline bottleneck: set wireline_rate too")
        return self

    @property
    def bs_buffer_bytes(self) -> int | None:
        if self.bs_buffer is None or isinstance(self.bs_buffer, int):
            return self.bs_buffer
        return parse_size_bytes(self.bs_buffer)


def _check_page(name: str) -> str:
    if name not in pages.NAMED_PAGES:
        raise ValueError(f"unknown page {name!r}; one of {', '.join(pages.NAMED_PAGES)}")
    return name


def _check_trace(name: str) -> str:
    if name.startswith(SYNTH_PREFIX) and name[len(SYNTH_PREFIX):] not in PRESETS:
        raise ValueError(f"{name!r}: unknown preset; one of {', '.join(SYNTH_PREFIX + p for p in PRESETS)}")
    return name


def _check_scheme(name: str) -> str:
    if name not in SCHEMES:
        raise ValueError(f"unknown scheme {name!r}; one of {', '.join(sorted(SCHEMES))}")
    return name


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
    def _unique_condition_names(self) -> "Matrix":
        names = [c.name or f"c{i}" for i, c in enumerate(self.conditions)]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"condition names must be unique; repeated: {', '.join(sorted(dup))}")
        return self


class PaperNumber(_Strict):
    """A number from the paper a scenario's comparison is set beside (``clawbed suite report``)."""

    figure: str
    #: Which scenarios it is about: a substring of their label.
    match: str
    #: ``plt_s``: the mean PLT of ``scheme``; ``reduction_pct``: ``scheme``'s mean-PLT
    #: reduction against ``versus``, %.
    metric: Literal["plt_s", "reduction_pct"]
    scheme: str
    versus: str | None = None
    value: float
    note: str = ""


class Spec(_Strict):
    suite: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    description: str = ""
    loader: Literal["browser", "h2"] = "browser"
    repetitions: int = Field(3, ge=1, le=1000)
    seeds: Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1), AfterValidator(_unique)] = [1]
    synth_seconds: int = Field(120, ge=1, le=3600)
    load_timeout_s: float = Field(60.0, gt=0)
    matrix: Matrix
    paper: list[PaperNumber] = []


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


def load_spec(path: Path) -> "LoadedSpec":
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
    spec = parse_spec(data, path.name)
    loaded = LoadedSpec(spec, path.resolve())
    for i, trace in enumerate(spec.matrix.traces):
        if not trace.startswith(SYNTH_PREFIX) and loaded.trace_path(trace) is None:
            raise SpecError(f"{path.name}: matrix.traces[{i}]: {trace!r} is neither a sample trace "
                            f"({', '.join(p.stem for p in sorted(SAMPLE_TRACES.glob('*.cbt')))}), nor synth:<preset>, "
                            f"nor a file")
    return loaded


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

    def settings(self) -> dict[str, Any]:
        """What the id hashes: everything that changes what a load measures."""
        return scenario_settings(self.trace, self.page, self.condition, self.seed, self.loader,
                                 self.synth_seconds if self.trace.startswith(SYNTH_PREFIX) else None,
                                 self.load_timeout_s)


def scenario_settings(trace: str, page: str, condition: Condition, seed: int, loader: str,
                      synth_seconds: int | None, load_timeout_s: float) -> dict[str, Any]:
    cond = condition.model_dump(mode="json", exclude={"name"})
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
        """Where a trace file of the matrix lives (a sample's name or a path relative to the
        spec); None: nowhere."""
        sample = SAMPLE_TRACES / f"{trace}.cbt"
        if "/" not in trace and sample.is_file():
            return sample
        candidate = (self.path.parent / trace).resolve()
        return candidate if candidate.is_file() else None

    def scenarios(self) -> list[Scenario]:
        """Every scenario, in the order trace, page, condition, seed (the run order)."""
        s = self.spec
        out: list[Scenario] = []
        for trace in s.matrix.traces:
            for page in s.matrix.pages:
                for ci, cond in enumerate(s.matrix.conditions):
                    cname = cond.name or f"c{ci}"
                    for seed in s.seeds:
                        synth = trace.startswith(SYNTH_PREFIX)
                        settings = scenario_settings(trace, page, cond, seed, s.loader,
                                                     s.synth_seconds if synth else None, s.load_timeout_s)
                        path = (synth_path(trace[len(SYNTH_PREFIX):], seed, s.synth_seconds) if synth
                                else self.trace_path(trace))
                        assert path is not None  # load_spec checked every trace
                        out.append(Scenario(
                            id=scenario_id(settings), label=f"{trace}/{page}/{cname}/s{seed}", suite=s.suite,
                            trace=trace, page=page, condition=cond, condition_name=cname, seed=seed,
                            schemes=tuple(s.matrix.schemes), repetitions=s.repetitions, loader=s.loader,
                            synth_seconds=s.synth_seconds, load_timeout_s=s.load_timeout_s, trace_path=path))
        return out


def synth_path(preset: str, seed: int, seconds: int) -> Path:
    """The cache file of a generated trace (same preset, seed and length → same trace)."""
    return state_dir() / "synth-traces" / f"{preset}-s{seed}-{seconds}s.cbt"


def materialize_trace(scenario: Scenario) -> Path:
    """The scenario's trace file, generating a ``synth:<preset>`` trace on first use."""
    path = scenario.trace_path
    if scenario.trace.startswith(SYNTH_PREFIX) and not path.is_file():
        from clawbed.traces.io import write_trace
        from clawbed.traces.synth import synthesize

        trace = synthesize(scenario.trace[len(SYNTH_PREFIX):], scenario.synth_seconds * 1000, scenario.seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_trace(trace, path)  # atomic: a killed sweep never leaves half a trace in the cache
    return path
