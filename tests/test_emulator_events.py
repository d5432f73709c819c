"""Scripted events (issue 21, item 2): the text form and the checks, and each kind on the real data plane.

- A drop at 300 KB in flight during a bulk Cubic download: one packet dropped, where the
  flow crossed 300 KB, in the ground truth, the packet log and the counters; the server's
  kernel retransmits (TCP_INFO and the namespace's TcpRetransSegs) with no other drop in the
  emulator.
- An outage of 500 ms: a gap in delivery of that length at the stated time; a seek re-arms
  it, so it comes again 3 s after the seek.
- A capacity step: half the delivered rate while it lasts.
- A burst of other users: UE 0 keeps 40 % of the cell's RBs while it lasts.

Expected values follow from the events' definitions (emulator/ARCHITECTURE.md, "Scripted
events") and the links' constant conditions; bounds on rates are generous (timing on a
shared machine is not what these tests judge).
"""

from __future__ import annotations

import csv
import json
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bulkflow import bulk_download

from clawbed.emulator.config import ConfigError, EmulatorConfig
from clawbed.emulator.events import EVENTS, EventError, check_event, check_events, parse_event
from clawbed.emulator.traffic import UdpSink, send_udp_command
from clawbed.emulator.truth import Direction, PacketEvent, read_packets, read_truth

SINK_PORT = 9000
BULK_PORT = 5201
N_RB = 50
MCS = 15
CLEAN_HARQ = {"bler": 0.0, "retx_bler": 0.0}
#: No overflow anywhere: a bulk flow's every loss is the scripted one.
HUGE_QUEUE_BYTES = 256 << 20


# --- the text form and the checks (no namespaces) -----------------------------------------


def test_the_text_form_is_the_config_table() -> None:
    assert parse_event("drop:in_flight_bytes=300000") == {"kind": "drop", "in_flight_bytes": 300000}
    assert parse_event("outage:at_ms=3000,ms=500") == {"kind": "outage", "at_ms": 3000, "ms": 500}
    assert parse_event("capacity:at_ms=2000,factor=0.5,ms=1000") == \
        {"kind": "capacity", "at_ms": 2000, "ms": 1000, "factor": 0.5}
    assert parse_event("burst:at_ms=1000,ms=2000,share=0.6") == \
        {"kind": "burst", "at_ms": 1000, "ms": 2000, "share": 0.6}
    assert parse_event("drop:ue=1,packet=7") == {"kind": "drop", "ue": 1, "packet": 7}
    assert set(EVENTS) == {"drop", "outage", "capacity", "burst"}


@pytest.mark.parametrize("text, needle", [
    ("outage:at_ms=3000", "ms: an outage event needs it"),
    ("outage at_ms=1", "is not KIND:PARAM=VALUE"),
    ("outage:at_ms", "is not PARAM=VALUE"),
    ("drop:=5", "is not PARAM=VALUE"),
    ("outage:at_ms=1,at_ms=2,ms=3", "given twice"),
    ("burst:at_ms=1,ms=2,share=1.5", "share: must be a number in 0.0..=1.0"),
    ("capacity:at_ms=1,factor=0", "factor: must be a number in 0.01..=100.0"),
    ("drop", "kind: a drop event needs exactly one of at_ms, packet, seq_byte, in_flight_bytes"),
    ("drop:at_ms=1,packet=2", "packet: a drop event takes exactly one of"),
    ("drop:packet=1.5", "packet: must be an integer"),
    ("flood:at_ms=1", "kind: unknown 'flood'"),
    ("outage:at_ms=1,ms=2,share=3", "share: unknown parameter of a outage event"),
])
def test_a_bad_event_text_says_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_event(text)
    assert needle in str(e.value) and text in str(e.value)


