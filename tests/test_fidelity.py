"""The fidelity suite: its row definitions cover the table, a cheap row runs end to end through
the real emulator and kernel TCP into the store and the report, and a mechanism this build
lacks makes a row not-emulated with the reason found at run time."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from clawbed.orchestrator.fidelity import mechanisms
from clawbed.orchestrator.fidelity.definitions import ROWS_DIR, load_rows
from clawbed.orchestrator.fidelity.report import report_rows, write_html
from clawbed.orchestrator.fidelity.results import NOT_EMULATED, NOT_RUN, read_rows
from clawbed.orchestrator.fidelity.runner import run_row
from clawbed.paths import REPO_ROOT

TABLE = REPO_ROOT / "docs" / "fidelity-table.md"


def ids_of_the_table() -> list[str]:
    """The oracle: every data row of the table's markdown tables whose first cell is an ID
    (``| LTE-1 | ...``), read here independently of the suite's own parser."""
    ids = []
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"(LTE|BB|SPDY|CLAW|WWAN|REAL)-\d+", cells[0]):
            ids.append(cells[0])
    return ids


def test_the_table_has_27_rows_and_every_one_has_a_definition() -> None:
    """The papers' 27 phenomena, and the project's own rows against real recordings (REAL-n)."""
    from clawbed.orchestrator.fidelity.runner import experiment_for

    ids = ids_of_the_table()
    assert len(ids) == len(set(ids)) and len([i for i in ids if not i.startswith("REAL-")]) == 27, ids
    rows = load_rows()
    assert sorted(rows) == sorted(ids)
    assert sorted(p.stem for p in ROWS_DIR.glob("*.yaml")) == sorted(ids)
    for row in rows.values():
        assert experiment_for(row.experiment), f"{row.id}: unknown experiment {row.experiment}"
        for m in [*row.needs, *row.optional]:
            assert m in mechanisms.MECHANISMS, f"{row.id}: unknown mechanism {m}"
        assert row.paper and row.criterion
        row.parameters(quick=True)


def test_the_report_lists_every_row_even_with_an_empty_store(tmp_path: Path) -> None:
    rows = report_rows(tmp_path / "empty.sqlite")
    assert [r["row_id"] for r in rows] == ids_of_the_table()
    assert {r["status"] for r in rows} == {NOT_RUN}
    page = write_html(rows, tmp_path / "report.html")
    assert all(i in page.read_text() for i in ids_of_the_table())


def test_a_missing_mechanism_makes_the_row_not_emulated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism is looked for when the row runs: an emulator key the binary refuses
    (found by ``clawbed-emu --check``) gives not-emulated with that reason, in the store and
    the report."""
    fake = mechanisms.EmuKeys("a test-only cell mechanism", {"cell": {"fidelity_test_no_such_mechanism": {"on": True}}})
    monkeypatch.setitem(mechanisms.MECHANISMS, "test-missing", fake)
    mechanisms.presence.cache_clear()
    row = load_rows()["LTE-3"].model_copy(update={"needs": ["test-missing"]})
    store = tmp_path / "s.sqlite"
    outcome = run_row(row, row.id, tmp_path / "run", run="t1", quick=True, store_path=store, console=Console(quiet=True))
    assert outcome.status == NOT_EMULATED
    assert "a test-only cell mechanism not in this build (checked:" in outcome.reason
    assert "fidelity_test_no_such_mechanism" in outcome.reason
    line = next(r for r in report_rows(store) if r["row_id"] == "LTE-3")
    assert line["status"] == NOT_EMULATED and "not in this build" in line["reason"]
    mechanisms.presence.cache_clear()


def test_a_present_mechanism_is_found() -> None:
    mechanisms.presence.cache_clear()
    assert mechanisms.presence.__wrapped__("rmem-cap").name == "rmem-cap"  # the check itself runs
    present = mechanisms.EmuKeys("the existing RRC switch", {"cell": {"rrc": {"enabled": True}}}).check("x")
    assert present.present, present


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces)")
def test_one_cheap_row_runs_end_to_end(tmp_path: Path) -> None:
    """LTE-1 for a few seconds through the real emulator: a report line with a number, the
    kernel and both ends' TCP sysctls, in the store's fidelity table."""
    base = load_rows()["LTE-1"]
    row = base.model_copy(update={"quick": {**base.quick, "seconds": 4}})
    store = tmp_path / "s.sqlite"
    outcome = run_row(row, row.id, tmp_path / "run", run="t-e2e", quick=True, store_path=store,
                      console=Console(quiet=True))
    assert outcome.status in ("pass", "fail"), outcome.reason
    assert re.search(r"\d", outcome.testbed)
    recorded = read_rows(store, "t-e2e")["LTE-1"]
    for end in ("server", "ue"):
        for key in ("tcp_frto", "tcp_recovery", "tcp_slow_start_after_idle", "tcp_no_metrics_save", "tcp_rmem"):
            assert recorded["sysctls"][end][key], (end, key)
    assert recorded["kernel"].startswith("Linux")
    assert (tmp_path / "run" / "LTE-1" / "figure.json").is_file()
    line = next(r for r in report_rows(store) if r["row_id"] == "LTE-1")
    assert line["testbed"] == outcome.testbed and line["run_dir"].endswith("LTE-1")


def test_the_cli_group_is_registered(clawbed_cli: Path) -> None:
    out = subprocess.run([str(clawbed_cli), "fidelity", "--help"], capture_output=True, text=True, check=True).stdout
    assert "run" in out and "report" in out


def test_stall_runs_are_the_runs_of_stalled_subframes() -> None:
    import numpy as np

    from clawbed.orchestrator.fidelity.bulk import stall_runs

    stalled = np.array([0, 1, 1, 0, 0, 1, 1, 1, 0, 1], dtype=float)
    t_ms = np.arange(100, 110)
    # (first stalled subframe, end of the last one): an outage of 2, 3 and (cut by the end) 1 ms.
    assert stall_runs(stalled, t_ms) == [(101.0, 103.0), (105.0, 108.0), (109.0, 110.0)]
    assert stall_runs(np.zeros(5), np.arange(5)) == []


def test_lte3_below_tail_shift_has_an_exact_interval() -> None:
    import numpy as np

    from clawbed.orchestrator.fidelity.bulk import _shift_ci
    from clawbed.orchestrator.regress import interval_rank

    rng = np.random.default_rng(3)
    ref = list(64 + 6 * rng.random(10))  # pings spread over the SR slot, as LTE-3's
    same = list(64 + 6 * rng.random(10))
    shift, low, high = _shift_ci(same, ref)
    assert low is not None and high is not None and low <= 0 <= high
    # A shifted copy: the estimate is the shift itself, and the interval is the k-th smallest
    # and largest pairwise difference (k from the Mann-Whitney null at 95 %).
    shifted = [x + 400 for x in ref]
    shift, low, high = _shift_ci(shifted, ref)
    diffs = sorted(a - b for a in shifted for b in ref)
    k = interval_rank(10, 10)
    assert shift == pytest.approx(400) and (low, high) == (diffs[k - 1], diffs[-k]) and low > 1
    assert _shift_ci([1.0], [2.0])[1:] == (None, None)  # too few pings for any interval
