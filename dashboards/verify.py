"""Run every variable's and every panel's query of the generated dashboards against InfluxDB,
with the variables substituted the way Grafana does, and report which return no data.

Grafana itself is not needed: its InfluxDB datasource sends the panel's raw InfluxQL after
replacing ``$timeFilter`` (``time >= <from>ms and time <= <to>ms``), ``$__interval`` (the
range over the panel's max data points) and each template variable (a multi-valued one as
the regex alternative ``(a|b)`` of its escaped values; "All" means every value).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from clawbed.dashboards.definitions import GENERATED
from clawbed.dashboards.influxdb import InfluxError, query

#: The shortest ``$__interval`` Grafana uses by default for InfluxDB, ms.
MIN_INTERVAL_MS = 10
_REGEX_SPECIAL = re.compile(r"([\\^$.|?*+()\[\]{}/])")


def regex_value(values: list[str]) -> str:
    """A multi-valued variable as Grafana writes it into a regex: ``(a|b)``, each escaped."""
    escaped = [_REGEX_SPECIAL.sub(r"\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(text: str, variables: dict[str, list[str]], start_ms: int, end_ms: int, interval_ms: int) -> str:
    """``text`` with ``$timeFilter``, ``$__interval`` and every variable replaced."""
    text = text.replace("$timeFilter", f"time >= {start_ms}ms and time <= {end_ms}ms")
    text = text.replace("$__interval", f"{interval_ms}ms")
    # Longest names first, so that $scheme is not taken for $scenario's prefix or the like.
    for name in sorted(variables, key=len, reverse=True):
        text = text.replace(f"${name}", regex_value(variables[name]))
    return text


@dataclass
class Checked:
    """One query as sent, and the rows it returned."""

    dashboard: str
    what: str
    query: str
    rows: int
    error: str | None = None


@dataclass
class Verification:
    checked: list[Checked] = field(default_factory=list)

    @property
    def empty(self) -> list[Checked]:
        """Queries that returned no rows or failed."""
        return [c for c in self.checked if c.rows == 0 or c.error]


def _rows(url: str, q: str) -> int:
    return sum(len(s.get("values") or []) for s in query(url, q))


def verify(url: str, start_ms: int, end_ms: int, *, runs: list[str] | None = None,
           folder: Path = GENERATED) -> Verification:
    """Check every dashboard in ``folder`` over [``start_ms``, ``end_ms``] (Unix ms): each
    variable (previous ones substituted, "All" selected, except ``run`` = ``runs`` when given)
    and then each panel target."""
    result = Verification()
    for path in sorted(folder.glob("*.json")):
        board = json.loads(path.read_text())
        name = board["title"]
        variables: dict[str, list[str]] = {}
        for variable in board["templating"]["list"]:
            q = substitute(variable["query"], variables, start_ms, end_ms, MIN_INTERVAL_MS)
            try:
                values = sorted({row[1] for s in query(url, q) for row in s.get("values") or []})
                error = None
            except InfluxError as e:
                values, error = [], str(e)
            result.checked.append(Checked(name, f"variable ${variable['name']}", q, len(values), error))
            if variable["name"] == "run" and runs is not None:
                values = [v for v in values if v in runs]
            # An empty variable still needs a value that matches nothing, as in Grafana.
            variables[variable["name"]] = values or ["__none__"]
        for panel in board["panels"]:
            points = int(panel.get("maxDataPoints") or 100)
            interval_ms = max(MIN_INTERVAL_MS, (end_ms - start_ms) // points)
            for target in panel.get("targets", []):
                q = substitute(target["query"], variables, start_ms, end_ms, interval_ms)
                try:
                    rows, error = _rows(url, q), None
                except InfluxError as e:
                    rows, error = 0, str(e)
                result.checked.append(Checked(name, f"panel {panel['title']!r} target {target['refId']}", q, rows,
                                              error))
    return result


def run_time_range_ms(url: str, runs: list[str]) -> tuple[int, int]:
    """[first, last] time (Unix ms) of any point of ``runs``."""
    where = f'"run" =~ /^{regex_value(runs)}$/'
    times = []
    for order in ("ASC", "DESC"):
        series = query(url, f'SELECT * FROM /.*/ WHERE {where} ORDER BY time {order} LIMIT 1')
        times += [s["values"][0][0] for s in series if s.get("values")]
    if not times:
        raise InfluxError(f"no points of run(s) {', '.join(runs)} in InfluxDB at {url}")
    return min(times) // 1_000_000, max(times) // 1_000_000 + 1