def test_errors_name_the_event_and_key() -> None:
    with pytest.raises(EventError) as e:
        check_events([{"kind": "outage", "at_ms": 1, "ms": 2}, {"kind": "outage", "at_ms": 1, "ms": 2},
                      {"kind": "burst", "at_ms": -1, "ms": 2, "share": 0.5}], n_ues=1)
    assert e.value.key == "events[2].at_ms"
    with pytest.raises(EventError) as e:
        check_events([{"kind": "drop", "ue": 1, "packet": 3}], n_ues=1)
    assert e.value.key == "events[0].ue"
    with pytest.raises(EventError, match="kind"):
        check_event("outage")
    config = {"mode": "rate", "output_dir": Path("/nonexistent"), "core": {"netns": "cbxcore"},
              "ues": [{"netns": "cbxue0", "rate": "1mbit"}]}
    with pytest.raises(ConfigError, match=r"config field `events\[1\]\.share`: must be a number"):
        EmulatorConfig.build(**config, events=[{"kind": "drop", "at_ms": 5},
                                               {"kind": "burst", "at_ms": 0, "ms": 5, "share": "most"}])
    with pytest.raises(ConfigError, match=r"config field `events\[0\]\.kind`: a burst of other users needs mode cell"):
        EmulatorConfig.build(**config, events=[parse_event("burst:at_ms=0,ms=5,share=0.5")])
    built = EmulatorConfig.build(**config, events=[parse_event("capacity:at_ms=0,factor=2")])
    assert built.to_json()["events"] == [{"kind": "capacity", "at_ms": 0, "factor": 2.0}]


