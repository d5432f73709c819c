"""Both ends' TCP stacks (``clawbed/tcpstack.py``, docs/tcp-stacks.md): the UE's sysctls and
offloads, and the stack eras of the server and the UE.

- settings (no kernel): every era sets the same knobs, each cited; bad values name the flag or
  the spec key; ``ue_offloads gro=off`` also turns the emulator's merged writes off;
- the real data plane (root), a real emulator in rate mode (20 Mbit/s, no cell randomness), the
  kernel's own counters of each namespace (``/proc/net/netstat``):
  * ``current`` is this kernel as a new namespace has it, and applying an era then restoring it
    leaves the namespace as it was (sysctls, routes, offloads);
  * server: a tail loss (the response's last segment dropped once at the UE's input) is repaired
    by a tail-loss probe on ``current`` and ``linux-4.4`` (TcpExtTCPLossProbes) and by a
    retransmission timeout on ``linux-3.0`` (TcpExtTCPTimeouts), which had no TLP;
  * UE: during a bulk download with 1 % of the segments dropped at the UE's input (so
    out-of-order data keeps arriving), ``current`` compresses its SACKs (TcpExtTCPAckCompressed
    > 0) and ``android-3.10`` sends every SACK (none compressed);
  * ``clawbed emu run --ue-stack android-3.10`` sets it inside the UE and says so.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from bulkflow import bulk_download

from clawbed import tcpstack
from clawbed.claw.server.sysctls import apply_server_sysctls, restore_sysctls
from clawbed.emulator.process import EmulatedCell
from clawbed.errors import InputError
from clawbed.netns import Namespace, socket_in_namespace
from clawbed.paths import REPO_ROOT
from clawbed.replay import settings

BUSY_CELL = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
CLAWBED = str(Path(sys.executable).parent / "clawbed")
#: The emulated link: a fixed rate, so nothing but the stack differs between runs.
RATE = "20mbit"


# --- settings ------------------------------------------------------------------------------------

def test_every_era_sets_the_same_knobs_each_cited() -> None:
    assert {"current", "linux-4.4", "android-3.10", "linux-3.0"} <= set(tcpstack.ERAS)
    current = tcpstack.ERAS["current"]
    for era in tcpstack.ERAS.values():
        # The same keys: switching eras never leaves a value an earlier run set.
        assert set(era.sysctls) == set(current.sysctls), era.name
        assert set(era.cubic) == set(current.cubic), era.name
        assert "initcwnd" in era.route
        for knob in [*era.sysctls.values(), *era.route.values(), *era.cubic.values()]:
            assert knob.since.strip(), f"{era.name}: a knob without its citation"
        assert era.describe()["name"] == era.name
        if era.name != "current":
            assert era.cannot, f"{era.name}: say what no knob brings back"
    # The differences the data-plane tests rely on.
    assert tcpstack.ERAS["linux-3.0"].sysctls["net.ipv4.tcp_early_retrans"].value == "0"
    assert tcpstack.ERAS["android-3.10"].sysctls["net.ipv4.tcp_comp_sack_nr"].value == "0"
    assert current.sysctls["net.ipv4.tcp_comp_sack_nr"].value == "44"
    with pytest.raises(ValueError, match="registered twice"):
        tcpstack.register(current)
    # The UE's congestion control is set, never the host's.
    assert tcpstack.ue_sysctls_for(current)["net.ipv4.tcp_congestion_control"] == "cubic"
    assert tcpstack.ue_sysctls_for(current, {"net.ipv4.tcp_comp_sack_nr": "3"})["net.ipv4.tcp_comp_sack_nr"] == "3"
    assert tcpstack.server_overrides("linux-3.0", {"net.ipv4.tcp_frto": "0"})["net.ipv4.tcp_frto"] == "0"


def test_bad_values_name_the_flag_or_key(tmp_path: Path) -> None:
    from clawbed.orchestrator.spec import SpecError, load_spec
    from clawbed.replay.run import ReplayConfig

    def config(**kw: object) -> ReplayConfig:
        return ReplayConfig(trace=BUSY_CELL, page="set-01", schemes=["cubic"], runs=1, **kw)  # type: ignore[arg-type]

    config(server_stack="linux-4.4", ue_stack="android-3.10", ue_sysctls={"net.ipv4.tcp_sack": "1"},
           ue_offloads={"gro": "off"}).check()
    for kw, message in [
        ({"ue_sysctls": {"kernel.panic": "1"}}, r"--ue-sysctls: kernel.panic=1: a net.ipv4.\* or net.core.\* key"),
        ({"ue_offloads": {"gro": "maybe"}}, r"--ue-offloads: gro=maybe: on or off expected"),
        ({"ue_offloads": {"tso2": "off"}}, r"--ue-offloads: tso2=off: not an offload; one of gro, gso, tso, lro"),
        ({"server_stack": "linux-2.2"}, r"--server-stack: 'linux-2.2': one of current, linux-4.4"),
        ({"ue_stack": "ios"}, r"--ue-stack: 'ios': one of current"),
    ]:
        with pytest.raises(InputError, match=message):
            config(**kw).check()
    with pytest.raises(InputError, match=r"--ue-stack 'x': one of current"):
        tcpstack.get_era("x", "--ue-stack")

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"suite": "st", "matrix": {"traces": ["busy-cell"], "pages": ["set-01"],
                                                               "schemes": ["cubic"],
                                                               "conditions": [{"ue_stack": "android-3.10",
                                                                               "ue_offloads": {"gro": False}}]}}))
    (sc,) = load_spec(path).scenarios()
    assert sc.condition.ue_stack == "android-3.10" and sc.condition.ue_offloads == {"gro": "off"}
    path.write_text(yaml.safe_dump({"suite": "st", "matrix": {"traces": ["busy-cell"], "pages": ["set-01"],
                                                               "schemes": ["cubic"],
                                                               "conditions": [{"server_stack": "linux-9"}]}}))
    with pytest.raises(SpecError, match=r"server_stack.*'linux-9': one of current"):
        load_spec(path)


def test_gro_off_also_stops_the_emulators_merged_writes() -> None:
    assert settings.emulator_fields({"ue_offloads": {"gro": "off"}})[0]["tun_offload"] is False
    assert "tun_offload" not in settings.emulator_fields({"ue_offloads": {"gro": "on", "tso": "off"}})[0]
    assert "tun_offload" not in settings.emulator_fields({})[0]


def test_module_parameters_are_written_when_they_differ_and_put_back(tmp_path: Path) -> None:
    """The kernel-wide parameters' logic, on a copy of the parameter files (writing the real ones to
    other values would change every other run's Cubic on this machine)."""
    params = tmp_path / "tcp_cubic" / "parameters"
    params.mkdir(parents=True)
    for name, knob in tcpstack.CURRENT.cubic.items():
        (params / name).write_text(knob.value + "\n")
    (params / "hystart_detect").write_text("2\n")  # someone's value
    applied = tcpstack.AppliedStack("server", "current", "cbtest", None)
    tcpstack._apply_module_params(tcpstack.CURRENT, applied, tmp_path)
    assert (params / "hystart_detect").read_text() == "3"
    assert applied.module_params["tcp_cubic/hystart_detect"] == {"value": "3", "previous": "2", "written": "yes"}
    assert applied.module_params["tcp_cubic/beta"]["written"] == "no"
    assert "kernel-wide tcp_cubic/hystart_detect=3 (was 2)" in applied.summary()
    applied.restore()
    assert (params / "hystart_detect").read_text() == "2"
    # Changed by another run meanwhile: its value stays.
    tcpstack._apply_module_params(tcpstack.CURRENT, applied, tmp_path)
    (params / "hystart_detect").write_text("1")
    applied.restore()
    assert (params / "hystart_detect").read_text() == "1"


