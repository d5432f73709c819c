"""The UE's receive window: per-phone ``tcp_rmem`` caps (``replay/rmem.py``) and DRWA
(``replay/drwa.py`` + ``claw/bpf/drwa_egress.bpf.c``).

- settings (no kernel): the phone table, ``--ue-rmem`` / ``ue_rmem:`` parsing and errors,
  ``--drwa`` / ``drwa:``, BB12's Algorithm 1 on synthetic counters;
- the real data plane (root): a bulk download from the core namespace to the UE over the
  emulated busy cell (``traces/samples/busy-cell.cbt``, the base station's default 3 MiB
  drop-tail buffer per UE: deep) without residual loss (see :data:`LOSS_FREE`), Cubic at the
  server, sampling the server socket's TCP_INFO every 50 ms and reading the UE's queue from the
  ground truth (``truth.cbcol``):
  * a capped receive window (Galaxy S2, 110208 B) caps the server's in-flight and cwnd at the
    advertised window, and keeps the base station's queue small, vs the uncapped UE;
  * DRWA (λ = 3, α = 7/8) cuts the queue and the RTT by a large factor vs plain Cubic with the
    uncapped UE, its throughput within a stated fraction;
- the owned resources: DRWA's bpffs, pins and tc filter are in the ledger and gone after.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from bulkflow import bulk_download

from clawbed.claw import bpfobjects
from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT
from clawbed.replay import drwa, rmem

BUSY_CELL = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
needs_toolchain = pytest.mark.skipif(not (shutil.which("clang") and shutil.which("bpftool")),
                                     reason="needs clang and bpftool")


# --- settings ------------------------------------------------------------------------------------

def test_the_phone_table_is_bb12s() -> None:
    assert rmem.resolve("galaxy-s2").tcp_rmem == (4096, 87380, 110208)
    assert rmem.resolve("droid-charge").max_bytes == 484848
    assert rmem.resolve("galaxy-s2:hspa+").max_bytes == 262144
    assert rmem.resolve("lg-g2x:gprs").tcp_rmem == (4096, 11680, 11680)  # default never above max
    assert rmem.resolve("htc-evo-shift:wimax").max_bytes == 524288
    s = rmem.resolve("Droid-Charge:LTE")
    assert s.phone == "droid-charge" and s.network == "lte" and s.moderate_rcvbuf == 1
    assert "BB12 App. B Table 2" in s.describe()["source"]
    assert rmem.resolve("131712").tcp_rmem == (4096, 131072, 131712)
    assert rmem.resolve("256KiB").max_bytes == 262144
    assert rmem.resolve(917504).max_bytes == 917504
    assert rmem.resolve(None) is None
    assert "galaxy-s2:hspa+" in rmem.choices()
    # All three values, as Android's per-network tcp_buffer_sizes gives them.
    assert rmem.resolve("524288, 1MiB, 2MiB").tcp_rmem == (524288, 1 << 20, 2 << 20)


@pytest.mark.parametrize("bad, message", [
    ("nexus-5", r"--ue-rmem 'nexus-5': unknown phone; one of galaxy-s2"),
    ("galaxy-s2:lte", r"--ue-rmem galaxy-s2:lte: BB12's table has no 'lte' value for galaxy-s2; it has wifi"),
    ("12 parsecs", r"--ue-rmem 12 parsecs: not a size"),
    ("100", r"--ue-rmem 100: a receive-buffer maximum must be 4096 bytes .. 1 GiB"),
    (True, r"--ue-rmem True: give a phone"),
    ("4096,1MiB", r"--ue-rmem 4096,1MiB: MIN,DEFAULT,MAX takes three sizes, not 2"),
    ("4096,lots,8MiB", r"--ue-rmem 4096,lots,8MiB: DEFAULT 'lots' is not a size"),
    ("4096,16MiB,8MiB", r"--ue-rmem 4096,16MiB,8MiB: needs 0 < MIN ≤ DEFAULT ≤ MAX"),
])
def test_bad_ue_rmem_values_name_the_flag(bad: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        rmem.resolve(bad)  # type: ignore[arg-type]


def test_replay_config_and_spec_take_the_settings(tmp_path: Path) -> None:
    from clawbed.orchestrator.spec import SpecError, load_spec
    from clawbed.replay.run import ReplayConfig

    cfg = ReplayConfig(trace=BUSY_CELL, page="set-01", schemes=["cubic"], runs=1, ue_rmem="galaxy-s2", drwa=True)
    cfg.check()
    with pytest.raises(InputError, match="--ue-rmem: 'iphone': unknown phone"):
        ReplayConfig(trace=BUSY_CELL, page="set-01", schemes=["cubic"], runs=1, ue_rmem="iphone").check()

    def spec(condition: dict) -> Path:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({"suite": "rw", "matrix": {"traces": ["busy-cell"], "pages": ["set-01"],
                                                                   "schemes": ["cubic"], "conditions": [condition]}}))
        return path

    (sc,) = load_spec(spec({"name": "capped", "ue_rmem": "droid-charge:lte", "drwa": True})).scenarios()
    assert sc.condition.ue_rmem == "droid-charge:lte" and sc.condition.drwa is True
    (sc2,) = load_spec(spec({"name": "bytes", "ue_rmem": 262144})).scenarios()
    assert sc2.condition.ue_rmem == 262144
    # Conditions without the new keys keep their scenario ids (the keys are left out of the hash).
    (plain,) = load_spec(spec({"name": "plain"})).scenarios()
    assert "ue_rmem" not in plain.settings()["condition"] and "drwa" not in plain.settings()["condition"]
    assert sc.settings()["condition"]["ue_rmem"] == "droid-charge:lte"
    with pytest.raises(SpecError, match=r"ue_rmem.*unknown phone"):
        load_spec(spec({"ue_rmem": "iphone"}))
    with pytest.raises(SpecError, match=r"drwa"):
        load_spec(spec({"drwa": "sometimes"}))


def test_drwa_follows_bb12_algorithm_1() -> None:
    """Fed a flow that receives 100 KB per 100 ms RTT at RTT_min, then the RTT doubles:
    cwnd_est converges on the bytes per RTT, rwnd = 3 · RTT_min/RTT · cwnd_est."""
    est = drwa.DrwaEstimator()
    assert (est.params.lam, est.params.alpha) == (3.0, 7 / 8)
    t, received = 0.0, 0
    assert est.update(t, received, 0.0, 1448) is None  # no RTT sample yet
    assert est.update(t, received, 0.1, 1448) is None  # the first round starts
    for _ in range(60):
        t += 0.1 + 1e-9  # a round closes at the first reading ≥ RTT after its start
        received += 100_000
        window = est.update(t, received, 0.1, 1448)
    assert window == pytest.approx(300_000, rel=0.01)
    for _ in range(60):  # the RTT doubles (a queue builds), the same bytes per (longer) round
        t += 0.2 + 1e-9
        received += 100_000
        window = est.update(t, received, 0.2, 1448)
    assert est.rtt_min_s == 0.1
    assert window == pytest.approx(3 * 0.5 * 100_000, rel=0.02)
    # Never below the floor: an idle flow can ramp again.
    for _ in range(200):
        t += 0.2 + 1e-9
        window = est.update(t, received, 0.2, 1448)
    assert window == drwa.MIN_WINDOW_SEGMENTS * 1448


# --- the real data plane --------------------------------------------------------------------------

#: The download's length and the start it is judged without (slow start).
BULK_S = 20.0
WARMUP_S = 3.0
PORT = 5311
#: The small cap: Galaxy S2 (AT&T)'s default, 110208 B (BB12 App. B Table 2).
SMALL_CAP = "galaxy-s2"
#: The cell's loss model for these downloads: no transmission fails. The trace's own failures
#: (``harq_fail``) lose a packet at RLC now and then (1-2 in 20 s at trace times ~10.6 and
#: ~14.7 s). In one CI run (2026-11-28) slow start ended lower than usual (cwnd 141 KB at 3 s,
#: 210 KB here), a loss then cut it, and uncapped Cubic stayed at 80-160 KB (queue p50 65 KB):
#: it never showed what the receive window does. Without it, only the buffer and the window bound cwnd.
LOSS_FREE = {"loss": {"kind": "fixed", "probability": 0.0}}


@dataclass
class Bulk:
    label: str
    queue_p50: float
    queue_p95: float
    srtt_p50_ms: float
    srtt_p95_ms: float
    mbit_s: float
    #: TCP_INFO samples after the warm-up: (cwnd·MSS, in flight bytes, snd_wnd).
    cwnd_bytes: np.ndarray
    inflight_bytes: np.ndarray
    snd_wnd: np.ndarray
    extra: dict

    def __str__(self) -> str:
        return (f"{self.label:>10}: queue p50 {self.queue_p50 / 1e3:8.1f} KB, p95 {self.queue_p95 / 1e3:8.1f} KB; "
                f"srtt p50 {self.srtt_p50_ms:7.1f} ms, p95 {self.srtt_p95_ms:7.1f} ms; {self.mbit_s:5.2f} Mbit/s; "
                f"cwnd·MSS p50 {np.percentile(self.cwnd_bytes, 50) / 1e3:7.1f} KB max "
                f"{self.cwnd_bytes.max() / 1e3:7.1f} KB; in flight max {self.inflight_bytes.max() / 1e3:7.1f} KB; "
                f"snd_wnd p50 {np.percentile(self.snd_wnd, 50) / 1e3:7.1f} KB max {self.snd_wnd.max() / 1e3:7.1f} KB")


def _tcp_info(sock: socket.socket) -> tuple[int, int, int, int, int, int]:
    """(srtt µs, bytes acked, cwnd pkts, mss, unacked pkts, snd_wnd bytes)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    (mss,) = struct.unpack_from("=I", raw, 16)
    (unacked,) = struct.unpack_from("=I", raw, 24)
    (rtt_us,) = struct.unpack_from("=I", raw, 68)
    (cwnd,) = struct.unpack_from("=I", raw, 80)
    (acked,) = struct.unpack_from("=Q", raw, 120)
    (snd_wnd,) = struct.unpack_from("=I", raw, 228)
    return rtt_us, acked, cwnd, mss, unacked, snd_wnd