def test_every_door_passes_the_events_to_the_emulator(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from clawbed.errors import InputError
    from clawbed.orchestrator.spec import Condition
    from clawbed.paths import REPO_ROOT
    from clawbed.replay import settings
    from clawbed.replay.run import ReplayConfig, _emulator_fields
    from clawbed.replay.shell import run as emu_run

    events = [parse_event("drop:in_flight_bytes=300000"), parse_event("outage:at_ms=3000,ms=500")]
    assert settings.emulator_fields({"events": events}) == ({"events": events}, {})
    assert settings.emulator_fields({"events": []}) == ({}, {}), "unset: the emulator's config has no events key"
    assert "events" not in Condition().settings() or Condition().settings()["events"] == []
    assert Condition(events=[{"kind": "drop", "packet": 3}]).settings()["events"] == [{"kind": "drop", "packet": 3}]
    trace = REPO_ROOT / "traces" / "samples" / "idle-cell.cbt"
    config = ReplayConfig(trace=trace, page="set-01", schemes=["cubic"], runs=1, events=events)
    config.check()
    fields = _emulator_fields(config, None)
    assert fields["events"] == events
    built = EmulatorConfig.build(mode="rate", output_dir=tmp_path / "out", core={"netns": "cbtcore"},
                                 ues=[{"netns": "cbtue0", "rate": "10mbit"}], **fields)
    assert built.to_json()["events"] == events
    with pytest.raises(InputError, match=r"--events: \[1\]\.share: must be a number in 0\.0\.\.=1\.0"):
        ReplayConfig(trace=trace, page="set-01", schemes=["cubic"], runs=1,
                     events=[events[0], {"kind": "burst", "at_ms": 0, "ms": 5, "share": 2}]).check()
    with pytest.raises(ValueError, match=r"(?s)events.*\[0\]\.ms: an outage event needs it"):
        Condition(events=[{"kind": "outage", "at_ms": 5}])
    # The flag, singular or plural, before anything starts.
    result = CliRunner().invoke(emu_run, ["--rate", "12mbit", "--event", "outage:at_ms=3000", "--", "true"])
    assert result.exit_code == 2 and "--event" in result.output and "ms: an outage event needs it" in result.output, \
        result.output


# --- on the real data plane ---------------------------------------------------------------


def _trace(path: Path, seconds: float) -> Path:
    from clawbed.traces.io import write_trace
    from clawbed.traces.schema import make_trace, new_metadata

    rows = round(seconds * 1000)
    metadata = new_metadata(bandwidth_mhz=10, n_antennas=2, duration_ms=rows, source="synth",
                            provenance={"generator": "tests/test_emulator_events.py"})
    write_trace(make_trace(metadata, mcs=np.full(rows, MCS), other_rbs=np.zeros(rows)), path)
    return path


def _total_retrans(sock: socket.socket) -> int:
    """tcpi_total_retrans of the socket's TCP_INFO (offset 100)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int(struct.unpack_from("=I", raw, 100)[0])


def _retrans_segs(node: Any) -> int:
    """TcpRetransSegs of the namespace (/proc/net/snmp read inside it)."""
    lines = [line.split() for line in node.run(["cat", "/proc/net/snmp"]).stdout.splitlines() if line.startswith("Tcp:")]
    return int(lines[1][lines[0].index("RetransSegs")])


def _udp_run(out: Path, seconds: float, rate: str, events: list[dict[str, Any]], *, ue: dict[str, Any],
             seek_after_s: float | None = None, **fields: Any) -> tuple[Any, Any, dict[str, Any]]:
    """A UDP flow at ``rate`` toward UE 0 for ``seconds``, through an emulator with ``events``; with
    ``seek_after_s``, a seek to trace time 0 that long after the start. Truth, packet log, counters."""
    from clawbed.emulator.process import EmulatedCell

    with EmulatedCell(1, out, ue=ue, events=events, **fields) as cell:
        ue_node, core = cell.topo.ues[0], cell.topo.core
        with UdpSink([ue_node.name], SINK_PORT):
            sender = core.popen(send_udp_command(sys.executable, [(str(ue_node.address), SINK_PORT)], rate, 1300,
                                                 seconds), name="udp-send")
            if seek_after_s is not None:
                time.sleep(seek_after_s)
                cell.emulator.seek(0)
            deadline = time.monotonic() + seconds + 30
            while sender.alive and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)
            counters = cell.stop()
    return read_truth(out / "truth.cbcol"), read_packets(out / "packets.cbcol"), counters


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) of each run of True in ``mask`` (end exclusive)."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


@pytest.mark.root
@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_a_drop_at_300_kb_in_flight_is_retransmitted_by_the_server(tmp_path: Path) -> None:
    from clawbed.emulator.process import EmulatedCell

    out = tmp_path / "run"
    in_flight = 300_000
    with EmulatedCell(1, out, mode="rate", ue={"rate": "20mbit", "cell": {"queue_limit_bytes": HUGE_QUEUE_BYTES}},
                      events=[parse_event(f"drop:in_flight_bytes={in_flight}")]) as cell:
        core, ue = cell.topo.core, cell.topo.ues[0]
        # Set, not inherited (this host's default is bbr).
        core.ns.sysctl("net.ipv4.tcp_congestion_control", "cubic")
        print("server congestion control: cubic")
        before = _retrans_segs(core)
        with bulk_download(core.name, ue.name, str(core.address), BULK_PORT) as conn:
            time.sleep(4.0)
            total_retrans = _total_retrans(conn)
        retrans_segs = _retrans_segs(core) - before
        counters = cell.stop()
    truth = read_truth(out / "truth.cbcol")
    log = read_packets(out / "packets.cbcol")
    drops = truth.ue(0, "event_drops")
    assert int(drops.sum()) == 1, "one packet dropped per arming"
    drop_ms = int(truth["t_ms"][np.flatnonzero(drops)[0]])
    dropped = log.select(event=PacketEvent.DROP_EVENT)
    assert len(dropped["bytes"]) == 1 and dropped["direction"][0] == Direction.DOWNLINK
    assert dropped["t_actual_us"][0] // 1000 == drop_ms
    assert int(truth.ue(0, "event_drop_bytes").sum()) == int(dropped["bytes"][0]) > 1000, "a data segment"
    (tally,) = counters["engine"]["events"]
    note = tally["drops"][0]
    assert (tally["kind"], tally["dropped_packets"], note["t_ms"]) == ("drop", 1, drop_ms)
    # The segment that brought the flow to 300 KB: at most one segment's payload above it.
    assert in_flight <= note["in_flight_bytes"] < in_flight + 1500, note
    down = counters["engine"]["ues"][0]["downlink"]
    assert down["dropped_event"]["packets"] == 1
    assert down["dropped_overflow"]["packets"] == 0 and down["dropped_rlc"]["packets"] == 0, "no other loss"
    # The server's kernel repaired it.
    assert total_retrans >= 1 and retrans_segs >= 1, (total_retrans, retrans_segs)
    print(f"dropped {note['bytes']} B at t = {drop_ms} ms with {note['in_flight_bytes']} B in flight "
          f"(byte {note['first_byte']} of the flow); server: tcpi_total_retrans {total_retrans}, "
          f"TcpRetransSegs +{retrans_segs}")


@pytest.mark.root
@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_an_outage_is_a_gap_in_delivery_of_its_length_and_a_seek_re_arms_it(tmp_path: Path) -> None:
    at_ms, length_ms = 3000, 500
    truth, log, counters = _udp_run(tmp_path / "run", 9.0, "4mbit", [parse_event(f"outage:at_ms={at_ms},ms={length_ms}")],
                                    mode="rate", ue={"rate": "12mbit"}, seek_after_s=4.5)
    outage = truth.ue(0, "scripted_outage").astype(bool)
    runs = _runs(outage)
    assert len(runs) == 2 and all(end - start == length_ms for start, end in runs), runs
    t_ms = truth["t_ms"]
    assert int(t_ms[runs[0][0]]) == at_ms
    (tally,) = counters["engine"]["events"]
    assert counters["engine"]["seeks"] == 1 and tally["armings"] == 2 and tally["active_ms"] == 2 * length_ms
    assert (truth.ue(0, "stalled").astype(bool) == outage).all(), "the outage stalls the link, nothing else does"
    delivered = truth.ue(0, "delivered_packets")
    deliveries_ms = np.sort(log.select(event=PacketEvent.DELIVER, direction=Direction.DOWNLINK)["t_actual_us"]) / 1000
    gaps = []
    for start, end in runs:
        t0, t1 = int(t_ms[start]), int(t_ms[end - 1]) + 1
        assert delivered[start:end].sum() == 0 and delivered[start - 20:start].sum() > 0
        # The gap around it: the last delivery before and the first after (the held packets).
        before = deliveries_ms[deliveries_ms < t0 + 1].max()
        after = deliveries_ms[deliveries_ms >= t1].min()
        gaps.append(after - before)
        # 4 Mbit/s of 1300-byte datagrams: one every 2.7 ms, so the gap is the outage and at
        # most a few ms more (the subframe boundary and the air delay).
        assert length_ms <= after - before <= length_ms + 10, (t0, before, after)
    print(f"outages at {[int(t_ms[s]) for s, _ in runs]} ms (the second 3 s after the seek); "
          f"delivery gaps {', '.join(f'{g:.1f}' for g in gaps)} ms")


@pytest.mark.root
@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_a_capacity_step_changes_the_delivered_rate(tmp_path: Path) -> None:
    truth, _, counters = _udp_run(tmp_path / "run", 6.0, "20mbit", [parse_event("capacity:at_ms=3000,factor=0.5,ms=1000")],
                                  mode="rate", ue={"rate": "12mbit"})
    t_ms, carried = truth["t_ms"], truth.ue(0, "carried_bytes")
    factor = truth.ue(0, "capacity_factor")

    def mbit_s(t0: int, t1: int) -> float:
        rows = (t_ms >= t0) & (t_ms < t1)
        return float(carried[rows].sum()) * 8 / ((t1 - t0) / 1000) / 1e6

    assert (factor[(t_ms >= 3000) & (t_ms < 4000)] == 0.5).all() and (factor[t_ms < 3000] == 1.0).all()
    before, during, after = mbit_s(2000, 3000), mbit_s(3000, 4000), mbit_s(4000, 5000)
    assert 11.5 <= before <= 12.1 and 11.5 <= after <= 12.1, (before, after)
    assert 0.48 <= during / before <= 0.52, (before, during)
    assert counters["engine"]["events"][0]["active_ms"] == 1000
    print(f"delivered {before:.2f} → {during:.2f} → {after:.2f} Mbit/s (capacity × 0.5 for 1 s)")


@pytest.mark.root
@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_a_burst_of_other_users_takes_its_share_of_the_cell(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.cbt", 20)
    truth, _, _ = _udp_run(tmp_path / "run", 6.0, "40mbit", [parse_event("burst:at_ms=3000,ms=1000,share=0.6")],
                           ue={"trace": trace}, cell={"harq": CLEAN_HARQ, "rrc": "off"})
    t_ms = truth["t_ms"]
    alloc, burst = truth.ue(0, "alloc_rbs"), truth["burst_rbs"]
    carried = truth.ue(0, "carried_bytes")
    during = (t_ms >= 3000) & (t_ms < 4000)
    before = (t_ms >= 2000) & (t_ms < 3000)
    assert (burst[during] == 30).all() and (burst[~during] == 0).all()
    # Saturated: the whole cell before, the 20 RBs the burst leaves during.
    assert (alloc[before] == N_RB).mean() > 0.99 and (alloc[during] == N_RB - 30).mean() > 0.99
    assert (truth["other_alloc_rbs"][during] == 30).all()
    share = float(carried[during].sum()) / float(carried[before].sum())
    assert 0.35 <= share <= 0.45, share
    print(f"UE 0: {alloc[before].mean():.1f} RBs before, {alloc[during].mean():.1f} during the burst; "
          f"carried bytes during/before {share:.3f}")


def test_the_kinds_python_reads_are_the_binarys() -> None:
    from clawbed.emulator.process import BINARY

    if not BINARY.is_file():
        pytest.skip(f"{BINARY} is not built (cargo build --release)")
    listed = json.loads(subprocess.run([str(BINARY), "--list-events"], capture_output=True, text=True,
                                       check=True).stdout)
    assert {k["name"]: k for k in listed} == EVENTS


@pytest.mark.root
@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_in_a_replay_at_ms_is_ms_into_each_load(tmp_path: Path) -> None:
    from conftest import CLAWBED

    at_ms, length_ms = 200, 300
    proc = subprocess.run([str(CLAWBED), "replay", "--schemes", "cubic", "--runs", "2", "--loader", "h2",
                           "--page", "set-01", "--event", f"outage:at_ms={at_ms},ms={length_ms}",
                           "--runs-dir", str(tmp_path), "--name", "ev"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "ev"
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["ok"] for r in records), records
    emulator_dir = next(p.parent for p in run_dir.rglob("truth.cbcol"))
    truth = read_truth(emulator_dir / "truth.cbcol")
    counters = json.loads((emulator_dir / "counters.json").read_text())
    (tally,) = counters["engine"]["events"]
    seeks = counters["engine"]["seeks"]
    assert seeks >= 2 and tally["armings"] == 1 + seeks, (seeks, tally)
    t_ms = truth["t_ms"]
    starts = [int(t_ms[s]) for s, e in _runs(truth.ue(0, "scripted_outage").astype(bool)) if e - s == length_ms]
    origin_ms = (truth.origin_unix_ns or 0) / 1e6
    # Each load's outage starts at_ms after the seek just before the load (the loader starts
    # within a second of it), not at_ms after the emulator's start.
    for r in records:
        load_ms = r["t_start_unix_s"] * 1000 - origin_ms
        # (-5 ms: the load's start is a wall-clock stamp, the outage's the emulator's clock; a load
        # that starts right at its seek may be stamped a fraction of a ms before it: -0.4 in CI.)
        assert any(-5 <= load_ms - (s - at_ms) <= 1000 for s in starts), (load_ms, starts)
    # Each load's truth.csv has the outage, at_ms after the seek that preceded the load.
    for r in records:
        with (run_dir / r["load_dir"] / "truth.csv").open() as f:
            rows = list(csv.DictReader(f))
        outage = np.array([int(row["scripted_outage"]) for row in rows])
        assert outage.sum() == length_ms and at_ms - 100 <= int(np.flatnonzero(outage)[0]) <= at_ms, \
            (r["load_dir"], outage.sum(), np.flatnonzero(outage)[:1])
        assert {row["capacity_factor"] for row in rows} == {"1.0"} and {row["burst_rbs"] for row in rows} == {"0"}
    print(f"outages at {starts} ms; loads at {[round(r['t_start_unix_s'] * 1000 - origin_ms) for r in records]} ms; "
          f"{seeks} seeks, {tally['armings']} armings")


@pytest.mark.root
@pytest.mark.skipif(sys.platform != "linux", reason="needs Linux namespaces")
def test_emu_run_takes_events(tmp_path: Path) -> None:
    from conftest import CLAWBED

    out = tmp_path / "emu"
    proc = subprocess.run([str(CLAWBED), "emu", "run", "--rate", "12mbit", "--event", "outage:at_ms=500,ms=300",
                           "--event", "capacity:at_ms=1000,factor=0.25", "--seconds", "2", "--out", str(out),
                           "--", "sleep", "10"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "--events outage:at_ms=500,ms=300" in proc.stderr, proc.stderr[-2000:]
    truth = read_truth(out / "truth.cbcol")
    t_ms = truth["t_ms"]
    runs = _runs(truth.ue(0, "scripted_outage").astype(bool))
    assert [(int(t_ms[s]), e - s) for s, e in runs] == [(500, 300)]
    factor = truth.ue(0, "capacity_factor")
    assert (factor[t_ms >= 1000] == 0.25).all() and (factor[t_ms < 1000] == 1.0).all()
    config = json.loads((out / "emulator.json").read_text())
    assert [e["kind"] for e in config["events"]] == ["outage", "capacity"]
