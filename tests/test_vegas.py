"""TCP Vegas as a BPF congestion control (``claw/bpf/vegas_cc.bpf.c``, scheme ``vegas``).

- the registry: one scheme file, no part on the UE, named per run;
- the kernel (root): the scheme registers ``vegas_<run id>[_<instance>]``, makes it the server
  namespace's default, a socket runs it, and teardown leaves nothing registered, no
  struct_ops map, no mount;
- the real data plane (root): a bulk download over the emulated busy cell
  (``traces/samples/busy-cell.cbt``, the base station's default 3 MB drop-tail buffer per UE),
  once with vegas and once with cubic, each on a fresh emulator from the trace's start (the
  same channel): the ground truth's per-UE queue (``truth.cbcol`` ``queue_bytes``) and the
  smoothed RTT (TCP_INFO) are far lower under Vegas, its throughput within a stated factor
  of Cubic's (docs/fidelity-table.md BB-2: "delay-based ones keep RTT low but lose throughput");
- ``clawbed replay --schemes vegas,cubic`` end to end, with another UE running vegas.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from bulkflow import bulk_download

from clawbed.claw import bpfobjects
from clawbed.claw.schemes import SCHEMES, SchemeContext, UeEndpoint, get_scheme
from clawbed.claw.schemes.base import KernelScheme, scheme_names
from clawbed.claw.server import loader
from clawbed.netns import Endpoint, Namespace, Resources, new_run_id, socket_in_namespace
from clawbed.paths import REPO_ROOT

BUSY_CELL = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
#: The kernel tests need clang and bpftool to build the object (and root: the ``root`` mark).
needs_toolchain = pytest.mark.skipif(not (shutil.which("clang") and shutil.which("bpftool")),
                                     reason="needs clang and bpftool")


# --- the registry (no kernel) --------------------------------------------------------------------

def test_vegas_is_one_scheme_file_with_no_part_on_the_ue() -> None:
    cls = get_scheme("vegas")
    assert SCHEMES["vegas"] is cls and cls.__module__ == "clawbed.claw.schemes.vegas"
    assert not issubclass(cls, KernelScheme)  # this kernel has no vegas: the scheme loads its own
    assert cls.needs_ue is False and "vegas" in scheme_names(without_ue=True)
    assert cls.description
    with pytest.raises(RuntimeError, match=r"named per run \(vegas_<run id>\); set the scheme up first"):
        _ = cls().server_cc
    # The per-run names fit the kernel's 15 characters, another UE's instance included.
    assert loader.cc_name("vegas", "ab12") == "vegas_ab12"
    assert loader.cc_name("vegas", "ab12", "u63") == "vegas_ab12_u63"


def test_specs_cross_traffic_and_other_ues_take_vegas(tmp_path: Path) -> None:
    """Everything that names schemes takes vegas from the registry, with no file of its own."""
    from clawbed.orchestrator.spec import load_spec
    from clawbed.replay.network.crosstraffic import CrossTrafficSpec, parse_other_ues

    spec = {"suite": "v", "loader": "h2", "repetitions": 1, "seeds": [1],
            "matrix": {"traces": ["busy-cell"], "pages": ["set-01"], "schemes": ["vegas", "cubic"],
                       "conditions": [{"name": "x", "wireline_rate": "20mbit",
                                       "cross_traffic": [{"kind": "bulk", "flows": 1, "scheme": "vegas"}],
                                       "other_ues": [{"kind": "bulk", "scheme": "vegas"}]}]}}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(spec))
    (scenario,) = load_spec(path).scenarios()
    assert scenario.schemes == ("vegas", "cubic")
    assert scenario.condition.cross_traffic[0].scheme == "vegas"
    assert scenario.condition.other_ues[0].scheme == "vegas"
    CrossTrafficSpec(kind="bulk", flows=1, scheme="vegas").check()  # wired cross traffic: no UE needed
    assert [s.scheme for s in parse_other_ues("2:vegas")] == ["vegas", "vegas"]


# --- the kernel -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def built() -> None:
    proc = subprocess.run(bpfobjects.build_command(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (bpfobjects.objects_dir() / "vegas_cc.bpf.o").is_file()


def struct_ops_ids() -> set[int]:
    out = subprocess.run(["bpftool", "-j", "struct_ops", "list"], capture_output=True, text=True, check=True).stdout
    return {int(m["id"]) for m in json.loads(out or "[]")}


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.01)


def default_cc(ns: Namespace) -> str:
    return ns.run(["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip()


@pytest.mark.usefixtures("built")
@pytest.mark.parametrize("instance", ["", "u1"])
@pytest.mark.root
@needs_toolchain
def test_scheme_registers_runs_and_unregisters_cleanly(tmp_path: Path, instance: str) -> None:
    rid = new_run_id()
    name = f"vegas_{rid}_{instance}" if instance else f"vegas_{rid}"
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        server, ue = res.namespace("s"), res.namespace("u")
        res.veth(Endpoint(server, res.name("s0"), "10.204.0.1"), Endpoint(ue, res.name("u0"), "10.204.0.2"))
        before = default_cc(server)
        scheme = get_scheme("vegas")()
        scheme.setup(SchemeContext(resources=res, run_dir=tmp_path, server_ns=server, server_address="10.204.0.1",
                                   server_device=res.name("s0"),
                                   ues=[UeEndpoint(ue, "10.204.0.2", 0, res.name("u0"))], instance=instance))
        assert scheme.server_cc == name and name in loader.available_congestion_controls()
        assert scheme.cc_maps_dir is None and scheme.start_clients(SchemeContext(
            resources=res, run_dir=tmp_path, server_ns=server, server_address="10.204.0.1",
            server_device=res.name("s0"), ues=[])) == []
        map_id = scheme.cc.struct_ops_id  # type: ignore[attr-defined]
        listed = json.loads(subprocess.run(["bpftool", "-j", "struct_ops", "list"], capture_output=True, text=True,
                                           check=True).stdout)
        assert {"id": map_id, "name": "vegas"}.items() <= next(m for m in listed if m["id"] == map_id).items()
        assert default_cc(server) == name  # the namespace default: non-restricted
        # A connection from the namespace's default runs it (ss shows the run's name).
        listener = socket_in_namespace(server.name)
        listener.bind(("10.204.0.1", 5301))
        listener.listen(1)
        client = socket_in_namespace(ue.name)
        try:
            client.connect(("10.204.0.1", 5301))
            conn, _ = listener.accept()
            conn.sendall(b"x" * 200_000)
            got = 0
            while got < 200_000:
                got += len(client.recv(1 << 16))
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode() == name
            assert f"{name} wscale" in server.run(["ss", "-tin", "sport", "= :5301"]).stdout
            conn.close()
        finally:
            client.close()
            listener.close()
        scheme.teardown()
        assert default_cc(server) == before
        assert name not in loader.available_congestion_controls()
        wait_for(lambda: map_id not in struct_ops_ids(), "the struct_ops map to be freed")
    assert name not in loader.available_congestion_controls()
    assert str(tmp_path) not in Path("/proc/mounts").read_text()
    assert not list(tmp_path.glob(f"cb{rid}*"))


# --- the real data plane: Vegas keeps the base station's queue below Cubic's ----------------------

#: The download's length (the busy-cell trace's), and the start it is judged without (slow
#: start, the first RTT samples).
BULK_S = 20.0
WARMUP_S = 3.0
PORT = 5302
#: How much of Cubic's throughput Vegas keeps at least: the papers report a "significant"
#: loss with no number (BB-2); measured here 0.48-0.63 in three runs (Vegas 2.5-3.2 Mbit/s,
#: Cubic 5.1-5.2: with 2-4 packets queued the base station often has nothing for the UE when
#: the scheduler gives it RBs).
MIN_THROUGHPUT_RATIO = 0.35
#: Vegas' queue is at most this fraction of Cubic's, p50 and p95 (measured: p50 0.003-0.18,
#: p95 0.017-0.26 — the highest with RRC/DRX on and the machine busy; Cubic's own queue varies
#: with its losses from run to run).
MAX_QUEUE_RATIO = 0.35
#: Vegas' median smoothed RTT is at most this fraction of Cubic's (measured 0.09-0.27).
MAX_SRTT_RATIO = 0.5


@dataclass
class Bulk:
    scheme: str
    cc: str
    queue_p50: float
    queue_p95: float
    srtt_p50_ms: float
    srtt_p95_ms: float
    mbit_s: float

    def __str__(self) -> str:
        return (f"{self.scheme:>5} ({self.cc}): queue p50 {self.queue_p50 / 1e3:8.1f} KB, p95 "
                f"{self.queue_p95 / 1e3:8.1f} KB; srtt p50 {self.srtt_p50_ms:7.1f} ms, p95 {self.srtt_p95_ms:7.1f} ms; "
                f"{self.mbit_s:5.2f} Mbit/s")


def _tcp_info(sock: socket.socket) -> tuple[int, int]:
    """(smoothed RTT in µs, bytes acked)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    (rtt_us,) = struct.unpack_from("=I", raw, 68)
    (acked,) = struct.unpack_from("=Q", raw, 120)
    return rtt_us, acked