# --- the real data plane --------------------------------------------------------------------------

def _counters(ns: Namespace) -> dict[str, int]:
    """The namespace's TCP counters as nstat names them (``TcpExtTCPLossProbes``, ``TcpOutSegs``)."""
    lines = ns.run(["cat", "/proc/net/netstat", "/proc/net/snmp"]).stdout.splitlines()
    counters: dict[str, int] = {}
    for head, values in zip(lines[::2], lines[1::2]):
        proto, _, keys = head.partition(":")
        for key, value in zip(keys.split(), values.partition(":")[2].split()):
            counters[proto + key] = int(value)
    return counters


def _delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


@pytest.mark.root
def test_current_is_the_kernel_as_it_is_and_an_era_is_undone(tmp_path: Path) -> None:
    with EmulatedCell(1, tmp_path / "emu", ue={"rate": RATE}, mode="rate") as cell:
        ue, core = cell.topo.ues[0], cell.topo.core
        era_keys = list(tcpstack.CURRENT.sysctls)
        # A new namespace of this kernel has current's values (bar the congestion control, the host's).
        assert tcpstack.read_sysctls(ue.ns, era_keys) == tcpstack.CURRENT.sysctl_values()
        for name, knob in tcpstack.CURRENT.cubic.items():
            assert (tcpstack.MODULE_PARAMS_DIR / "tcp_cubic" / "parameters" / name).read_text().strip() == knob.value
        before_sysctls = tcpstack.read_sysctls(ue.ns, list(tcpstack.ue_sysctls_for(tcpstack.CURRENT)))
        before_routes = ue.run(["ip", "-4", "-o", "route", "show"]).stdout
        applied = tcpstack.set_both_ends(core.ns, core.tun, [(ue.ns, ue.tun)], server_stack="linux-4.4",
                                         ue_stack="android-3.10", ue_sysctls={"net.ipv4.tcp_frto": "0"},
                                         ue_offloads={"gro": "off"})
        server, ue_side = applied
        assert tcpstack.read_sysctls(ue.ns, ["net.ipv4.tcp_comp_sack_nr", "net.ipv4.tcp_frto",
                                             "net.ipv4.tcp_congestion_control"]) == {
            "net.ipv4.tcp_comp_sack_nr": "0", "net.ipv4.tcp_frto": "0", "net.ipv4.tcp_congestion_control": "cubic"}
        assert "initrwnd 60" in ue.run(["ip", "-4", "-o", "route", "show"]).stdout
        assert "initrwnd 20" in core.run(["ip", "-4", "-o", "route", "show"]).stdout
        assert "generic-receive-offload: off" in ue.run(["ethtool", "-k", ue.tun]).stdout
        assert ue_side.describe()["sysctls"]["net.ipv4.tcp_comp_sack_nr"] == {"value": "0", "previous": "44"}
        assert server.per_load_sysctls["net.ipv4.tcp_recovery"] == "1"
        assert "ue stack android-3.10" in ue_side.summary() and "gro off" in ue_side.summary()
        for one in reversed(applied):
            one.restore()
        assert tcpstack.read_sysctls(ue.ns, list(before_sysctls)) == before_sysctls
        assert ue.run(["ip", "-4", "-o", "route", "show"]).stdout == before_routes
        assert "generic-receive-offload: on" in ue.run(["ethtool", "-k", ue.tun]).stdout
        # An offload the device cannot change is refused by name, and nothing stays set.
        with pytest.raises(InputError, match=r"offload lro=on: .* has lro fixed off"):
            tcpstack.set_both_ends(core.ns, core.tun, [(ue.ns, ue.tun)], ue_stack="linux-3.0",
                                   ue_offloads={"lro": "on"})
        assert tcpstack.read_sysctls(ue.ns, list(before_sysctls)) == before_sysctls


