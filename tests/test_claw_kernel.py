"""CLAW's server in the kernel (needs root, clang, bpftool): the struct_ops CC, the ACK-flag
reader, the agent, and that each leaves nothing behind.

Topology: a server namespace and a UE namespace joined by a veth; the server's egress is
shaped by a TBF (the bottleneck and its queue); random loss, when a test needs it, comes
from ``iptables -m statistic`` in the UE namespace. Each test reads what the CC did from
``TCP_INFO`` and from the flow's entry in ``claw_flows``; no assertion depends on timing.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from clawbed.claw import bpfobjects
from clawbed.claw.feedback import Feedback, decode_echo
from clawbed.claw.schemes import SchemeContext, UeEndpoint, get_scheme
from clawbed.claw.server import loader
from clawbed.claw.server.bpfmap import BpfMap
from clawbed.claw.server.maps import (
    ACK_FLAGS_MAP,
    FLOWS_MAP,
    PEERS_MAP,
    AckFlags,
    Applied,
    FlowFlag,
    FlowKey,
    FlowStats,
    LossCause,
    Mode,
    Peer,
    addr_key,
)
from clawbed.netns import Endpoint, Namespace, ResourceError, Resources, new_run_id, socket_in_namespace

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root"),
    pytest.mark.skipif(not (shutil.which("clang") and shutil.which("bpftool")), reason="needs clang and bpftool"),
]

SERVER_ADDR = "10.203.0.1"
UE_ADDR = "10.203.0.2"
PORT = 5201
#: The paced download of the emulated-cell test: 16 KiB every 100 ms, 1.3 Mbit/s, about a
#: third of what the busy-cell trace leaves the UE on average.
PACED_CHUNK_BYTES = 16 * 1024
PACED_PERIOD_S = 0.1
KEY = bytes(range(32))
#: Generous limit for a condition polled in a loop (never asserted as a duration).
WAIT_S = 20.0


@pytest.fixture(scope="module", autouse=True)
def built() -> None:
    proc = subprocess.run(bpfobjects.build_command(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def struct_ops_ids() -> set[int]:
    """The ids of the struct_ops maps the kernel holds (``bpftool struct_ops list``). Every
    run's claw map is called ``claw`` (only the CC's name is the run's own), so a test
    checks its own by id."""
    out = subprocess.run(["bpftool", "-j", "struct_ops", "list"], capture_output=True, text=True, check=True).stdout
    return {int(m["id"]) for m in json.loads(out or "[]")}


def ledger_struct_ops_ids(ledger: Path) -> set[int]:
    """The struct_ops map ids a run's ledger recorded."""
    return {int(e["map_id"]) for e in map(json.loads, ledger.read_text().splitlines()) if e["kind"] == "struct_ops"}


def run_ccs(run_id: str) -> set[str]:
    """The names run ``run_id`` registers claw and cqic under."""
    return {loader.cc_name(v, run_id) for v in loader.VARIANTS}


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.002)


@dataclass
class TcpInfo:
    ca_state: int
    rtt_us: int
    ssthresh: int
    cwnd: int
    bytes_acked: int


def tcp_info(sock: socket.socket) -> TcpInfo:
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    rtt, _rttvar, ssthresh, cwnd = struct.unpack_from("=IIII", raw, 68)
    (bytes_acked,) = struct.unpack_from("=Q", raw, 120)
    return TcpInfo(raw[1], rtt, ssthresh, cwnd, bytes_acked)


class BulkFlow:
    """One TCP connection from the server namespace to the UE, the server sending as fast as
    its congestion control lets it; the UE reading and discarding."""

    def __init__(self, server: Namespace, ue: Namespace, cc: str | None) -> None:
        """``cc`` None: the server namespace's default congestion control."""
        self.listener = socket_in_namespace(server.name)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((SERVER_ADDR, PORT))
        self.listener.listen(1)
        if cc is not None:
            self.listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
        self.client = socket_in_namespace(ue.name)
        self.client.connect((SERVER_ADDR, PORT))
        self.conn, _ = self.listener.accept()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._sink, daemon=True),
                        threading.Thread(target=self._pump, daemon=True)]
        for t in self.threads:
            t.start()
        ue_port = self.client.getsockname()[1]
        self.key = FlowKey(UE_ADDR, SERVER_ADDR, ue_port, PORT)

    def _sink(self) -> None:
        while not self.stop.is_set():
            try:
                if not self.client.recv(1 << 20):
                    return
            except OSError:
                return

    def _pump(self) -> None:
        data = b"\0" * (1 << 18)
        while not self.stop.is_set():
            try:
                self.conn.send(data)
            except OSError:
                return

    def info(self) -> TcpInfo:
        return tcp_info(self.conn)

    def close(self) -> None:
        self.stop.set()
        for s in (self.conn, self.client, self.listener):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in self.threads:
            t.join(timeout=5)


