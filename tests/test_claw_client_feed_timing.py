"""The CLAW client on the phone's feed timing and on the ideal one, over the REAL emulator: the
busy-cell trace, a TCP bulk flow to the UE, the client daemon as its command-line process and
the stand-in server agent of ``test_claw_client_live`` (which runs on the default, the phone's).

Checked on both: the client decodes the feed and reports, authenticated, and its estimates
(aligned with the ground truth by the messages' subframe stamps) track the true load. Printed
for both (figures, not asserted: they depend on the machine): how old a report's subframe is
when the agent gets it, and the report's load error against the truth over the window that
ends when it arrives (what a server acting on it faces), beside its error over its own window.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from test_claw_client_live import AGENT_PORT, KEY, TRACE, Agent, BulkFlow, tcp_info

from clawbed.claw.client.estimates import read_estimates
from clawbed.claw.client.offline import Score, score, truth_windows
from clawbed.claw.feedback import Echo, FeedbackRejected, decode_feedback
from clawbed.emulator.process import BINARY, EmulatedCell
from clawbed.emulator.truth import read_truth

pytestmark = pytest.mark.root

FLOW_S = 6.0


class TimedAgent(Agent):
    """The stand-in agent, noting when each report arrived (Unix s)."""

    arrived: list[float]

    def _run(self) -> None:
        self.arrived = []
        while not self._stop.is_set():
            try:
                data, peer = self.sock.recvfrom(2048)
            except TimeoutError:
                continue
            now = time.time()
            try:
                fb = decode_feedback(data, KEY)
            except FeedbackRejected:
                self.rejected += 1
                continue
            self.reports.append(fb)
            self.arrived.append(now)
            try:
                srtt_us, cwnd = tcp_info(self.flow.conn)
            except OSError:
                continue
            self.srtts.append(srtt_us)
            self.sock.sendto(Echo(fb.ue_id, fb.seq, srtt_us, cwnd, False).encode(KEY), peer)


@dataclass
class ClientRun:
    timing: str
    reports: int
    rejected: int
    score: Score
    #: Per report: age of its subframe at arrival, ms; |load − truth load| over its own
    #: window and over the window ending at its arrival.
    age_ms: np.ndarray
    load_err_own: np.ndarray
    load_err_at_arrival: np.ndarray

    def __str__(self) -> str:
        return (f"{self.timing}: {self.reports} reports; estimates load MAE {self.score.load_mae:.3f} "
                f"(W_claw rel. MAE {self.score.w_claw_mae_relative:.3f}); report age p50/p90 "
                f"{np.median(self.age_ms):.1f}/{np.percentile(self.age_ms, 90):.1f} ms; report load error "
                f"own window {self.load_err_own.mean():.3f}, window ending at arrival "
                f"{self.load_err_at_arrival.mean():.3f}")


def run_client(out: Path, timing: str) -> ClientRun:
    if not BINARY.is_file():
        pytest.skip(f"{BINARY} not built (cargo build --release -p emulator)")
    key_file = out / "key"
    key_file.write_bytes(KEY)
    log = out / "claw-estimates.csv"
    with EmulatedCell(1, out, ue={"trace": TRACE}, mode="cell", diag={"feed_timing": timing}) as cell:
        topo = cell.topo
        ue, core = topo.ues[0], topo.core
        client = cell.res.process(
            [sys.executable, "-m", "clawbed.claw.client", "--ue-id", "0", "--netns", ue.name,
             "--server", f"{topo.server_address}:{AGENT_PORT}", "--key-file", str(key_file),
             "--diag-port", str(cell.emulator.diag_port(0)), "--n-antennas", "2", "--n-rb", "50",
             "--log", str(log), "--run-id", cell.run_id, "--run-dir", str(out)],
            name="claw-client", log_path=out / "claw-client.log")
        flow = BulkFlow(core.name, ue.name, str(topo.server_address), FLOW_S)
        agent = TimedAgent(core.name, str(topo.server_address), flow)
        try:
            assert flow.done.wait(FLOW_S + 60), "the bulk flow did not finish"
        finally:
            agent.close()
            status = client.close()
            flow.close()
        counters = cell.stop()
    assert counters["diag"]["feed_timing"] == timing
    lines = (out / "claw-client.log").read_text().splitlines()
    assert status == 0, "\n".join(lines[-20:])
    assert any(line.startswith("claw-client {") for line in lines)
    truth = read_truth(out / "truth.cbcol")
    cols = read_estimates(log)
    # The subframe (Unix s) of each report, from the estimates row that sent it.
    seq = cols["feedback_seq"]
    sent = {int(q): u for q, u in zip(seq[~np.isnan(seq)], cols["unix_s"][~np.isnan(seq)])}
    origin_s = float(truth.header["origin_unix_ns"]) / 1e9
    ages, own, at_arrival = [], [], []
    for fb, arrived in zip(agent.reports, agent.arrived):
        if fb.seq not in sent:
            continue
        t_own = round((sent[fb.seq] - origin_s) * 1000)
        t_arr = round((arrived - origin_s) * 1000)
        w = truth_windows(truth, 0, np.array([t_own, t_arr]), np.array([t_own, t_arr]) - fb.window_ms + 1)
        ages.append((arrived - sent[fb.seq]) * 1000)
        own.append(abs(fb.load - w["load"][0]))
        at_arrival.append(abs(fb.load - w["load"][1]))
    return ClientRun(timing, len(agent.reports), agent.rejected, score(cols, truth, ue=0),
                     np.array(ages), np.array(own), np.array(at_arrival))


@pytest.mark.parametrize("timing", ["phone", "ideal"])
def test_the_client_reports_on_either_feed_timing(timing: str, tmp_path: Path) -> None:
    run = run_client(tmp_path, timing)
    print(run)
    (tmp_path / "figures.json").write_text(json.dumps({"timing": timing, "summary": str(run)}))
    assert run.rejected == 0
    assert run.reports >= 20
    assert len(run.age_ms) >= 0.8 * run.reports
    # The estimates are stamped with their subframes: the delivery's lateness does not move
    # them off the truth's windows.
    assert run.score.load_mae <= 0.05, run.score
    assert run.score.n_s_exact_fraction > 0.95, run.score