#: The server test's response: 20 full segments and a last one of TAIL_BYTES, whose IP packet
#: (20 B IP + 32 B TCP with timestamps + the tail) no other segment of the flow matches.
TAIL_BYTES = 333
RESPONSE_BYTES = 20 * 1448 + TAIL_BYTES


def _tail_loss(tmp_path: Path, era_name: str, port: int) -> tuple[dict[str, int], float]:
    """One response from the server (the core namespace, ``era_name``'s stack) to the UE whose
    last segment is dropped once at the UE's input (after the server sent it: a real loss, not
    a local refusal the sender would retry at once); the server namespace's counter changes
    and the time to the last byte, s."""
    # No TUN offload: the kernel hands the cell one segment per packet, as the drop rule expects.
    with EmulatedCell(1, tmp_path / era_name, ue={"rate": RATE}, mode="rate", tun_offload=False) as cell:
        ue, core = cell.topo.ues[0], cell.topo.core
        applied = tcpstack.set_both_ends(core.ns, core.tun, [(ue.ns, ue.tun)], server_stack=era_name)
        # The era's sysctls as a scheme sets them at each load (over the schemes' common ones).
        previous = apply_server_sysctls(core.ns, tcpstack.server_overrides(era_name))
        try:
            core.run(["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=cubic"])
            # Drop the first packet of the tail's length only (nth: the first match, then none).
            ue.run(["iptables", "-A", "INPUT", "-p", "tcp", "--sport", str(port), "-m", "length", "--length",
                    str(TAIL_BYTES + 52), "-m", "statistic", "--mode", "nth", "--every", "1000000000",
                    "--packet", "0", "-j", "DROP"])
            listener = socket_in_namespace(core.name)
            client = socket_in_namespace(ue.name)
            try:
                listener.bind((str(cell.topo.server_address), port))
                listener.listen(1)
                client.connect((str(cell.topo.server_address), port))
                conn, _ = listener.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                before = _counters(core.ns)
                t0 = time.monotonic()
                conn.sendall(b"r" * RESPONSE_BYTES)
                got = 0
                client.settimeout(20)
                while got < RESPONSE_BYTES:
                    chunk = client.recv(1 << 16)
                    assert chunk, "the connection closed early"
                    got += len(chunk)
                elapsed_s = time.monotonic() - t0
                time.sleep(0.2)  # the last ACK's counters
                after = _counters(core.ns)
                conn.close()
            finally:
                client.close()
                listener.close()
            dropped = ue.run(["iptables", "-L", "INPUT", "-v", "-n", "-x"]).stdout.splitlines()[-1].split()[0]
            assert dropped == "1", f"the rule dropped {dropped} packets, not the one tail"
        finally:
            restore_sysctls(core.ns, previous)
            for one in reversed(applied):
                one.restore()
    return _delta(before, after), elapsed_s