@dataclass
class Bed:
    res: Resources
    server: Namespace
    ue: Namespace
    server_dev: str
    ue_dev: str
    bpffs: bpfobjects.BpffsMount
    run_dir: Path

    def maps(self) -> tuple[BpfMap, BpfMap, BpfMap]:
        return (loader.open_map(self.bpffs.path, PEERS_MAP), loader.open_map(self.bpffs.path, FLOWS_MAP),
                loader.open_map(self.bpffs.path, ACK_FLAGS_MAP))


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    """Server and UE namespaces, a 20 Mbit/s TBF bottleneck, a bpffs; everything removed after,
    and checked: none of the run's claw/cqic registered, nothing mounted."""
    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        server, ue = res.namespace("s"), res.namespace("u")
        sdev, udev = res.name("s0"), res.name("u0")
        res.veth(Endpoint(server, sdev, SERVER_ADDR), Endpoint(ue, udev, UE_ADDR))
        server.run(["tc", "qdisc", "add", "dev", sdev, "root", "tbf", "rate", "20mbit", "burst", "20kb",
                    "latency", "60ms"])
        ue.sysctl("net.ipv4.tcp_rmem", "4096 1048576 16777216")
        bpffs = bpfobjects.mount_bpffs(res, tmp_path, role="tb")
        yield Bed(res, server, ue, sdev, udev, bpffs, tmp_path)
    assert not run_ccs(rid) & set(loader.available_congestion_controls())
    ours = ledger_struct_ops_ids(tmp_path / "ledger.jsonl")
    wait_for(lambda: not ours & struct_ops_ids(), "the struct_ops maps to be freed", 10)
    assert str(tmp_path) not in Path("/proc/mounts").read_text()


def flow_stats(flows: BpfMap, key: FlowKey) -> FlowStats:
    raw = flows.lookup(key.pack())
    assert raw is not None, f"no claw_flows entry for {key}"
    return FlowStats.unpack(raw)


def set_peer(peers: BpfMap, w_claw_bytes: int, mode: Mode, seq: int, *, age_ns: int = 0,
             stale_after_ns: int = 60 * 10**9) -> None:
    peers.update(addr_key(UE_ADDR), Peer(time.monotonic_ns() - age_ns, stale_after_ns, w_claw_bytes, int(mode),
                                         seq, 100).pack())


# --- registration -----------------------------------------------------------------------------

def test_register_and_unregister_leave_nothing(tmp_path: Path) -> None:
    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        bpffs = bpfobjects.mount_bpffs(res, tmp_path)
        assert bpffs.path == tmp_path / f"cb{rid}bp" and bpffs.source == f"cb{rid}bp"
        claw = loader.register_cc(res, bpffs, "claw")
        cqic = loader.register_cc(res, bpffs, "cqic")
        assert (claw.name, cqic.name) == (f"claw_{rid}", f"cqic_{rid}")
        assert {claw.name, cqic.name} <= set(loader.available_congestion_controls())
        assert {claw.struct_ops_id, cqic.struct_ops_id} <= struct_ops_ids()
        pins = {p.name for p in bpffs.path.iterdir()}
        assert {f"{claw.name}_link", f"{cqic.name}_link", PEERS_MAP, FLOWS_MAP, ACK_FLAGS_MAP} <= pins
        # The second load reused the first one's maps: only claw's load created pins.
        assert {p.name for p in claw._pins.created} == {PEERS_MAP, FLOWS_MAP, ACK_FLAGS_MAP}
        assert cqic._pins.created == []
        with pytest.raises(Exception, match="already registered"):
            loader.CongestionControl(bpffs, "claw", name=claw.name)
        ids = {claw.struct_ops_id, cqic.struct_ops_id}
    assert not run_ccs(rid) & set(loader.available_congestion_controls())
    wait_for(lambda: not ids & struct_ops_ids(), "the struct_ops maps to be freed", 10)
    assert str(tmp_path) not in Path("/proc/mounts").read_text()
    assert not (tmp_path / f"cb{rid}bp").exists()


def test_two_runs_register_claw_at_once_and_each_socket_runs_its_own(tmp_path: Path) -> None:
    """Congestion-control names are machine-wide, so each run registers claw under a name of
    its own (claw_<run id>): two runs (two replays, a replay and these tests) load it side by
    side, a socket set to one runs that one, and each run's teardown leaves nothing of its
    own registered."""
    runs = []
    with contextlib.ExitStack() as stack:
        for i in range(2):
            res = stack.enter_context(Resources(new_run_id(), tmp_path / f"ledger{i}.jsonl"))
            server, ue = res.namespace("s"), res.namespace("u")
            res.veth(Endpoint(server, res.name("s0"), SERVER_ADDR), Endpoint(ue, res.name("u0"), UE_ADDR))
            cc = loader.register_cc(res, bpfobjects.mount_bpffs(res, tmp_path), "claw")
            runs.append((server, ue, cc))
        names = {cc.name for _, _, cc in runs}
        ids = {cc.struct_ops_id for _, _, cc in runs}
        assert len(names) == 2 and names <= set(loader.available_congestion_controls())
        assert ids <= struct_ops_ids()
        flows = [BulkFlow(server, ue, cc.name) for server, ue, cc in runs]
        try:
            for flow, (server, _, cc) in zip(flows, runs):
                raw = flow.conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
                assert raw.rstrip(b"\0").decode() == cc.name
                assert f"{cc.name} wscale" in server.run(["ss", "-tin", "sport", f"= :{PORT}"]).stdout
        finally:
            for flow in flows:
                flow.close()
    assert not names & set(loader.available_congestion_controls())
    wait_for(lambda: not ids & struct_ops_ids(), "the struct_ops maps to be freed", 10)


