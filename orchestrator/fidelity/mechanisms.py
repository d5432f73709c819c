"""Whether a cell or endpoint mechanism a row needs is in this build — found out when the row
runs, never assumed.

Each mechanism names the interface the row's experiment uses and how its presence is checked:

- an emulator config key (:class:`EmuKeys`): a minimal config holding the key is validated by
  the Python model (``EmulatorConfig``) and by the binary itself (``clawbed-emu --check``);
  a key either refuses is not in this build, and the refusal is quoted;
- a scheme (:class:`SchemeName`): registered in ``clawbed.claw.schemes.SCHEMES``;
- a replay / UE option (:class:`ReplayOption`): a field of ``ReplayConfig``;
- an analysis tool (:class:`Module`): an importable module with the named function.

The interfaces below are the ones the rows are written against; the mechanisms' authors may
rename a key here in one place.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawbed.errors import ClawbedError


@dataclass(frozen=True)
class Presence:
    """The answer for one mechanism: present or not, what was checked, and why not."""

    name: str
    present: bool
    checked: str
    detail: str = ""

    def reason(self) -> str:
        """``<mechanism> not in this build (checked: …)``, for a not-emulated row."""
        return f"{MECHANISMS[self.name].what} not in this build (checked: {self.checked}{': ' + self.detail if self.detail else ''})"


@dataclass(frozen=True)
class EmuKeys:
    what: str
    #: The config fragment (merged into a minimal valid config) that uses the mechanism.
    fragment: dict[str, Any]

    def check(self, name: str) -> Presence:
        keys = ", ".join(_dotted_keys(self.fragment))
        from clawbed.emulator.config import EmulatorConfig
        from clawbed.emulator.process import BINARY

        with tempfile.TemporaryDirectory(prefix="cb-fid-") as tmp:
            base: dict[str, Any] = {"mode": "rate", "output_dir": str(Path(tmp) / "out"),
                                    "core": {"netns": "cbprobecore"}, "ues": [{"netns": "cbprobeu0", "rate": "10mbit"}]}
            config = _merge(base, self.fragment)
            try:
                EmulatorConfig.build(**config)
            except ClawbedError as e:
                return Presence(name, False, f"the emulator config model refuses {keys}", str(e).split("; ")[0][:200])
            if not BINARY.is_file():
                return Presence(name, False, f"{BINARY} --check", "the binary is not built")
            path = Path(tmp) / "check.json"
            path.write_text(json.dumps(config))
            proc = subprocess.run([str(BINARY), "--check", "--config", str(path)], capture_output=True, text=True,
                                  timeout=30)
            if proc.returncode != 0:
                err = " ".join(proc.stderr.split())
                err = err.split(" thread ")[0]
                return Presence(name, False, f"clawbed-emu --check refuses {keys}", err[:240])
        return Presence(name, True, f"clawbed-emu --check accepts {keys}")


@dataclass(frozen=True)
class SchemeName:
    what: str
    scheme: str

    def check(self, name: str) -> Presence:
        from clawbed.claw.schemes import SCHEMES

        if self.scheme in SCHEMES:
            return Presence(name, True, f"scheme {self.scheme!r} registered")
        return Presence(name, False, f"scheme registry clawbed.claw.schemes.SCHEMES has no {self.scheme!r}",
                        f"registered: {', '.join(sorted(SCHEMES))}")


@dataclass(frozen=True)
class ReplayOption:
    what: str
    option: str

    def check(self, name: str) -> Presence:
        from clawbed.replay.run import ReplayConfig

        fields = {f.name for f in dataclasses.fields(ReplayConfig)}
        if self.option in fields:
            return Presence(name, True, f"ReplayConfig.{self.option} exists")
        return Presence(name, False, f"clawbed.replay.run.ReplayConfig has no field {self.option!r}")


@dataclass(frozen=True)
class Module:
    what: str
    module: str
    function: str

    def check(self, name: str) -> Presence:
        try:
            spec = importlib.util.find_spec(self.module)
        except ModuleNotFoundError:
            spec = None
        if spec is None:
            return Presence(name, False, f"import {self.module}", "no such module")
        mod = importlib.import_module(self.module)
        if not callable(getattr(mod, self.function, None)):
            return Presence(name, False, f"{self.module}.{self.function}", "no such function")
        return Presence(name, True, f"{self.module}.{self.function} importable")


Mechanism = EmuKeys | SchemeName | ReplayOption | Module

#: Every mechanism a row may need, by the name rows use in ``needs`` / ``optional``. Defaults are
#: the fidelity table's §7 values.
MECHANISMS: dict[str, Mechanism] = {
    # The registry's current form (emulator/policies.json: cell.rrc, cell.stall), the §7 values.
    "rrc-lte": EmuKeys("LTE RRC/DRX model with the measured promotion distribution holding in-flight downlink data",
                       {"cell": {"rrc": {"kind": "lte", "tail_ms": 10000, "promotion_ms": 435,
                                         "promotion_p25_ms": 319, "promotion_p75_ms": 558}}}),
    "rrc-3g": EmuKeys("3G RRC profile (DCH/FACH/IDLE timers, ~2 s promotion)",
                      {"cell": {"rrc": {"kind": "umts", "dch_tail_ms": 5000, "fach_tail_ms": 12000,
                                        "idle_promotion_ms": 2000, "fach_promotion_ms": 1500}}}),
    "stall": EmuKeys("link-layer stall process (outages that hold, then release a burst)",
                     {"cell": {"stall": {"kind": "poisson", "mean_interval_s": 10.0, "min_ms": 200, "max_ms": 3000}}}),
    "rmem-cap": ReplayOption("per-phone receive-window cap (UE option ue_rmem)", "ue_rmem"),
    "drwa": ReplayOption("DRWA receive-window adaptation (UE option drwa)", "drwa"),
    "vegas": SchemeName("TCP Vegas as a BPF congestion control (scheme vegas)", "vegas"),
    "verus": SchemeName("Verus (scheme verus)", "verus"),
    "claw-nodetect": SchemeName("a CLAW variant without its wireline bottleneck detector (scheme claw-nodetect)",
                                "claw-nodetect"),
    "bwest": Module("passive bandwidth estimation from a server-side capture",
                    "clawbed.traces.bwest", "estimate"),
    "multi-host-pages": ReplayOption("generated pages spreading objects over many host names (replay option "
                                     "page_hosts)", "page_hosts"),
    "ue-category": EmuKeys("UE category caps (150 / 450 Mbit/s)", {"ues": [{"netns": "cbprobeu0", "rate": "10mbit",
                                                                             "cell": {"category": 9}}]}),
}


@functools.cache
def presence(name: str) -> Presence:
    """Whether mechanism ``name`` is in this build (checked once per process)."""
    if name not in MECHANISMS:
        raise KeyError(f"unknown mechanism {name!r}; known: {', '.join(MECHANISMS)}")
    try:
        return MECHANISMS[name].check(name)
    except (OSError, subprocess.SubprocessError, ImportError) as e:
        return Presence(name, False, "the check itself failed", str(e)[:200])


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _dotted_keys(fragment: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in fragment.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            keys += _dotted_keys(value, path)
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            keys += _dotted_keys({k: v for k, v in value[0].items() if k not in ("netns", "rate")}, f"{path}[0]")
        else:
            keys.append(path)
    return keys


def emu_fragment(name: str) -> dict[str, Any]:
    """The config fragment of an emulator mechanism (to merge into a run's config)."""
    mech = MECHANISMS[name]
    assert isinstance(mech, EmuKeys)
    return json.loads(json.dumps(mech.fragment))