def bulk_over_busy_cell(out: Path, label: str, *, ue_rmem: str | None = None, use_drwa: bool = False,
                        seconds: float = BULK_S) -> Bulk:
    """One Cubic download from the core namespace to the UE for ``seconds`` through a fresh
    emulator on the busy-cell trace (no residual loss: :data:`LOSS_FREE`); the UE capped by
    ``ue_rmem`` (else uncapped) and with DRWA when ``use_drwa``."""
    from clawbed.emulator.process import EmulatedCell
    from clawbed.emulator.truth import read_truth

    out.mkdir(parents=True)
    extra: dict = {}
    with EmulatedCell(1, out, ue={"trace": BUSY_CELL}, cell=LOSS_FREE) as cell:
        core, ue = cell.topo.core, cell.topo.ues[0]
        core.ns.sysctl("net.ipv4.tcp_congestion_control", "cubic")
        setting = rmem.resolve(ue_rmem)
        if setting is None:
            ue.ns.sysctl("net.ipv4.tcp_rmem", " ".join(str(v) for v in rmem.UNCAPPED))
        else:
            setting.apply(ue.ns)
        extra["ue_sysctls"] = rmem.read_back(ue.ns)
        stack = contextlib.ExitStack()
        with stack:
            if use_drwa:
                ctl = stack.enter_context(drwa.Drwa(netns=ue.name, dev=ue.tun, run_id=cell.run_id, run_dir=out,
                                                    ledger=cell.res.ledger, log_path=out / "drwa.csv"))
            samples: list[tuple[int, ...]] = []
            with bulk_download(core.name, ue.name, str(core.address), PORT) as conn:
                started_ns = time.time_ns()
                while time.time_ns() - started_ns < seconds * 1e9:
                    samples.append((time.time_ns(), *_tcp_info(conn)))
                    time.sleep(0.05)
            if use_drwa:
                extra["drwa"] = ctl.describe()
                extra["drwa_flows"] = list(ctl.flow_windows().values())
        cell.stop()
    truth = read_truth(out / "truth.cbcol")
    origin = truth.origin_unix_ns
    assert origin is not None
    t0 = started_ns + WARMUP_S * 1e9
    t1 = samples[-1][0]
    t_ms = truth["t_ms"]
    rows = (t_ms >= (t0 - origin) / 1e6) & (t_ms <= (t1 - origin) / 1e6)
    assert rows.sum() > 0.9 * (t1 - t0) / 1e6, "the ground truth does not cover the download"
    queue = truth.ue(0, "queue_bytes")[rows]
    judged = np.array([s for s in samples if s[0] >= t0], dtype=np.float64)
    srtt_ms = judged[:, 1] / 1e3
    mbit_s = (judged[-1, 2] - judged[0, 2]) * 8 / ((judged[-1, 0] - judged[0, 0]) / 1e9) / 1e6
    mss = judged[:, 4]
    return Bulk(label, float(np.percentile(queue, 50)), float(np.percentile(queue, 95)),
                float(np.percentile(srtt_ms, 50)), float(np.percentile(srtt_ms, 95)), mbit_s,
                cwnd_bytes=judged[:, 3] * mss, inflight_bytes=judged[:, 5] * mss, snd_wnd=judged[:, 6], extra=extra)