def test_namespace_default_is_moved_off_before_unregistering(bed: Bed) -> None:
    cc = loader.CongestionControl(bed.bpffs, "claw", name=loader.cc_name("claw", bed.res.run_id))
    try:
        before = bed.server.run(["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip()
        cc.set_namespace_default(bed.server)
        assert bed.server.run(["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip() == cc.name
    finally:
        cc.close()
    assert bed.server.run(["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip() == before


# --- the window ---------------------------------------------------------------------------------

def test_flow_uses_claw_and_cubic_until_the_first_report(bed: Bed) -> None:
    cc = loader.register_cc(bed.res, bed.bpffs, "claw")
    flow = BulkFlow(bed.server, bed.ue, cc.name)
    peers, flows, _ = bed.maps()
    try:
        ss = bed.server.run(["ss", "-tin", "sport", f"= :{PORT}"]).stdout
        assert f"{cc.name} wscale" in ss, ss
        wait_for(lambda: flow_stats(flows, flow.key).acks > 50, "ACKs")
        st = flow_stats(flows, flow.key)
        assert loader.read_flow_stats(bed.bpffs.path)[flow.key].acks >= st.acks
        assert st.applied == Applied.NO_FEEDBACK
        assert st.w_claw_pkts == 0
        assert st.cwnd_pkts == st.w_cubic_pkts  # no report: the shadow Cubic's window
        assert st.srtt_us > 0 and st.mss_bytes > 0
    finally:
        flow.close()
        for m in (peers, flows):
            m.close()


@pytest.mark.parametrize("variant", ["claw", "cqic"])
def test_w_claw_in_the_map_sets_cwnd_within_an_ack_or_two(bed: Bed, variant: str) -> None:
    cc = loader.register_cc(bed.res, bed.bpffs, variant)
    flow = BulkFlow(bed.server, bed.ue, cc.name)
    peers, flows, _ = bed.maps()
    try:
        wait_for(lambda: flow_stats(flows, flow.key).acks > 50, "ACKs")
        mss = flow_stats(flows, flow.key).mss_bytes
        for seq, w_claw_bytes in enumerate([40 * mss, 25 * mss + 1, 80 * mss, 12 * mss], start=1):
            target = math.ceil(w_claw_bytes / mss)
            acks_before = flow_stats(flows, flow.key).acks
            set_peer(peers, w_claw_bytes, Mode.CELLULAR, seq)
            wait_for(lambda seq=seq: flow_stats(flows, flow.key).peer_seq == seq, f"the CC to apply report {seq}")
            st = flow_stats(flows, flow.key)
            assert st.applied == Applied.CELLULAR
            assert st.w_claw_pkts == target
            assert st.cwnd_pkts == target
            # The first ACK after the write applied it (give or take the one or two that
            # raced with reading acks_before and writing the map).
            assert st.report_seen_acks - acks_before <= 3
            wait_for(lambda target=target: flow.info().cwnd == target, f"TCP_INFO cwnd {target}")
    finally:
        flow.close()
        for m in (peers, flows):
            m.close()


def test_stale_report_falls_back_to_the_cubic_window(bed: Bed) -> None:
    cc = loader.register_cc(bed.res, bed.bpffs, "claw")
    flow = BulkFlow(bed.server, bed.ue, cc.name)
    peers, flows, _ = bed.maps()
    try:
        wait_for(lambda: flow_stats(flows, flow.key).acks > 50, "ACKs")
        mss = flow_stats(flows, flow.key).mss_bytes
        set_peer(peers, 7 * mss, Mode.CELLULAR, 1, age_ns=400_000_000, stale_after_ns=300_000_000)
        wait_for(lambda: flow_stats(flows, flow.key).peer_seq == 1, "the CC to see the report")
        st = flow_stats(flows, flow.key)
        assert st.applied == Applied.STALE
        assert st.w_claw_pkts == 0
        assert st.cwnd_pkts == st.w_cubic_pkts
    finally:
        flow.close()
        for m in (peers, flows):
            m.close()


def test_modes_wireline_saturated_and_cqic_ignoring_them(bed: Bed) -> None:
    claw = loader.register_cc(bed.res, bed.bpffs, "claw")
    cqic = loader.register_cc(bed.res, bed.bpffs, "cqic")
    peers, flows, _ = bed.maps()
    flow = BulkFlow(bed.server, bed.ue, claw.name)
    try:
        wait_for(lambda: flow_stats(flows, flow.key).acks > 50, "ACKs")
        mss = flow_stats(flows, flow.key).mss_bytes
        set_peer(peers, 5 * mss, Mode.WIRELINE, 1)
        wait_for(lambda: flow_stats(flows, flow.key).peer_seq == 1, "report 1")
        st = flow_stats(flows, flow.key)
        assert st.applied == Applied.WIRELINE and st.cwnd_pkts == st.w_cubic_pkts

        # From wireline to saturated: no inertia to compensate (the flow ran on W_cubic).
        set_peer(peers, 2 * mss, Mode.SATURATED, 2)
        wait_for(lambda: flow_stats(flows, flow.key).peer_seq == 2, "report 2")
        st = flow_stats(flows, flow.key)
        assert st.applied == Applied.SATURATED and st.boosts == 0
        assert st.cwnd_pkts == max(st.w_cubic_pkts, 2)

        # From cellular to saturated: W_cubic raised once to W_cubic' (x4 in slow start, else
        # Cubic's curve two RTTs ahead, which grows at most x1.5 per RTT).
        set_peer(peers, 3 * mss, Mode.CELLULAR, 3)
        wait_for(lambda: flow_stats(flows, flow.key).peer_seq == 3, "report 3")
        set_peer(peers, 3 * mss, Mode.SATURATED, 4)
        wait_for(lambda: flow_stats(flows, flow.key).peer_seq == 4, "report 4")
        st = flow_stats(flows, flow.key)
        assert st.boosts == 1
        if st.boost_to_pkts == 4 * st.boost_from_pkts:
            pass  # the shadow was in slow start
        else:
            assert st.boost_from_pkts <= st.boost_to_pkts <= st.boost_from_pkts * 9 // 4
        acks = st.acks
        wait_for(lambda: flow_stats(flows, flow.key).acks > acks + 20, "more ACKs")
        st = flow_stats(flows, flow.key)
        assert st.boosts == 1  # once, not on every ACK
        assert st.applied == Applied.SATURATED and st.cwnd_pkts == max(st.w_cubic_pkts, 3)
    finally:
        flow.close()

    flow = BulkFlow(bed.server, bed.ue, cqic.name)
    try:
        wait_for(lambda: flow_stats(flows, flow.key).acks > 50, "ACKs")
        set_peer(peers, 9 * mss, Mode.WIRELINE, 5)
        wait_for(lambda: flow_stats(flows, flow.key).peer_seq == 5, "report 5")
        st = flow_stats(flows, flow.key)
        assert st.flags & FlowFlag.CQIC
        assert st.applied == Applied.CELLULAR and st.cwnd_pkts == 9
    finally:
        flow.close()
        for m in (peers, flows):
            m.close()


# --- losses -------------------------------------------------------------------------------------

def drop_randomly(ue: Namespace, probability: float) -> None:
    """Drop a fraction of the server's data segments on arrival at the UE."""
    ue.run(["iptables", "-A", "INPUT", "-p", "tcp", "--sport", str(PORT), "-m", "statistic", "--mode", "random",
            "--probability", str(probability), "-j", "DROP"])


def reduced(window_pkts: int) -> int:
    """beta = 0.7 as the kernel's Cubic computes it (717/1024, at least 2)."""
    return max(window_pkts * 717 // 1024, 2)


@pytest.mark.parametrize("mode", [Mode.CELLULAR, Mode.WIRELINE], ids=["cellular", "wireline"])
def test_wireless_flag_keeps_the_window_and_other_losses_reduce_it(bed: Bed, mode: Mode) -> None:
    """Cellular mode (cwnd = W_claw) and wireline mode (cwnd = W_cubic): a loss reported by
    ACKs flagged 0x02 reduces neither cwnd nor W_cubic; one reported by unflagged ACKs or
    ACKs flagged 0x04 reduces both by beta, and caps W_claw at the reduced window."""
    cc = loader.register_cc(bed.res, bed.bpffs, "claw")
    loader.attach_ack_flags(bed.res, bed.bpffs, bed.server, bed.server_dev)
    peers, flows, ackflags = bed.maps()
    flow = BulkFlow(bed.server, bed.ue, cc.name)
    try:
        wait_for(lambda: flow_stats(flows, flow.key).acks > 50, "ACKs")
        mss = flow_stats(flows, flow.key).mss_bytes
        w_pkts = 40
        set_peer(peers, w_pkts * mss, mode, 1)
        if mode == Mode.CELLULAR:
            wait_for(lambda: flow.info().cwnd == w_pkts, "cwnd = W_claw")
        wait_for(lambda: ackflags.lookup(flow.key.pack()) is not None, "the ingress program to see ACKs")
        far = time.monotonic_ns() + 3600 * 10**9  # "flagged just now", for the whole phase
        drop_randomly(bed.ue, 0.01)

        def phase(flags: AckFlags, counter: str, events: int = 3) -> tuple[FlowStats, FlowStats, list[FlowStats]]:
            ackflags.update(flow.key.pack(), flags.pack())
            start = flow_stats(flows, flow.key)
            seen: list[FlowStats] = []

            def enough() -> bool:
                seen.append(flow_stats(flows, flow.key))
                return getattr(seen[-1], counter) - getattr(start, counter) >= events

            wait_for(enough, f"{events} loss events counted as {counter}")
            return start, seen[-1], seen

        # Wireless: every ACK of the phase carries 0x02 (as the UE's egress program sets it).
        start, end, seen = phase(AckFlags(0, far, 0, 0, 0, 0), "loss_wireless")
        assert (end.loss_overflow, end.loss_unflagged) == (start.loss_overflow, start.loss_unflagged)
        assert end.last_loss_cause == LossCause.WIRELESS
        assert end.loss_cwnd_after_pkts == end.loss_cwnd_before_pkts
        if end.loss_rto == start.loss_rto:
            assert end.loss_w_cubic_after_pkts == end.loss_w_cubic_before_pkts
            assert not any(s.flags & FlowFlag.CAP_ACTIVE for s in seen)
            if mode == Mode.CELLULAR:
                assert end.loss_cwnd_before_pkts == w_pkts
                assert {s.cwnd_pkts for s in seen if s.applied == Applied.CELLULAR} == {w_pkts}

        # No flag (congestion elsewhere), then BS buffer overflow: beta = 0.7 on both windows.
        for flags, counter, cause in [(AckFlags(0, 0, 0, 0, 0, 0), "loss_unflagged", LossCause.UNFLAGGED),
                                      (AckFlags(0, 0, far, 0, 0, 0), "loss_overflow", LossCause.OVERFLOW)]:
            start, end, seen = phase(flags, counter)
            assert end.loss_wireless == start.loss_wireless
            assert end.last_loss_cause == cause
            assert end.loss_cwnd_after_pkts == reduced(end.loss_cwnd_before_pkts)
            if end.loss_rto == start.loss_rto:
                assert end.loss_w_cubic_after_pkts == reduced(end.loss_w_cubic_before_pkts)
    finally:
        flow.close()
        for m in (peers, flows, ackflags):
            m.close()


# --- the ACK flags, end to end ------------------------------------------------------------------

ACK_MARK_OBJECT = "ack_mark_egress.bpf.o"


@pytest.mark.skipif(not (Path(__file__).parent.parent / "claw" / "bpf" / "ack_mark_egress.bpf.c").exists(),
                    reason="the client's egress marker is not in the tree")
def test_flags_set_by_the_ue_egress_program_reach_the_cc_and_are_cleared(bed: Bed) -> None:
    cc = loader.register_cc(bed.res, bed.bpffs, "claw")
    loader.attach_ack_flags(bed.res, bed.bpffs, bed.server, bed.server_dev)
    # The client's marker, loaded here directly: its config map says "a wireless loss just
    # happened" for the whole test, so it flags every ACK.
    from clawbed.claw.server import bpfmap
    from clawbed.claw.server.libbpf import BpfObject

    marker_pin = bed.bpffs / "test_ack_mark"
    cfg_pin = bed.bpffs / "test_ack_mark_cfg"
    with BpfObject(bpfobjects.objects_dir() / ACK_MARK_OBJECT) as obj:
        obj.load()
        bpfmap.obj_pin(obj.prog_fd("ack_mark_egress"), marker_pin)
        bpfmap.obj_pin(obj.map_fd("ack_mark_cfg"), cfg_pin)
    bed.res.callback(os.unlink, marker_pin)
    bed.res.callback(os.unlink, cfg_pin)
    tc = bpfobjects.TcProgram(bed.ue.name, bed.ue_dev, marker_pin, direction="egress", pref=loader.TC_PREF)
    bed.res.callback(tc.close)
    with BpfMap.open_pinned(cfg_pin) as cfg:
        far = time.monotonic_ns() + 3600 * 10**9
        cfg.update(struct.pack("=I", 0), struct.pack("=QQQII", far, 0, 10**9, 14, 0))

    csum_errors_before = _tcp_csum_errors(bed.server)
    peers, flows, ackflags = bed.maps()
    flow = BulkFlow(bed.server, bed.ue, cc.name)
    try:
        mss = 1448
        set_peer(peers, 40 * mss, Mode.CELLULAR, 1)
        wait_for(lambda: ackflags.lookup(flow.key.pack()) is not None
                 and AckFlags.unpack(ackflags.lookup(flow.key.pack())).wireless_acks > 100, "flagged ACKs")
        rec = AckFlags.unpack(ackflags.lookup(flow.key.pack()))
        assert rec.overflow_acks == 0
        assert rec.wireless_acks >= rec.acks - 5  # all but the handshake's and those before the marker
        acked = flow.info().bytes_acked
        wait_for(lambda: flow.info().bytes_acked > acked + 10**6, "the flow to keep going")
        # The bits were cleared with a correct checksum: the server's TCP dropped nothing.
        assert _tcp_csum_errors(bed.server) == csum_errors_before
        drop_randomly(bed.ue, 0.01)
        wait_for(lambda: flow_stats(flows, flow.key).loss_wireless >= 3, "wireless losses")
        st = flow_stats(flows, flow.key)
        assert st.loss_unflagged == 0 and st.loss_overflow == 0
    finally:
        flow.close()
        for m in (peers, flows, ackflags):
            m.close()


def _tcp_csum_errors(ns: Namespace) -> int:
    lines = [line.split() for line in ns.run(["cat", "/proc/net/snmp"]).stdout.splitlines() if line.startswith("Tcp:")]
    header, values = lines[0], lines[1]
    return int(values[header.index("InCsumErrors")])


# --- the agent ----------------------------------------------------------------------------------

def test_agent_accepts_feedback_and_refuses_forged_replayed_and_out_of_range(bed: Bed) -> None:
    cc = loader.register_cc(bed.res, bed.bpffs, "claw")
    key_file = bed.run_dir / "key"
    key_file.write_bytes(KEY)
    stats_file = bed.run_dir / "agent.json"
    agent = bed.res.process(
        bed.server.command([sys.executable, "-m", "clawbed.claw.server.agent", "--listen", f"{SERVER_ADDR}:7070",
                            "--bpffs", str(bed.bpffs.path), "--key-file", str(key_file), "--ue", f"0={UE_ADDR}",
                            "--stats-file", str(stats_file), "--log-interval-s", "0.2"]),
        name="claw-agent", log_path=bed.run_dir / "agent.log")
    wait_for(stats_file.exists, "the agent to be ready")
    peers, flows, _ = bed.maps()
    flow = BulkFlow(bed.server, bed.ue, cc.name)
    udp = socket_in_namespace(bed.ue.name, socket.AF_INET, socket.SOCK_DGRAM)
    udp.settimeout(2.0)
    udp.connect((SERVER_ADDR, 7070))
    try:
        wait_for(lambda: flow_stats(flows, flow.key).acks > 50, "ACKs")

        def report(seq: int, w: int, *, key: bytes = KEY, window_ms: int = 100, ue_id: int = 0) -> bytes:
            return Feedback(ue_id=ue_id, seq=seq, diag_time_ms=1000 + seq, w_claw_bytes=w, load=0.3, n_f_rbs=100,
                            n_t_rbs=1000, window_ms=window_ms, saturated=False, wireline=False).encode(key)

        def peer() -> Peer | None:
            raw = peers.lookup(addr_key(UE_ADDR))
            return None if raw is None else Peer.unpack(raw)

        good = report(10, 30 * 1448)
        udp.send(good)
        echo = decode_echo(udp.recv(100), KEY)
        accepted = peer()
        assert accepted is not None and accepted.seq == 10 and accepted.w_claw_bytes == 30 * 1448
        assert accepted.mode == Mode.CELLULAR
        assert echo.seq == 10 and echo.ue_id == 0
        assert echo.srtt_us > 0 and echo.cwnd_packets > 0

        refused = [report(11, 99_999, key=b"k" * 32),  # forged: wrong key
                   good,                               # replayed
                   report(9, 99_999),                  # older sequence number
                   report(12, 99_999, window_ms=0),    # out of range
                   good[:-1]]                          # truncated
        for data in refused:
            udp.send(data)
        udp.settimeout(0.3)
        with pytest.raises(socket.timeout):
            udp.recv(100)
        assert peer() == accepted  # nothing changed, not even the time of the last report
    finally:
        udp.close()
        flow.close()
        for m in (peers, flows):
            m.close()
    agent.close()
    final = json.loads(stats_file.read_text())
    assert final["accepted"] == 1
    assert final["rejected"] == {"bad-mac": 1, "replayed": 2, "out-of-range": 1, "malformed": 1}


def test_agent_refuses_a_bound_ue_id_from_another_address(bed: Bed) -> None:
    loader.register_cc(bed.res, bed.bpffs, "claw")
    key_file = bed.run_dir / "key"
    key_file.write_bytes(KEY)
    stats_file = bed.run_dir / "agent.json"
    agent = bed.res.process(
        bed.server.command([sys.executable, "-m", "clawbed.claw.server.agent", "--listen", f"{SERVER_ADDR}:7070",
                            "--bpffs", str(bed.bpffs.path), "--key-file", str(key_file), "--ue", "0=10.203.0.99",
                            "--stats-file", str(stats_file)]),
        name="claw-agent", log_path=bed.run_dir / "agent.log")
    wait_for(stats_file.exists, "the agent to be ready")
    udp = socket_in_namespace(bed.ue.name, socket.AF_INET, socket.SOCK_DGRAM)
    udp.settimeout(0.5)
    udp.connect((SERVER_ADDR, 7070))
    try:
        udp.send(Feedback(0, 1, 1, 10_000, 0.1, 1, 10, 100, False, False).encode(KEY))
        with pytest.raises(socket.timeout):
            udp.recv(100)
        with loader.open_map(bed.bpffs.path, PEERS_MAP) as peers:
            assert peers.lookup(addr_key(UE_ADDR)) is None
    finally:
        udp.close()
    agent.close()
    assert json.loads(stats_file.read_text())["rejected"] == {"wrong-source": 1}


# --- schemes ------------------------------------------------------------------------------------

def _default_cc(ns: Namespace) -> str:
    return ns.run(["cat", "/proc/sys/net/ipv4/tcp_congestion_control"]).stdout.strip()


def _sysctls(ns: Namespace) -> dict[str, str]:
    from clawbed.claw.server.sysctls import SERVER_SYSCTLS, read_sysctl
    return {k: read_sysctl(ns, k) for k in SERVER_SYSCTLS}


@pytest.mark.parametrize("name", ["claw", "cqic"])
def test_claw_scheme_sets_up_the_server_and_removes_exactly_what_it_made(bed: Bed, name: str) -> None:
    ctx = SchemeContext(bed.res, bed.run_dir, bed.server, SERVER_ADDR, bed.server_dev,
                        [UeEndpoint(bed.ue, UE_ADDR, 0, bed.ue_dev)], agent_port=7071)
    default_before, sysctls_before = _default_cc(bed.server), _sysctls(bed.server)
    scheme = get_scheme(name)()
    scheme.setup(ctx)
    try:
        # Registered under the run's own name; the scheme knows it.
        assert scheme.server_cc == f"{name}_{bed.res.run_id}"
        assert _default_cc(bed.server) == scheme.server_cc
        assert _sysctls(bed.server)["net.ipv4.tcp_no_metrics_save"] == "1"
        assert "bpf" in bed.server.run(["tc", "filter", "show", "dev", bed.server_dev, "ingress"]).stdout
        assert scheme.agent.alive()
        flow = BulkFlow(bed.server, bed.ue, None)  # the namespace default: no setsockopt
        try:
            ss = bed.server.run(["ss", "-tin", "sport", f"= :{PORT}"]).stdout
            assert f"{scheme.server_cc} wscale" in ss, ss
            udp = socket_in_namespace(bed.ue.name, socket.AF_INET, socket.SOCK_DGRAM)
            udp.settimeout(5.0)
            udp.connect((SERVER_ADDR, 7071))
            key = scheme.key_path.read_bytes()
            udp.send(Feedback(0, 1, 1, 17 * 1448, 0.2, 1, 10, 100, False, False).encode(key))
            echo = decode_echo(udp.recv(100), key)
            udp.close()
            assert echo.seq == 1 and echo.cwnd_packets > 0
            wait_for(lambda: flow.info().cwnd == 17, "cwnd = W_claw from the agent")
        finally:
            flow.close()
    finally:
        scheme.teardown()
    scheme.teardown()  # idempotent
    assert _default_cc(bed.server) == default_before
    assert _sysctls(bed.server) == sysctls_before
    assert scheme.server_cc not in loader.available_congestion_controls()
    assert "bpf" not in bed.server.run(["tc", "filter", "show", "dev", bed.server_dev, "ingress"]).stdout
    assert not scheme.agent.alive()
    scheme_bpffs = bed.run_dir / bed.res.name("bp" if name == "claw" else "bq")
    assert str(scheme_bpffs) not in Path("/proc/mounts").read_text() and not scheme_bpffs.exists()
    final = json.loads((bed.run_dir / f"{name}-agent.json").read_text())
    assert final["accepted"] == 1 and final["ready"] is False


@pytest.mark.parametrize("name", ["cubic", "reno", "bbr"])
def test_kernel_schemes_set_and_restore_the_default(bed: Bed, name: str) -> None:
    ctx = SchemeContext(bed.res, bed.run_dir, bed.server, SERVER_ADDR, bed.server_dev,
                        [UeEndpoint(bed.ue, UE_ADDR, 0, bed.ue_dev)])
    before = _default_cc(bed.server)
    sysctls_before = _sysctls(bed.server)
    scheme = get_scheme(name)()
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().split()
    if name not in allowed:
        # The machine restricts it: the scheme says so, and leaves nothing changed.
        with pytest.raises(ResourceError, match=f"{name} cannot be the default congestion control"):
            scheme.setup(ctx)
        assert _default_cc(bed.server) == before and _sysctls(bed.server) == sysctls_before
        ctx.namespace_default = False
        scheme = get_scheme(name)()
        scheme.setup(ctx)
        flow = BulkFlow(bed.server, bed.ue, name)  # per socket instead
        try:
            assert f"{name} wscale" in bed.server.run(["ss", "-tin", "sport", f"= :{PORT}"]).stdout
        finally:
            flow.close()
        scheme.teardown()
        assert _sysctls(bed.server) == sysctls_before
        return
    scheme.setup(ctx)
    assert _default_cc(bed.server) == name
    flow = BulkFlow(bed.server, bed.ue, None)
    try:
        assert f"{name} wscale" in bed.server.run(["ss", "-tin", "sport", f"= :{PORT}"]).stdout
    finally:
        flow.close()
    scheme.teardown()
    assert _default_cc(bed.server) == before


# --- end to end with the emulator and the CLAW client --------------------------------------------

def _emulator_ready() -> bool:
    try:
        from clawbed.emulator.process import BINARY
    except ImportError:
        return False
    client = Path(__file__).parent.parent / "claw" / "client" / "daemon.py"
    return BINARY.exists() and client.exists()


@pytest.mark.skipif(not _emulator_ready(), reason="needs the built emulator (cargo build --release) and the CLAW client")
def test_end_to_end_in_an_emulated_cell_cwnd_follows_the_clients_w_claw(tmp_path: Path) -> None:
    """An emulated busy cell, the claw scheme (CC, ACK-flag reader, agent) and the CLAW
    client on the UE, one download: the agent accepts the client's reports, and whenever the
    CC applied a report in cellular mode, cwnd = ceil(W_claw / MSS). The download is paced
    below the cell's capacity: a backlogged UE takes every RB the other users leave, so the
    client reports a saturated cell (max(W_cubic', W_claw), not W_claw) in most windows, and
    a bulk download once left only 17 samples in cellular mode in 8 s."""
    from clawbed.emulator.process import EmulatedCell
    from clawbed.paths import REPO_ROOT

    trace = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
    with EmulatedCell(1, tmp_path, ue={"trace": str(trace)}, mode="cell") as cell:
        ue = cell.topo.ues[0]
        server = str(cell.topo.server_address)
        ctx = SchemeContext(cell.res, tmp_path, cell.topo.core.ns, server, cell.topo.core.tun,
                            [UeEndpoint(ue.ns, str(ue.address), 0, ue.tun, diag_port=cell.emulator.diag_port(0))])
        ue.ns.sysctl("net.ipv4.tcp_rmem", "4096 1048576 16777216")
        scheme = get_scheme("claw")()
        scheme.setup(ctx)
        scheme.start_clients(ctx)
        listener = socket_in_namespace(cell.topo.core.name)
        listener.bind((server, PORT))
        listener.listen(1)
        client = socket_in_namespace(ue.ns.name)
        client.connect((server, PORT))
        conn, _ = listener.accept()  # the namespace default: claw
        stop = threading.Event()

        def sink() -> None:
            while not stop.is_set() and client.recv(1 << 20):
                pass

        def pump() -> None:
            chunk = b"\0" * PACED_CHUNK_BYTES
            with contextlib.suppress(OSError):
                while not stop.is_set():
                    conn.send(chunk)
                    stop.wait(PACED_PERIOD_S)

        threads = [threading.Thread(target=sink, daemon=True), threading.Thread(target=pump, daemon=True)]
        for t in threads:
            t.start()
        key = FlowKey(str(ue.address), server, client.getsockname()[1], PORT).pack()
        cellular, matched, seqs = 0, 0, set()
        with loader.open_map(scheme.bpffs.path, PEERS_MAP) as peers, \
                loader.open_map(scheme.bpffs.path, FLOWS_MAP) as flows:
            deadline = time.monotonic() + 8.0
            while time.monotonic() < deadline:  # sampling for a while, not a timing assertion
                raw_st, raw_peer = flows.lookup(key), peers.lookup(addr_key(str(ue.address)))
                if raw_st and raw_peer:
                    st, peer = FlowStats.unpack(raw_st), Peer.unpack(raw_peer)
                    seqs.add(st.peer_seq)
                    if (st.applied == Applied.CELLULAR and st.peer_seq == peer.seq
                            and not st.flags & FlowFlag.CAP_ACTIVE):
                        cellular += 1
                        matched += st.cwnd_pkts == math.ceil(peer.w_claw_bytes / st.mss_bytes) == st.w_claw_pkts
                time.sleep(0.005)
        stop.set()
        for s in (conn, client, listener):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        scheme.teardown()
    report = json.loads((tmp_path / "claw-agent.json").read_text())
    assert report["accepted"] >= 20 and report["rejected_total"] == 0
    assert len(seqs - {0}) >= 10  # the CC saw many reports
    print(f"cellular-mode samples {cellular}, cwnd = W_claw in {matched}")
    assert cellular >= 20, "the client never asked for cellular mode"
    assert matched >= 0.95 * cellular  # allowing the odd torn read of a record being written


def test_a_killed_runs_claw_objects_are_removed_from_its_ledger(tmp_path: Path) -> None:
    """SIGKILL after registering, attaching and setting a default: the ledger is enough to
    remove every CLAW object (through the loader's registered cleanup, newest first), then
    the namespaces."""
    from clawbed.netns import cleanup_from_ledger

    rid = new_run_id()
    script = f"""
import os, signal
from pathlib import Path
from clawbed.netns import Endpoint, Resources
from clawbed.claw.server import loader
from clawbed.claw import bpfobjects
res = Resources({rid!r}, Path({str(tmp_path / 'ledger.jsonl')!r})).__enter__()
s, u = res.namespace("s"), res.namespace("u")
res.veth(Endpoint(s, res.name("s0"), "10.203.0.1"), Endpoint(u, res.name("u0"), "10.203.0.2"))
b = bpfobjects.mount_bpffs(res, Path({str(tmp_path)!r}))
cc = loader.register_cc(res, b, "claw")
cc.set_namespace_default(s)
loader.attach_ack_flags(res, b, s, res.name("s0"))
print("ready", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    if "ready" not in proc.stdout:
        # The child died before its SIGKILL (its error is below): its ledger still removes
        # what it made, so the failure leaves nothing behind.
        cleanup_from_ledger(tmp_path / "ledger.jsonl")
        pytest.fail(proc.stderr)
    name = loader.cc_name("claw", rid)
    assert name in loader.available_congestion_controls()
    ours = ledger_struct_ops_ids(tmp_path / "ledger.jsonl")
    removed = cleanup_from_ledger(tmp_path / "ledger.jsonl")
    kinds = " | ".join(removed)
    for what in ("default congestion control", "tc ingress filter", f"struct_ops {name}", "BPF pin", "bpffs",
                 "namespace"):
        assert what in kinds, kinds
    assert name not in loader.available_congestion_controls()
    wait_for(lambda: not ours & struct_ops_ids(), "the struct_ops map to be freed", 10)
    assert str(tmp_path) not in Path("/proc/mounts").read_text()