def _bulk_over_busy_cell(out: Path, scheme_name: str) -> Bulk:
    """One download from the core namespace to the UE for BULK_S, through a fresh emulator on
    the busy-cell trace, with ``scheme_name`` as the server namespace's default CC."""
    from clawbed.emulator.process import EmulatedCell
    from clawbed.emulator.truth import read_truth

    out.mkdir(parents=True)
    with EmulatedCell(1, out, ue={"trace": BUSY_CELL}) as cell:
        core, ue = cell.topo.core, cell.topo.ues[0]
        ue.ns.sysctl("net.ipv4.tcp_rmem", "4096 1048576 16777216")  # no receive-window cap on Cubic
        scheme = get_scheme(scheme_name)()
        scheme.setup(SchemeContext(resources=cell.res, run_dir=out, server_ns=core.ns,
                                   server_address=str(core.address), server_device=core.tun,
                                   ues=[UeEndpoint(ue.ns, str(ue.address), 0, ue.tun)]))
        samples: list[tuple[float, int, int]] = []
        with bulk_download(core.name, ue.name, str(core.address), PORT) as conn:
            cc = conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
            started_ns = time.time_ns()
            while time.time_ns() - started_ns < BULK_S * 1e9:
                samples.append((time.time_ns(), *_tcp_info(conn)))
                time.sleep(0.05)
        scheme.teardown()
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
    judged = [(t, rtt, acked) for t, rtt, acked in samples if t >= t0]
    srtt_ms = np.array([rtt for _, rtt, _ in judged]) / 1e3
    mbit_s = (judged[-1][2] - judged[0][2]) * 8 / ((judged[-1][0] - judged[0][0]) / 1e9) / 1e6
    return Bulk(scheme_name, cc, float(np.percentile(queue, 50)), float(np.percentile(queue, 95)),
                float(np.percentile(srtt_ms, 50)), float(np.percentile(srtt_ms, 95)), mbit_s)


