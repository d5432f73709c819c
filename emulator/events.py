"""Scripted events of the emulator: their kinds as the binary lists them, the flag's text form, the checks.

``events.json`` beside this file is the cell crate's event registry as ``clawbed-emu
--list-events`` prints it (a Rust test keeps them equal; ``CLAWBED_BLESS=1 cargo test -p
emulator --lib config`` rewrites it), so a kind added in ``emulator/cell/src/events.rs``
reaches this parser and the config model through the file alone.

An event is a table ``{"kind": ..., PARAM: VALUE, ...}`` in the emulator config's ``events``
list; on a command line, ``KIND:PARAM=VALUE[,PARAM=VALUE...]``::

    drop:in_flight_bytes=300000          # the segment that brings UE 0's flow to 300 KB in flight
    outage:at_ms=3000,ms=500             # UE 0's link out for 500 ms from 3 s
    capacity:at_ms=2000,factor=0.5,ms=1000
    burst:at_ms=1000,ms=2000,share=0.6   # other users take 60 % of the cell for 2 s

Times are ms of emulated time since the last arming: time zero, and each seek of the traces
(a replay seeks at each load's start, so there ``at_ms`` is ms into each load). What each
kind does: ``emulator/ARCHITECTURE.md`` ("Scripted events") and the cell crate's docs.
Light on purpose (no pydantic): CLIs read it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: Each kind by name: its summary and parameters (name, type, min, max, need, default, doc).
EVENTS: dict[str, dict[str, Any]] = {
    k["name"]: k for k in json.loads(Path(__file__).with_name("events.json").read_text())
}


class EventError(ValueError):
    """A bad event; ``key`` is the parameter (or ``kind``) at fault, relative to the event."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def _value(text: str) -> Any:
    """A parameter's value as the binary reads the text form: true/false, an integer, a number, else text."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_event(text: str) -> dict[str, Any]:
    """``KIND:PARAM=VALUE[,PARAM=VALUE...]`` as the config's table, checked (:func:`check_event`);
    a ValueError says what is wrong with the text."""
    kind, _, params = text.partition(":")
    kind = kind.strip()
    if not kind or "," in kind or "=" in kind:
        raise ValueError(f"{text!r} is not KIND:PARAM=VALUE[,PARAM=VALUE...] (KIND one of {', '.join(EVENTS)})")
    event: dict[str, Any] = {"kind": kind}
    for part in (p.strip() for p in params.split(",")) if params.strip() else ():
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{part!r} is not PARAM=VALUE (in {text!r})")
        if key.strip() in event:
            raise ValueError(f"parameter {key.strip()!r} given twice (in {text!r})")
        event[key.strip()] = _value(value.strip())
    try:
        return check_event(event)
    except EventError as e:
        raise ValueError(f"{text!r}: {e}") from None


def _check_value(param: dict[str, Any], value: Any) -> Any:
    kind = param["type"]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool) and param["min"] <= value <= param["max"]
        expected = f"an integer in {param['min']}..={param['max']}"
    elif kind == "real":
        ok = number and math.isfinite(value) and param["min"] <= value <= param["max"]
        expected = f"a number in {param['min']}..={param['max']}"
    else:
        ok, expected = isinstance(value, bool), "true or false"
    if not ok:
        raise EventError(param["name"], f"must be {expected}, got {value!r}")
    return float(value) if kind == "real" else value


def check_event(event: Any) -> dict[str, Any]:
    """``event`` (a table with ``kind`` and parameters) checked as the binary checks it: a known
    kind, known parameters within range, the required ones given, exactly one of the ``one-of``
    ones. Raises :class:`EventError` naming the key."""
    if not isinstance(event, dict):
        raise EventError("kind", "an event is a table with `kind` and its parameters")
    name = event.get("kind")
    if name not in EVENTS:
        what = "missing" if name is None else f"unknown {name!r}"
        raise EventError("kind", f"{what}: an event's kind is one of {', '.join(EVENTS)}")
    spec = EVENTS[name]
    params = {p["name"]: p for p in spec["params"]}
    for key in event:
        if key != "kind" and key not in params:
            raise EventError(key, f"unknown parameter of a {name} event (its parameters: {', '.join(params)})")
    checked: dict[str, Any] = {"kind": name}
    for pname, p in params.items():
        if pname in event:
            checked[pname] = _check_value(p, event[pname])
        elif p["need"] == "required":
            raise EventError(pname, f"a{'n' if name[0] in 'aeiou' else ''} {name} event needs it: {p['doc']}")
    one_of = [n for n, p in params.items() if p["need"] == "one-of"]
    given = [n for n in one_of if n in event]
    if one_of and not given:
        raise EventError("kind", f"a {name} event needs exactly one of {', '.join(one_of)}, got none")
    if len(given) > 1:
        raise EventError(given[1], f"a {name} event takes exactly one of {', '.join(one_of)}, got {', '.join(given)}")
    return checked


def check_events(events: Iterable[Any], n_ues: int) -> list[dict[str, Any]]:
    """Every event checked (:func:`check_event`), its UE among the ``n_ues``; an
    :class:`EventError` names ``events[i].<key>``."""
    out = []
    for i, event in enumerate(events):
        try:
            checked = check_event(event)
        except EventError as e:
            raise EventError(f"events[{i}].{e.key}", e.problem) from None
        if checked.get("ue", 0) >= n_ues:
            raise EventError(f"events[{i}].ue", f"UE {checked['ue']} is not one of the {n_ues} UEs")
        out.append(checked)
    return out


def describe_events() -> str:
    """The kinds and their parameters, one line each, for a flag's help."""
    lines = []
    for name, spec in EVENTS.items():
        params = ", ".join(p["name"] for p in spec["params"])
        lines.append(f"{name} ({params})")
    return "; ".join(lines)