@pytest.fixture(scope="module")
def built() -> None:
    proc = subprocess.run(bpfobjects.build_command(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (bpfobjects.objects_dir() / drwa.OBJECT_NAME).is_file()


@pytest.fixture(scope="module")
def uncapped(tmp_path_factory: pytest.TempPathFactory) -> Bulk:
    """The reference: Cubic into the uncapped UE (8 MiB maximum), shared by both comparisons."""
    return bulk_over_busy_cell(tmp_path_factory.mktemp("uncapped") / "run", "uncapped")


#: The capped flow's queue p95 is at most this fraction of the uncapped one's.
MAX_CAPPED_QUEUE_RATIO = 0.2


@pytest.mark.root
def test_a_capped_receive_window_caps_cwnd_and_the_queue(tmp_path: Path, uncapped: Bulk) -> None:
    capped = bulk_over_busy_cell(tmp_path / "capped", f"{SMALL_CAP}", ue_rmem=SMALL_CAP)
    figures = f"\n{capped}\n{uncapped}"
    print(figures)
    cap = rmem.resolve(SMALL_CAP).max_bytes
    assert capped.extra["ue_sysctls"] == {"tcp_rmem": [4096, 87380, cap], "tcp_moderate_rcvbuf": 1}
    # The advertised window the server sees never exceeds the cap, and bounds what is in flight.
    assert capped.snd_wnd.max() <= cap, figures
    assert np.all(capped.inflight_bytes <= capped.snd_wnd + 1448), figures
    # cwnd climbs to a constant and stays there ("flat TCP", BB12 Fig 8), far below where the
    # uncapped flow's goes. Linux grows cwnd in slow start only while it is below twice the
    # packets in flight (tcp_is_cwnd_limited), and the last ACK that grows it adds the segments
    # it acknowledges, so the plateau is 2 × the advertised window plus one ACK's worth
    # (measured 1.9-2.06 ×; 139 KB over a 67.5 KB window), never into the buffer.
    assert capped.cwnd_bytes.max() <= 2.5 * capped.snd_wnd.max(), figures
    assert np.median(capped.cwnd_bytes) >= 0.75 * capped.cwnd_bytes.max(), figures
    assert capped.cwnd_bytes.max() <= 0.5 * np.median(uncapped.cwnd_bytes), figures
    # Uncapped, Cubic fills the deep buffer; capped, the queue stays small.
    assert uncapped.queue_p50 > 100_000, figures
    assert capped.queue_p95 <= MAX_CAPPED_QUEUE_RATIO * uncapped.queue_p95, figures
    assert capped.queue_p95 <= cap, figures


#: DRWA vs plain Cubic on the deep buffer: queue and RTT at most these fractions, throughput
#: at least this fraction. Measured on the loss-free busy cell (2-core machine, 2026-11-28):
#: queue p50 0.12, p95 0.08; srtt p50 0.18-0.20 (174-185 vs 949 ms: DRWA holds ≈ λ·RTT_min
#: with RTT_min ≈ 60 ms); throughput 0.96 (5.70 vs 5.95 Mbit/s). With the trace's residual
#: loss it was queue p50 0.40, srtt p50 0.53, throughput 0.91. BB12 Fig 18: RTT −24 % to −49 %,
#: throughput within 4 %.
MAX_DRWA_QUEUE_RATIO = 0.5
MAX_DRWA_SRTT_RATIO = 0.65
MIN_DRWA_THROUGHPUT_RATIO = 0.8


@pytest.mark.usefixtures("built")
@pytest.mark.root
@needs_toolchain
def test_drwa_cuts_the_queue_and_rtt_on_a_bloated_path(tmp_path: Path, uncapped: Bulk) -> None:
    with_drwa = bulk_over_busy_cell(tmp_path / "drwa", "drwa", use_drwa=True)
    figures = f"\n{with_drwa}\n{uncapped}\n{with_drwa.extra.get('drwa')}"
    print(figures)
    counters = with_drwa.extra["drwa"]["counters"]
    assert counters["syns_seen"] >= 1 and counters["acks_lowered"] > 100 and counters["rewrite_errors"] == 0, figures
    assert with_drwa.extra["drwa"]["controller_errors"] == 0, figures
    assert uncapped.queue_p50 > 100_000, figures
    assert with_drwa.queue_p50 <= MAX_DRWA_QUEUE_RATIO * uncapped.queue_p50, figures
    assert with_drwa.queue_p95 <= MAX_DRWA_QUEUE_RATIO * uncapped.queue_p95, figures
    assert with_drwa.srtt_p50_ms <= MAX_DRWA_SRTT_RATIO * uncapped.srtt_p50_ms, figures
    assert with_drwa.mbit_s >= MIN_DRWA_THROUGHPUT_RATIO * uncapped.mbit_s, figures
    # Nothing of DRWA is left: its bpffs is unmounted and removed.
    assert str(tmp_path) not in Path("/proc/mounts").read_text()
    assert not list((tmp_path / "drwa").glob("cb*dw"))


@pytest.mark.usefixtures("built")
@pytest.mark.root
@needs_toolchain
def test_replay_applies_the_cap_and_drwa_records_them_and_removes_drwa(clawbed_cli: Path, tmp_path: Path) -> None:
    import json

    proc = subprocess.run([str(clawbed_cli), "replay", "--schemes", "cubic", "--runs", "1", "--loader", "h2",
                           "--page", "set-01", "--ue-rmem", "droid-charge:lte", "--drwa", "--capture-server",
                           "--runs-dir", str(tmp_path), "--name", "rw"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "rw"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["ue_rmem"] == "droid-charge:lte" and manifest["config"]["drwa"] is True
    assert manifest["ue_tcp"]["tcp_rmem"] == [4096, 87380, 484848] and manifest["ue_tcp"]["tcp_moderate_rcvbuf"] == 1
    assert manifest["ue_tcp"]["rmem"]["phone"] == "droid-charge"
    counters = manifest["drwa"]["counters"]
    assert counters["syns_seen"] >= 1 and counters["acks_seen"] > 0 and counters["rewrite_errors"] == 0, counters
    assert manifest["server_capture"]["written"] > 0 and (run_dir / "server.pcap").stat().st_size > 24
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert records and all(r["ok"] for r in records), records
    ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    assert any(e["kind"] == "bpffs" and e["name"].endswith("dw") for e in ledger)
    assert any(e["kind"] == "tc-filter" and e.get("pref") == drwa.FILTER_PREF for e in ledger)
    assert str(run_dir) not in Path("/proc/mounts").read_text()
    assert not list(run_dir.glob("cb*dw"))
