"""The wired side built with Mininet (``replay/network/topology.py``): hosts, links, the shaped
bottleneck shared by servers and cross traffic, names, errors, and nothing left behind after
a normal close, an error mid-build, SIGTERM or SIGKILL (needs root)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from pyroute2 import netns

from clawbed.netns import IFNAME_MAX, ResourceError, Resources, cleanup_from_ledger, new_run_id
from clawbed.replay.network.topology import Shaping, Topology, WiredNet

RATE = "10mbit"
#: Sends 1 MiB to argv[1]:argv[2] and returns once the sink has read it all and closed.
SEND_ONE_MIB = textwrap.dedent("""
    import socket, sys
    with socket.create_connection((sys.argv[1], int(sys.argv[2]))) as s:
        s.sendall(bytes(1 << 20))
        s.shutdown(socket.SHUT_WR)
        assert s.recv(1) == b""
""")


def needs_root(test: Callable) -> Callable:
    """A test that makes namespaces: marked ``root``, skipped unless run as root."""
    return pytest.mark.root(pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces)")(test))



def leftovers(run_id: str) -> list[str]:
    """The run's namespaces, root-namespace links and Mininet shells still there."""
    prefix = f"cb{run_id}"
    names = [n for n in netns.listnetns() if n.startswith(prefix)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names += [line.split(": ")[1].split("@")[0] for line in links.splitlines() if f": {prefix}" in line]
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes() if proc.name.isdigit() else b""
        except OSError:
            continue
        if f"mininet:{prefix}".encode() in cmdline:
            names.append(f"shell pid {proc.name}")
    return names


def ledger_pids_alive(ledger: Path) -> list[int]:
    """Processes the ledger records that still run (zombies count as gone)."""
    alive = []
    for line in ledger.read_text().splitlines():
        entry = json.loads(line)
        if entry["kind"] == "process":
            stat = Path(f"/proc/{entry['pid']}/stat")
            try:
                if stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append(entry["pid"])
            except OSError:
                pass
    return alive


def qdiscs(ns_run: object, device: str) -> list[dict]:
    return json.loads(ns_run(["tc", "-j", "qdisc", "show", "dev", device]).stdout)  # type: ignore[operator]


@needs_root
def test_a_topology_is_a_few_lines_and_every_name_is_the_runs(tmp_path: Path) -> None:
    rid = new_run_id()
    ledger = tmp_path / "ledger.jsonl"
    with Resources(rid, ledger) as res:
        net = Topology(res, n_ues=2)
        web = net.add_server(Shaping(RATE))
        x0, x1 = net.add_cross_host(), net.add_cross_host()
        cdn = net.add_server(role="cdn")
        wired = net.wired
        assert wired is not None and net.server is web and net.cross_hosts == [x0, x1]

        # Names: hosts, namespaces and every interface start with cb<rid> and fit 15 characters.
        assert sorted(wired.nodes) == sorted(f"cb{rid}{r}" for r in ("core", "gw", "srv", "x0", "x1", "cdn"))
        interfaces = [i.name for link in wired.links for i in (link.intf1, link.intf2)]
        assert interfaces[:2] == [f"cb{rid}gw-eth0", f"cb{rid}core-eth0"]
        assert all(n.startswith(f"cb{rid}") and len(n) <= IFNAME_MAX for n in interfaces + list(wired.nodes))
        assert (web.name, web.device, str(web.address)) == (f"cb{rid}srv", f"cb{rid}srv-eth0", "10.66.1.2")
        assert (x1.name, str(x1.address), str(cdn.address)) == (f"cb{rid}x1", "10.67.1.2", "10.66.2.2")

        # Every wired host reaches the core router through the gateway (two hops: TTL 63).
        for host in (web, x0, x1, cdn):
            out = host.run(["ping", "-c", "1", "-W", "2", str(wired.core_address)]).stdout
            assert "1 received" in out and "ttl=63" in out, (host.name, out)

        # The bottleneck: a TBF on both ends of the gateway-core link; access links unshaped.
        gw_run, core_run = wired.gateway.ns.run, net.core.ns.run
        for run, device in ((gw_run, f"cb{rid}gw-eth0"), (core_run, f"cb{rid}core-eth0")):
            [tbf] = qdiscs(run, device)
            assert tbf["kind"] == "tbf" and tbf["options"]["rate"] == 10_000_000 // 8, tbf
        assert [q["kind"] for q in qdiscs(gw_run, f"cb{rid}gw-eth1")] == ["noqueue"]
        shells = [node.pid for node in wired.nodes.values()]
        assert all(Path(f"/proc/{pid}").exists() for pid in shells)
    assert leftovers(rid) == []
    assert ledger_pids_alive(ledger) == []


@needs_root
def test_server_and_cross_traffic_cross_the_same_bottleneck(tmp_path: Path) -> None:
    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        net = Topology(res, n_ues=1)
        web = net.add_server(Shaping(RATE))
        x0 = net.add_cross_host()
        wired = net.wired
        assert wired is not None
        port = 47_211
        # The on/off cross traffic's sink: reads each connection to its end, then closes it.
        sink = res.process(net.core.command([sys.executable, "-m", "clawbed.replay.network.crosstraffic", "sink",
                                             "--address", str(wired.core_address), "--port", str(port)]),
                           name="sink")
        wait_listening(net.core.ns.run, port, sink)
        sent = {}
        for host in (web, x0):
            before = wired.bottleneck_counters()["sent_bytes"]
            host.run([sys.executable, "-c", SEND_ONE_MIB, str(wired.core_address), str(port)], timeout_s=120)
            sent[host.name] = wired.bottleneck_counters()["sent_bytes"] - before
        print(f"bytes through the bottleneck: {sent}")
        # 1 MiB of payload each, with its headers, through the gateway's TBF.
        assert all(b > 1 << 20 for b in sent.values()), sent
    assert leftovers(rid) == []


@needs_root
def test_an_htb_bottleneck_bounds_its_queue_by_rate_times_latency(tmp_path: Path) -> None:
    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        net = Topology(res, n_ues=1)
        shaping = Shaping(RATE, latency_ms=20.0, qdisc="htb")
        net.add_server(shaping)
        assert net.wired is not None
        found = {q["kind"]: q for q in qdiscs(net.wired.gateway.ns.run, f"cb{rid}gw-eth0")}
        assert set(found) == {"htb", "bfifo"}
        assert found["bfifo"]["options"]["limit"] == shaping.queue_bytes == 25_000
    assert leftovers(rid) == []


@needs_root
def test_an_error_mid_build_removes_what_was_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = WiredNet._address

    def failing(ns: object, device: str, address: object, network: object) -> None:
        # The cross host's namespace, shell and link exist by now; addressing its end fails.
        if device.endswith("x0-eth0"):
            raise ResourceError(f"injected: addressing {device} failed")
        real(ns, device, address, network)  # type: ignore[arg-type]

    monkeypatch.setattr(WiredNet, "_address", staticmethod(failing))
    rid = new_run_id()
    ledger = tmp_path / "ledger.jsonl"
    with pytest.raises(ResourceError, match="injected"):
        with Resources(rid, ledger) as res:
            net = Topology(res, n_ues=1)
            net.add_server(Shaping(RATE))
            net.add_cross_host()
    assert f"cb{rid}x0" in ledger.read_text()  # it was made, then removed
    assert leftovers(rid) == []
    assert ledger_pids_alive(ledger) == []


def _child(rid: str, ledger: Path) -> str:
    return textwrap.dedent(f"""
        import time
        from pathlib import Path
        from clawbed.netns import Resources
        from clawbed.replay.network.topology import Shaping, Topology
        with Resources({rid!r}, Path({str(ledger)!r})) as res:
            net = Topology(res, n_ues=1)
            net.add_server(Shaping({RATE!r}))
            net.add_cross_host()
            print("ready", flush=True)
            time.sleep(60)
    """)


@needs_root
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_terminated_or_killed_run_leaves_nothing_after_cleanup(tmp_path: Path, sig: signal.Signals) -> None:
    rid = new_run_id()
    ledger = tmp_path / "ledger.jsonl"
    child = subprocess.Popen([sys.executable, "-c", _child(rid, ledger)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    assert len([n for n in leftovers(rid) if n.startswith("shell")]) == 4  # core, gw, srv, x0
    child.send_signal(sig)
    child.wait(timeout=30)
    if sig == signal.SIGKILL:
        removed = cleanup_from_ledger(ledger)
        assert f"namespace cb{rid}gw" in removed and f"namespace cb{rid}core" in removed, removed
    assert leftovers(rid) == []
    assert ledger_pids_alive(ledger) == []


@needs_root
@pytest.mark.parametrize("build,message", [
    (lambda net: net.add_cross_host(), "add_server(Shaping(...)) first"),
    (lambda net: (net.add_server(), net.add_cross_host()), "add_server(Shaping(...)) first"),
    (lambda net: (net.add_server(Shaping(RATE)), net.add_server(Shaping("5mbit"), role="s1")),
     "the wired bottleneck is already"),
    (lambda net: net.add_server(role="toolong"), "server role 'toolong'"),
    (lambda net: net.add_server(role="gw"), "server role 'gw'"),
    (lambda net: (net.add_server(Shaping(RATE)), net.add_server()), "already has a host"),
])
def test_bad_topologies_are_refused_and_leave_nothing(tmp_path: Path, build: object, message: str) -> None:
    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        net = Topology(res, n_ues=1)
        with pytest.raises(ValueError, match=re.escape(message)):
            build(net)  # type: ignore[operator]
    assert leftovers(rid) == []


@pytest.mark.parametrize("kwargs,message", [
    ({"rate": "10mbps"}, "Shaping.rate: '10mbps' is not a rate"),
    ({"rate": "2gbit"}, "Shaping.rate: '2gbit' is above 1000mbit"),
    ({"rate": RATE, "latency_ms": 0}, "Shaping.latency_ms: must be positive"),
    ({"rate": RATE, "qdisc": "fq_codel"}, "Shaping.qdisc: 'fq_codel' must be one of tbf, htb"),
])
def test_bad_shaping_names_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        Shaping(**kwargs)


def wait_listening(run: object, port: int, proc: object) -> None:
    from clawbed.netns import wait_until

    def listening() -> bool:
        assert proc.alive(), "the sink exited"  # type: ignore[attr-defined]
        return bool(run(["ss", "-ltnH", f"sport = :{port}"]).stdout.strip())  # type: ignore[operator]

    wait_until(listening, 10.0, f"a listener on port {port}", interval_s=0.05)
