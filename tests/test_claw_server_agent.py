"""The server agent's logic with in-memory stand-ins for the two maps (the kernel tests in
test_claw_kernel.py run the same agent against the real ones): what is accepted and
written, what is refused and counted, and what the echo says."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from clawbed.claw.feedback import Feedback, decode_echo
from clawbed.claw.server.agent import ACTIVE_FLOW_NS, Agent, limited_by_claws_window, mode_of, parse_endpoint
from clawbed.claw.server.maps import FlowFlag, FlowKey, FlowStats, Mode, Peer, addr_key
from clawbed.errors import ClawbedError

KEY = b"0123456789abcdef0123456789abcdef"
UE = "10.65.0.1"
SRC = (UE, 40000)


class FakeMap:
    """A dict with the BpfMap calls the agent uses."""

    def __init__(self, fail: bool = False) -> None:
        self.data: dict[bytes, bytes] = {}
        self.fail = fail
        self.scans = 0

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        if self.fail:
            raise ClawbedError("updating a key in BPF map claw_peers: No space left on device")
        self.data[bytes(key)] = bytes(value)

    def lookup(self, key: bytes) -> bytes | None:
        return self.data.get(bytes(key))

    def keys(self) -> list[bytes]:
        self.scans += 1
        return list(self.data)


class Clock:
    def __init__(self, t: int = 10**12) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def report(seq: int, w: int = 50_000, *, key: bytes = KEY, ue_id: int = 0, saturated: bool = False,
           wireline: bool = False, window_ms: int = 100) -> bytes:
    return Feedback(ue_id=ue_id, seq=seq, diag_time_ms=seq * 100, w_claw_bytes=w, load=0.5, n_f_rbs=100, n_t_rbs=1000,
                    window_ms=window_ms, saturated=saturated, wireline=wireline).encode(key)


def stats(now: int, *, cwnd: int = 20, srtt_us: int = 50_000, claw_limited_since_ns: int = 0, flags: int = 0,
          age_ns: int = 0) -> bytes:
    fields = dict.fromkeys([f for f in FlowStats.__dataclass_fields__], 0)
    fields.update(updated_ns=now - age_ns, cwnd_pkts=cwnd, srtt_us=srtt_us, flags=flags,
                  cwnd_limited_ns=now - age_ns if claw_limited_since_ns else 0,
                  claw_limited_since_ns=claw_limited_since_ns)
    return FlowStats(**fields).pack()


@pytest.fixture
def parts() -> tuple[Agent, FakeMap, FakeMap, Clock]:
    peers, flows, clock = FakeMap(), FakeMap(), Clock()
    return Agent(KEY, peers, flows, period_ms=100, clock_ns=clock), peers, flows, clock


def test_accepted_report_is_written_with_mode_time_and_staleness(parts) -> None:
    agent, peers, _, clock = parts
    echo = agent.handle(report(5, 123_456, saturated=True), SRC)
    assert echo is not None
    peer = Peer.unpack(peers.data[addr_key(UE)])
    assert peer == Peer(updated_ns=clock.t, stale_after_ns=300_000_000, w_claw_bytes=123_456, mode=Mode.SATURATED,
                        seq=5, window_ms=100)
    e = decode_echo(echo, KEY)
    assert (e.ue_id, e.seq, e.srtt_us, e.cwnd_packets, e.cwnd_limited) == (0, 5, 0, 0, False)  # no flow yet
    assert agent.counters.accepted == 1 and not agent.counters.rejected


@pytest.mark.parametrize("saturated,wireline,mode", [(False, False, Mode.CELLULAR), (True, False, Mode.SATURATED),
                                                     (False, True, Mode.WIRELINE), (True, True, Mode.WIRELINE)])
def test_mode_from_flags(saturated: bool, wireline: bool, mode: Mode) -> None:
    fb = Feedback(0, 1, 1, 1, 0.0, 0, 0, 1, saturated, wireline)
    assert mode_of(fb) == mode


def test_each_refusal_is_counted_by_kind_and_changes_nothing(parts) -> None:
    agent, peers, _, _ = parts
    good = report(10)
    assert agent.handle(good, SRC) is not None
    before = dict(peers.data)
    refused = {
        "bad-mac": [report(11, key=b"x" * 32), good[:-1] + bytes([good[-1] ^ 1])],
        "replayed": [good, report(9)],
        "out-of-range": [report(12, window_ms=0), report(13, w=(1 << 30) + 1)],
        "malformed": [good[:10], b"", good + b"\0"],
    }
    for kind, datagrams in refused.items():
        for data in datagrams:
            assert agent.handle(data, SRC) is None, kind
    assert peers.data == before
    assert dict(agent.counters.rejected) == {k: len(v) for k, v in refused.items()}
    assert agent.counters.accepted == 1
    # A refused report does not consume its sequence number: the next good one is accepted.
    assert agent.handle(report(11), SRC) is not None


def test_bound_ue_id_only_from_its_address() -> None:
    peers, flows = FakeMap(), FakeMap()
    agent = Agent(KEY, peers, flows, ue_addresses={0: UE})
    assert agent.handle(report(1, ue_id=0), ("10.65.0.2", 1)) is None
    assert dict(agent.counters.rejected) == {"wrong-source": 1}
    assert peers.data == {}
    # ...and a refusal for the wrong source does not burn the sequence number of the real UE.
    assert agent.handle(report(1, ue_id=0), SRC) is not None
    # Unbound ids are accepted from any address, keyed by that address.
    assert agent.handle(report(1, ue_id=7), ("10.65.0.9", 1)) is not None
    assert addr_key("10.65.0.9") in peers.data


def test_map_failure_is_counted_without_echo() -> None:
    agent = Agent(KEY, FakeMap(fail=True), FakeMap())
    assert agent.handle(report(1), SRC) is None
    assert dict(agent.counters.rejected) == {"map-error": 1}


def test_echo_summarises_the_active_flows_to_that_ue(parts) -> None:
    agent, _, flows, clock = parts
    now = clock.t
    k1 = FlowKey(UE, "10.64.0.1", 40001, 443).pack()
    k2 = FlowKey(UE, "10.64.0.1", 40002, 443).pack()
    gone = FlowKey(UE, "10.64.0.1", 40003, 443).pack()
    idle = FlowKey(UE, "10.64.0.1", 40004, 443).pack()
    other = FlowKey("10.65.0.2", "10.64.0.1", 40005, 443).pack()
    flows.data[k1] = stats(now, cwnd=30, srtt_us=40_000, age_ns=5_000_000, claw_limited_since_ns=now - 50_000_000)
    flows.data[k2] = stats(now, cwnd=12, srtt_us=61_000, age_ns=1_000_000, claw_limited_since_ns=now - 150_000_000)
    flows.data[gone] = stats(now, cwnd=500, flags=FlowFlag.RELEASED)
    flows.data[idle] = stats(now, cwnd=700, age_ns=ACTIVE_FLOW_NS + 1)
    flows.data[other] = stats(now, cwnd=900)
    e = decode_echo(agent.handle(report(1, window_ms=100), SRC), KEY)
    assert e.srtt_us == 61_000           # the most recently acknowledged flow's
    assert e.cwnd_packets == 42          # the two active flows together
    assert e.cwnd_limited                # k2 was limited by W_claw for the whole T = 100 ms
    e = decode_echo(agent.handle(report(2, window_ms=200), SRC), KEY)
    assert not e.cwnd_limited            # ...but not for a whole T = 200 ms (nor k1)


def test_cwnd_limited_means_by_claws_window_for_the_whole_window() -> None:
    """The echo's flag is the bottleneck detector's evidence: a run of ACKs cwnd-limited by
    CLAW's window covering the report's whole window T, still going on."""
    now, t = 10 * 10**9, 100_000_000

    def flow(since_ns: int, age_ns: int = 0) -> FlowStats:
        return FlowStats.unpack(stats(now, claw_limited_since_ns=since_ns, age_ns=age_ns))

    assert limited_by_claws_window(flow(now - t), now, t)
    assert not limited_by_claws_window(flow(now - t + 1), now, t)   # the run began inside the window
    assert not limited_by_claws_window(flow(0), now, t)             # the last ACK ended the run
    # No ACK for longer than the window: the run's state is not known up to now.
    assert not limited_by_claws_window(flow(now - 5 * t, age_ns=t + 1), now, t)


def test_flow_map_is_walked_once_a_second_not_per_report(parts) -> None:
    agent, _, flows, clock = parts
    flows.data[FlowKey(UE, "10.64.0.1", 40001, 443).pack()] = stats(clock.t)
    for seq in range(1, 11):
        clock.t += 10_000_000
        flows.data[FlowKey(UE, "10.64.0.1", 40001, 443).pack()] = stats(clock.t)
        agent.handle(report(seq), SRC)
    assert flows.scans == 1
    clock.t += 1_000_000_000
    agent.handle(report(11), SRC)
    assert flows.scans == 2


def test_new_flow_is_found_soon_when_none_is_active(parts) -> None:
    """Found by the next report, even one that arrives a little less than a feedback period
    (100 ms) after the last walk of the map."""
    agent, _, flows, clock = parts
    assert decode_echo(agent.handle(report(1), SRC), KEY).cwnd_packets == 0
    clock.t += 99_000_000
    flows.data[FlowKey(UE, "10.64.0.1", 40001, 443).pack()] = stats(clock.t, cwnd=33)
    assert decode_echo(agent.handle(report(2), SRC), KEY).cwnd_packets == 33


def test_parse_endpoint() -> None:
    assert parse_endpoint("10.64.0.1:7070") == ("10.64.0.1", 7070)
    for bad in ["10.64.0.1", ":7070", "host:7070", "10.64.0.1:99999", "10.64.0.1:x"]:
        with pytest.raises(ValueError):
            parse_endpoint(bad)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "clawbed.claw.server.agent", *args], capture_output=True, text=True,
                          timeout=60)


def test_cli_help_and_clear_errors(tmp_path: Path) -> None:
    assert "--listen" in _cli("--help").stdout
    (tmp_path / "key").write_bytes(KEY)
    base = ["--listen", "127.0.0.1:0", "--bpffs", str(tmp_path), "--key-file", str(tmp_path / "key")]
    cases = {
        ("--listen", "nowhere"): "--listen: 'nowhere' is not HOST:PORT",
        ("--ue", "zero=10.0.0.1"): "--ue zero=10.0.0.1",
        ("--ue", "0=10.0.0.300"): "--ue 0=10.0.0.300",
        ("--key-file", str(tmp_path / "nokey")): "reading the key file",
        ("--bpffs", str(tmp_path / "nodir")): "no such directory",
        ("--period-ms", "0"): "--period-ms 0",
    }
    for extra, message in cases.items():
        args = list(base)
        i = args.index(extra[0]) if extra[0] in args else None
        if i is not None:
            args[i + 1] = extra[1]
        else:
            args += list(extra)
        proc = _cli(*args)
        assert proc.returncode == 2, (extra, proc.stderr)
        assert message in proc.stderr, (extra, proc.stderr)
    # The maps are not there: a runtime error naming the pin and the likely cause.
    proc = _cli(*base)
    assert proc.returncode == 1
    assert "claw_peers" in proc.stderr and "registered" in proc.stderr


def test_the_agent_starts_without_pyroute2() -> None:
    """The agent starts once per load: what it imports (its maps, its socket in the server's
    namespace) must not pull in pyroute2, which clawbed.netns imports with itself (~60 ms of
    each load's set-up)."""
    done = subprocess.run([sys.executable, "-c", "import sys, clawbed.claw.server.agent, clawbed.claw.server.bpfmap, "
                           "clawbed.setns; print('pyroute2' in sys.modules, 'clawbed.netns' in sys.modules)"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