@pytest.mark.root
@pytest.mark.parametrize("era_name, port", [("current", 5411), ("linux-4.4", 5412), ("linux-3.0", 5413)])
def test_server_tail_loss_probe_or_timeout_by_era(tmp_path: Path, era_name: str, port: int) -> None:
    delta, elapsed_s = _tail_loss(tmp_path, era_name, port)
    print(f"{era_name}: last byte after {elapsed_s * 1000:.0f} ms; "
          f"{ {k: v for k, v in delta.items() if 'Probe' in k or 'Timeout' in k or 'Retrans' in k} }")
    assert delta.get("TcpRetransSegs", 0) >= 1
    if era_name == "linux-3.0":  # no TLP (3.10) nor early retransmit (3.5): the RTO repairs the tail
        assert delta.get("TcpExtTCPTimeouts", 0) >= 1
        assert delta.get("TcpExtTCPLossProbes", 0) == 0
    else:  # a probe at ~2 SRTT repairs it before any timeout
        assert delta.get("TcpExtTCPLossProbes", 0) >= 1
        assert delta.get("TcpExtTCPTimeouts", 0) == 0


def _acks_during_losses(tmp_path: Path, era_name: str, port: int) -> dict[str, int]:
    """The UE namespace's counter changes over a 6 s bulk download (Cubic at the server) with 1 %
    of its segments dropped at the UE's input, the UE on ``era_name``'s stack."""
    with EmulatedCell(1, tmp_path / era_name, ue={"rate": RATE}, mode="rate") as cell:
        ue, core = cell.topo.ues[0], cell.topo.core
        applied = tcpstack.set_both_ends(core.ns, core.tun, [(ue.ns, ue.tun)], ue_stack=era_name)
        try:
            core.run(["sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=cubic"])
            ue.run(["iptables", "-A", "INPUT", "-p", "tcp", "--sport", str(port), "-m", "statistic", "--mode",
                    "random", "--probability", "0.01", "-j", "DROP"])
            before = _counters(ue.ns)
            with bulk_download(core.name, ue.name, str(cell.topo.server_address), port):
                time.sleep(6.0)
            after = _counters(ue.ns)
        finally:
            for one in reversed(applied):
                one.restore()
    return _delta(before, after)


