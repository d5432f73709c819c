"""Which UEs' diag feeds the real ``clawbed-emu`` writes to files (``ues[i].diag_file``), and
the truth reader's column selection.

A big cell's background UEs have their files off (each grows by about 1 MB/s): their feed
must still be served live, and their ground truth still recorded.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from clawbed.emulator.process import EmulatedCell
from clawbed.emulator.truth import read_truth
from clawbed.netns import socket_in_namespace

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[1]
BUSY_CELL = REPO / "traces" / "samples" / "busy-cell.cbt"


def _first_line(ns: str, port: int) -> dict:
    sock = socket_in_namespace(ns, socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(("127.0.0.1", port))
        data = b""
        while b"\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    return json.loads(data.split(b"\n", 1)[0])


def test_a_ue_with_diag_file_off_has_no_files_but_a_live_feed_and_truth(tmp_path: Path) -> None:
    ues = [{"trace": BUSY_CELL}, {"trace": BUSY_CELL, "diag_file": False}]
    with EmulatedCell(2, tmp_path, ue=ues) as cell:
        line = _first_line(cell.topo.ues[1].name, cell.emulator.diag_port(1))
        time.sleep(1.0)
        cell.stop()
    assert "timestamp" in line
    assert (tmp_path / "diag-ue0.jsonl").stat().st_size > 0
    assert (tmp_path / "diag-ue0.mi2log").stat().st_size > 0
    assert not (tmp_path / "diag-ue1.jsonl").exists()
    assert not (tmp_path / "diag-ue1.mi2log").exists()
    truth = read_truth(tmp_path / "truth.cbcol")
    assert truth.n_ues == 2 and truth.rows > 500

    # Column selection: the same values as the whole read, and nothing else decoded.
    wanted = {"t_ms", "ues[1].alloc_rbs", "ues[0].tbs_bits"}
    part = read_truth(tmp_path / "truth.cbcol", wanted)
    assert set(part.columns) == wanted
    for name in wanted:
        assert np.array_equal(part[name], truth[name])
    assert read_truth(tmp_path / "truth.cbcol", ()).columns == {}
