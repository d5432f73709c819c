"""The decomposition's per-load facts (orchestrator/decompose.py) from files whose answer is known."""

from __future__ import annotations

import json
import math
from pathlib import Path

from clawbed.orchestrator.decompose import decompose, slow_start_exits
from clawbed.orchestrator.store import LoadRow


def test_a_flow_that_sets_ssthresh_before_any_loss_left_slow_start_early() -> None:
    tcp = {"flow": ["a", "a", "b", "b", "c"], "ssthresh_pkts": ["", "40", "", "30", ""],
           "retrans_total": ["0", "0", "0", "2", "0"], "lost_pkts": ["0", "0", "0", "0", "0"]}
    assert slow_start_exits(tcp) == (3, 1, 1)  # a: early, b: on a loss, c: never left


def _load(tmp_path: Path, index: int, scheme: str, plt_ms: float, rto: int, ssthresh: str) -> LoadRow:
    folder = tmp_path / "run" / "loads" / f"{index:03d}-{scheme}"
    folder.mkdir(parents=True)
    (folder / "netstat.json").write_text(json.dumps({"TcpExtTCPTimeouts": rto} if rto else {}))
    (folder / "tcp.csv").write_text(f"flow,ssthresh_pkts,retrans_total,lost_pkts\nf,,0,0\nf,{ssthresh},0,0\n")
    return LoadRow(suite="s", sweep="w", scenario_id="x", label="synth:idle-cell/image-2mb/h2/s1", scheme=scheme,
                   repetition=index, ok=True, plt_ms=plt_ms, bytes_total=1, protocol="h2", error=None,
                   run_dir=str(tmp_path / "run"), load_index=index, t_start_unix_s=0.0, t_end_unix_s=1.0,
                   recorded_unix_s=0.0)


def test_the_gap_per_factor_set_with_rtos_and_exits(tmp_path: Path) -> None:
    rows = [_load(tmp_path, 0, "claw", 1500, 0, ""), _load(tmp_path, 1, "cubic", 2000, 1, "20"),
            _load(tmp_path, 2, "claw", 1500, 0, ""), _load(tmp_path, 3, "cubic", 3000, 0, "")]
    lines = {line["scheme"]: line for line in decompose(rows)}
    assert lines["claw"]["factors"] == "synth:idle-cell · image-2mb · h2"
    assert lines["cubic"]["plt_mean_s"] == 2.5 and lines["cubic"]["rto_per_load"] == 0.5
    assert lines["cubic"]["ss_exit_early"] == 0.5 and lines["claw"]["ss_exit_early"] == 0
    assert lines["claw"]["vs_cubic_pct"] == 40 and math.isnan(lines["cubic"]["vs_cubic_pct"])