@pytest.mark.root
def test_ue_sack_compression_by_era(tmp_path: Path) -> None:
    today = _acks_during_losses(tmp_path, "current", 5414)
    old = _acks_during_losses(tmp_path, "android-3.10", 5415)
    ratio = {name: d["TcpOutSegs"] / d["TcpInSegs"] for name, d in (("current", today), ("android-3.10", old))}
    print(f"ACKs per data segment: {ratio}; SACKs compressed: current {today.get('TcpExtTCPAckCompressed', 0)}, "
          f"android-3.10 {old.get('TcpExtTCPAckCompressed', 0)}; out-of-order segments queued: "
          f"{today.get('TcpExtTCPOFOQueue', 0)}, {old.get('TcpExtTCPOFOQueue', 0)}")
    assert today.get("TcpExtTCPOFOQueue", 0) > 50 and old.get("TcpExtTCPOFOQueue", 0) > 50, "too few losses"
    # Each compressed SACK is one the UE did not send: today's phone holds them back while
    # out-of-order data arrives, the 2015 phone's kernel sends every one. (The ACKs per data
    # segment differ by how long the flow spent with holes: 0.54-0.92 vs 0.65-0.98 in five
    # runs at 1 % loss, too variable to judge; the counter is exact.)
    assert today.get("TcpExtTCPAckCompressed", 0) > 0
    assert old.get("TcpExtTCPAckCompressed", 0) == 0


@pytest.mark.root
def test_emu_run_sets_the_ue_stack_and_says_so(tmp_path: Path) -> None:
    env = dict(os.environ, CLAWBED_RUNS=str(tmp_path / "runs"))
    out = tmp_path / "run"
    result = subprocess.run([CLAWBED, "emu", "run", "--rate", RATE, "--out", str(out), "--ue-stack", "android-3.10",
                             "--ue-sysctl", "net.ipv4.tcp_frto=0", "--", "cat", "/proc/sys/net/ipv4/tcp_comp_sack_nr",
                             "/proc/sys/net/ipv4/tcp_frto", "/proc/sys/net/ipv4/tcp_congestion_control"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "0", "cubic"]
    assert "ue stack android-3.10" in result.stderr and "server stack current" in result.stderr
    recorded = yaml.safe_load((out / "tcp-stacks.json").read_text())
    assert [r["end"] for r in recorded] == ["server", "ue"]
    assert recorded[1]["sysctls"]["net.ipv4.tcp_comp_sack_nr"]["value"] == "0"


@pytest.mark.root
def test_a_replay_sets_both_ends_and_records_them(tmp_path: Path) -> None:
    """One load of the smallest page: the replay prints each end's stack and records it in its
    manifest (what was set, what was found), and the server era's sysctls go with the scheme's."""
    proc = subprocess.run([CLAWBED, "replay", "--trace", str(REPO_ROOT / "traces" / "samples" / "idle-cell.cbt"),
                           "--page", "set-01", "--schemes", "cubic", "--runs", "1", "--loader", "h2",
                           "--server-stack", "linux-3.0", "--ue-stack", "android-3.10",
                           "--ue-sysctl", "net.ipv4.tcp_frto=0", "--runs-dir", str(tmp_path), "--name", "stacks"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    said = proc.stdout + proc.stderr
    assert "server stack linux-3.0" in said and "ue stack android-3.10" in said
    manifest = yaml.safe_load((tmp_path / "stacks" / "manifest.json").read_text())
    stacks = manifest["tcp_stacks"]
    assert stacks["ue"]["era"] == "android-3.10"
    assert stacks["ue"]["sysctls"]["net.ipv4.tcp_comp_sack_nr"] == {"value": "0", "previous": "44"}
    assert stacks["ue"]["sysctls"]["net.ipv4.tcp_frto"]["value"] == "0"
    assert stacks["ue"]["sysctls"]["net.ipv4.tcp_congestion_control"]["value"] == "cubic"
    assert "initrwnd 60" in stacks["ue"]["routes"][0]["route"]
    assert stacks["server"]["per_load_sysctls"]["net.ipv4.tcp_early_retrans"] == "0"
    assert "initrwnd 20" in stacks["server"]["routes"][0]["route"]
    assert set(stacks["server"]["module_params"]) == {f"tcp_cubic/{n}" for n in tcpstack.CURRENT.cubic}
    assert manifest["config"]["server_stack"] == "linux-3.0"
    (record,) = [json.loads(line) for line in (tmp_path / "stacks" / "results.jsonl").read_text().splitlines()]
    assert record["ok"], record