@pytest.mark.usefixtures("built")
@pytest.mark.root
@needs_toolchain
def test_vegas_keeps_the_queue_below_cubics_on_the_same_trace(tmp_path: Path) -> None:
    vegas = _bulk_over_busy_cell(tmp_path / "vegas", "vegas")
    cubic = _bulk_over_busy_cell(tmp_path / "cubic", "cubic")
    figures = f"\n{vegas}\n{cubic}"
    print(figures)
    assert vegas.cc.startswith("vegas_") and cubic.cc == "cubic"
    # Cubic fills the deep buffer (hundreds of KB at least); Vegas keeps a few packets there.
    assert cubic.queue_p50 > 100_000, figures
    assert vegas.queue_p50 <= MAX_QUEUE_RATIO * cubic.queue_p50, figures
    assert vegas.queue_p95 <= MAX_QUEUE_RATIO * cubic.queue_p95, figures
    assert vegas.srtt_p50_ms <= MAX_SRTT_RATIO * cubic.srtt_p50_ms, figures
    assert vegas.srtt_p95_ms < cubic.srtt_p95_ms, figures
    assert vegas.mbit_s >= MIN_THROUGHPUT_RATIO * cubic.mbit_s, figures


# --- end to end ---------------------------------------------------------------------------------

@pytest.mark.usefixtures("built")
@pytest.mark.root
@needs_toolchain
def test_replay_runs_vegas_beside_cubic_with_another_ue_on_vegas(clawbed_cli: Path, tmp_path: Path) -> None:
    proc = subprocess.run([str(clawbed_cli), "replay", "--schemes", "vegas,cubic", "--runs", "1", "--loader", "h2",
                           "--page", "set-01", "--other-ues", "1:vegas", "--runs-dir", str(tmp_path),
                           "--name", "vegas"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "vegas"
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    by_scheme = {r["scheme"]: r for r in records}
    assert set(by_scheme) == {"vegas", "cubic"}, records
    assert all(r["ok"] and r["plt_ms"] > 0 for r in records), records
    assert by_scheme["vegas"]["cc"].startswith("vegas_") and by_scheme["cubic"]["cc"] == "cubic"
    # Nothing of the run stays registered: neither the load's vegas nor the other UE's.
    rid_ccs = [c for c in loader.available_congestion_controls() if c.startswith("vegas_")]
    ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    ours = {e["name"] for e in ledger if e["kind"] == "struct_ops"}
    assert len(ours) >= 2 and any(n.endswith("_u1") for n in ours), ours  # the load's and other UE 1's
    assert not ours & set(rid_ccs)
    assert str(run_dir) not in Path("/proc/mounts").read_text()


@pytest.mark.usefixtures("built")
@pytest.mark.root
@needs_toolchain
def test_a_suite_runs_vegas_as_the_scheme_as_wired_cross_traffic_and_on_another_ue(clawbed_cli: Path,
                                                                                   tmp_path: Path) -> None:
    spec = {"suite": "vegasproof", "loader": "h2", "repetitions": 1, "seeds": [1], "load_timeout_s": 60,
            "matrix": {"traces": ["busy-cell"], "pages": ["set-01"], "schemes": ["vegas"],
                       "conditions": [{"name": "crossed", "wireline_rate": "20mbit",
                                       "cross_traffic": [{"kind": "bulk", "flows": 1, "scheme": "vegas"}],
                                       "other_ues": [{"kind": "bulk", "scheme": "vegas"}]}]}}
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = subprocess.run([str(clawbed_cli), "suite", "run", str(path), "--runs-dir", str(tmp_path / "runs"),
                           "--store", str(tmp_path / "results.sqlite")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (manifest_path,) = (tmp_path / "runs").glob("vegasproof/*/*/manifest.json")  # the scenario's run directory
    run_dir = manifest_path.parent
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["scheme"] for r in records] == ["vegas"] and records[0]["ok"], records
    assert records[0]["cc"].startswith("vegas_")
    background = {b["name"]: b for b in json.loads(manifest_path.read_text())["background"]}
    # The wired cross host's instance (_x0) and other UE 1's (_u1), each registered for the run.
    assert background["cross0-bulk"]["cc"] == records[0]["cc"] + "_x0", background
    assert background["ue1-bulk"]["cc"] == records[0]["cc"] + "_u1", background
    assert all(b["scheme"] == "vegas" and b["bytes_delivered"] > 0 for b in background.values()), background
    ccs = {records[0]["cc"]} | {b["cc"] for b in background.values()}
    assert not ccs & set(loader.available_congestion_controls())
    assert str(run_dir) not in Path("/proc/mounts").read_text()
