"""Background flows on the replay's own UE (``replay/flows.py``, ``UeFlow`` in
``replay/network/crosstraffic.py``): bulk, on/off and Poisson downloads from the core
namespace sharing UE 0's base-station queue, each with its own scheme, receive buffer and DRWA.

- settings (no kernel): ``--flow`` / a spec's ``flows`` parsing and errors, the DRWA selector,
  a flow's per-load figures from its sender's logs;
- the real data plane (root), the busy-cell trace without residual loss:
  * a bulk flow on the UE raises a Poisson fetch flow's fetch times (the same cell, seed and
    arrivals, without and with the bulk flow);
  * a flow's ``rmem`` and ``drwa`` act on that flow only: beside an uncapped flow, the capped
    one is offered at most its buffer, DRWA lowers the ACKs of its own flow only;
  * a replay with flows writes ``flows.json``/``flows.csv`` per load, the run's ``flows.csv``
    and a summary per flow, and leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import struct
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from clawbed.claw import bpfobjects
from clawbed.errors import InputError
from clawbed.paths import REPO_ROOT
from clawbed.replay import drwa, rmem, settings
from clawbed.replay.flows import FlowSet, flow_figures
from clawbed.replay.network.crosstraffic import UE_FLOW_BASE_PORT, UeFlow, parse_flow, ue_flow_from

BUSY_CELL = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
#: No transmission fails: only the queue and the windows shape the flows (see
#: tests/test_ue_receive_window.py's LOSS_FREE for why).
LOSS_FREE = {"loss": {"kind": "fixed", "probability": 0.0}}
needs_toolchain = pytest.mark.skipif(not (shutil.which("clang") and shutil.which("bpftool")),
                                     reason="needs clang and bpftool")


# --- settings --------------------------------------------------------------------------------------

def test_the_flag_reads_like_the_spec_entry() -> None:
    bulk = parse_flow("bulk:scheme=reno")
    assert (bulk.kind, bulk.scheme, bulk.rmem, bulk.drwa) == ("bulk", "reno", None, False)
    fetch = parse_flow("poisson:rate_per_s=2,bytes=100000,rmem=262144")
    assert (fetch.rate_per_s, fetch.bytes, fetch.rmem) == (2.0, (100_000,), 262_144)
    mixed = parse_flow("onoff:bytes=10KB/1MiB,off_ms=250,sigma=0.5,drwa=on")
    assert (mixed.bytes, mixed.off_ms, mixed.sigma, mixed.drwa) == ((10_000, 1 << 20), 250.0, 0.5, True)
    # The flag's entry and a spec's are one thing, written out in full either way.
    entry = settings.check("flows", [settings.SETTINGS["flows"].parse("poisson:rate_per_s=2,bytes=100000")])
    assert entry == settings.check("flows", [{"kind": "poisson", "rate_per_s": 2, "bytes": [100000]}])
    assert entry == [{"kind": "poisson", "scheme": "cubic", "bytes": [100000], "sigma": 0.0, "rate_per_s": 2.0,
                      "rmem": None, "drwa": False}]
    assert ue_flow_from(entry[0]) == parse_flow("poisson:rate_per_s=2,bytes=100000")
    assert settings.SETTINGS["flows"].flags == ["--flows", "--flow"]


@pytest.mark.parametrize("text,message", [
    ("flood", "--flow kind 'flood' must be one of bulk, onoff, poisson"),
    ("bulk:bytes=100000", "--flow bulk: bytes: not a setting of a bulk flow; it takes scheme, rmem, drwa"),
    ("poisson:rate_per_s=fast", "--flow poisson: rate_per_s='fast': not a number"),
    ("poisson:rate_per_s=0", "--flow poisson: rate_per_s 0.0: must be above 0"),
    ("poisson:bytes=lots", "--flow poisson: bytes 'lots': a size like"),
    ("onoff:off_ms=-5", "--flow onoff: off_ms -5.0: must be a positive number of ms"),
    ("bulk:rmem=100", "--flow bulk: rmem 100: must be 4096 bytes .. 1 GiB"),
    ("bulk:drwa=maybe", "--flow bulk: drwa='maybe': give true or false"),
    ("bulk:scheme=westwood", "--flow bulk: unknown scheme 'westwood'"),
    ("bulk:scheme=claw", "--flow bulk: scheme 'claw' has a part on the UE"),
    ("bulk:scheme", "--flow 'bulk:scheme': 'scheme': give KEY=VALUE"),
    ("bulk:rmem=8192,rmem=4096", "--flow 'bulk:rmem=8192,rmem=4096': rmem is given twice"),
])
def test_bad_flows_are_refused_naming_the_flag_and_key(text: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_flow(text)
    assert message in str(err.value)


def test_a_spec_condition_and_a_replay_config_take_flows(tmp_path: Path) -> None:
    from clawbed.orchestrator.spec import SpecError, load_spec
    from clawbed.replay.run import ReplayConfig

    def spec(condition: dict) -> Path:
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({"suite": "f", "matrix": {"traces": ["busy-cell"], "pages": ["set-01"],
                                                                  "schemes": ["cubic"], "conditions": [condition]}}))
        return path

    (sc,) = load_spec(spec({"name": "fl", "flows": [{"kind": "bulk", "scheme": "reno", "rmem": 65536},
                                                     {"kind": "poisson", "bytes": [10000, 100000]}]})).scenarios()
    assert [f["kind"] for f in sc.condition.flows] == ["bulk", "poisson"]
    assert sc.condition.flows[0]["rmem"] == 65536 and sc.condition.flows[1]["bytes"] == [10000, 100000]
    (plain,) = load_spec(spec({"name": "plain"})).scenarios()
    assert "flows" not in plain.settings()["condition"]  # scenario ids without flows stay as they were
    with pytest.raises(SpecError, match=r"flows: \[0\] poisson: rate: not a setting of a poisson flow"):
        load_spec(spec({"flows": [{"kind": "poisson", "rate": 2}]}))
    cfg = ReplayConfig(trace=BUSY_CELL, page="set-01", schemes=["cubic"], runs=1, flows=[{"kind": "bulk"}])
    cfg.check()
    with pytest.raises(InputError, match=r"--flows: \[0\] onoff: off_ms 0.0"):
        ReplayConfig(trace=BUSY_CELL, page="set-01", schemes=["cubic"], runs=1,
                     flows=[{"kind": "onoff", "off_ms": 0}]).check()
    with pytest.raises(InputError, match=r"--flows: 17 flows: at most 16"):
        ReplayConfig(trace=BUSY_CELL, page="set-01", schemes=["cubic"], runs=1, flows=[{"kind": "bulk"}] * 17).check()


def test_drwa_drives_the_flows_that_ask_and_the_page_only_with_its_setting() -> None:
    flows = FlowSet([parse_flow("bulk:drwa=true"), parse_flow("bulk")], seed=1)
    assert flows.wants_drwa and [f.port for f in flows.flows] == [UE_FLOW_BASE_PORT, UE_FLOW_BASE_PORT + 1]
    page_conn = ("10.65.0.1", 40000, "10.64.0.1", 443)

    def conn(port: int) -> tuple[str, int, str, int]:
        return ("10.65.0.1", port, "10.64.0.1", 51000)

    only_flow = flows.drwa_select(page=False)
    assert only_flow is not None
    assert only_flow(conn(UE_FLOW_BASE_PORT)) and not only_flow(conn(UE_FLOW_BASE_PORT + 1))
    assert not only_flow(page_conn)
    with_page = flows.drwa_select(page=True)
    assert with_page is not None and with_page(page_conn) and not with_page(conn(UE_FLOW_BASE_PORT + 1))
    assert FlowSet([], seed=1).drwa_select(page=True) is None  # no flows: DRWA on every connection, as before
    assert not FlowSet([parse_flow("bulk")], seed=1).wants_drwa


def _lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_flows_figures_over_a_load_come_from_its_senders_logs(tmp_path: Path) -> None:
    flow = UeFlow(parse_flow("poisson:rate_per_s=2,bytes=100000"), 0, seed=1)
    flow.progress_path, flow.transfers_path = tmp_path / "p.jsonl", tmp_path / "t.jsonl"
    # 1 MB/s acknowledged, one retransmission per second, windows offered up to 200 KB.
    _lines(flow.progress_path, [{"t_unix_s": 100.0 + t / 10, "bytes_acked": 100_000 * t, "retrans": t // 10,
                                 "open": 1, "snd_wnd_max": 100_000 + 1000 * t} for t in range(0, 101)])
    _lines(flow.transfers_path, [
        {"flow": 0, "bytes": 100000, "t_start_unix_s": 100.5, "t_end_unix_s": 100.9, "retrans": 0},  # before
        {"flow": 0, "bytes": 100000, "t_start_unix_s": 102.0, "t_end_unix_s": 102.3, "retrans": 1},
        {"flow": 0, "bytes": 100000, "t_start_unix_s": 103.0, "t_end_unix_s": 103.5, "retrans": 0},
        {"flow": 0, "bytes": 100000, "skipped": True, "t_start_unix_s": 103.2},
    ])
    row = flow_figures(flow, 101.05, 104.05)
    assert row["bytes"] == 3_000_000 and row["mbit_s"] == pytest.approx(8.0)
    assert row["retransmits"] == 3
    assert row["snd_wnd_max_bytes"] == 100_000 + 1000 * 40
    assert (row["fetches_started"], row["fetches_done"], row["fetches_skipped"], row["fetches_open"]) == (3, 2, 1, 0)
    assert [f["fetch_ms"] for f in row["fetches"]] == [300.0, 500.0]
    assert (row["fetch_ms_p50"], row["fetch_ms_p95"], row["fetch_ms_max"]) == (400.0, 490.0, 500.0)
    # A load's files and the run's table.
    flows = FlowSet([flow.spec], seed=1)
    flows.flows = [flow]
    rows = flows.write_load(tmp_path / "load", 101.05, 104.05)
    flows.keep(0, rows)
    assert json.loads((tmp_path / "load" / "flows.json").read_text())[0]["fetches"][1]["fetch_ms"] == 500.0
    assert (tmp_path / "load" / "flows.csv").read_text().splitlines()[0].startswith("flow,kind,scheme,cc,rmem,drwa")
    assert flows.write_run(tmp_path / "flows.csv") == 1
    [summary] = flows.summary()
    assert summary.startswith("flow0-poisson (scheme=cubic, bytes=[100000]") and "3,000,000 B in 1 load(s)" in summary
    assert "2 fetches done, median 400 ms, p95 490 ms" in summary


# --- the real data plane ---------------------------------------------------------------------------

def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")


def _flows_over_busy_cell(out: Path, specs: list[str], seconds: float, page_drwa: bool = False) -> dict:
    """``specs`` (``--flow`` texts) on UE 0 of a fresh emulator on the busy cell (no residual
    loss, the UE's tcp_rmem uncapped as a replay's) for ``seconds``; every flow's figures over
    the time after the first second, and DRWA's per-flow windows when one ran."""
    from clawbed.emulator.process import EmulatedCell
    from clawbed.replay.network.topology import Topology

    out.mkdir(parents=True)
    flows = FlowSet([parse_flow(s) for s in specs], seed=1)
    result: dict = {}
    with EmulatedCell(1, out, ue={"trace": BUSY_CELL}, cell=LOSS_FREE, topology=Topology) as cell:
        ue = cell.topo.ues[0]
        ue.ns.sysctl("net.ipv4.tcp_rmem", " ".join(str(v) for v in rmem.UNCAPPED))
        controller = flows.start_with_drwa(cell.res, cell.topo, out, page=page_drwa)
        t0 = time.time() + 1.0
        time.sleep(seconds)
        t1 = time.time()
        if controller is not None:
            result["drwa"] = controller.describe()
            result["drwa_flows"] = {struct.unpack("!H", key[8:10])[0]: value
                                    for key, value in controller.flow_windows().items()}
        result["rcvbuf"] = {f.name: f.receive_buffer_bytes() for f in flows.flows}
        result["summary"] = flows.finish(out, t0, t1)
        result["rows"] = {r["flow"]: r for r in json.loads((out / "flows.json").read_text())}
        cell.stop()
    return result


#: The fetch flow: 2 fetches of 100 kB a second (Poisson), seeded: both runs draw the same arrivals.
FETCHES = "poisson:rate_per_s=2,bytes=100000"
#: With a bulk Cubic flow filling the UE's deep (3 MiB) base-station queue, fetch times grow by
#: the queue's delay: at least this factor on the median (measured: see the test's output).
MIN_FETCH_SLOWDOWN = 1.5


@pytest.mark.root
def test_a_bulk_flow_on_the_ue_raises_the_fetch_times(tmp_path: Path) -> None:
    _needs_root()
    alone = _flows_over_busy_cell(tmp_path / "alone", [FETCHES], seconds=15)
    crowded = _flows_over_busy_cell(tmp_path / "crowded", [FETCHES, "bulk:scheme=cubic"], seconds=15)
    a, c = alone["rows"]["flow0-poisson"], crowded["rows"]["flow0-poisson"]
    times_a = [f["fetch_ms"] for f in a["fetches"]]
    times_c = [f["fetch_ms"] for f in c["fetches"]]
    bulk = crowded["rows"]["flow1-bulk"]
    figures = (f"\nalone: {len(times_a)} fetches, median {statistics.median(times_a):.0f} ms, max {max(times_a):.0f}"
               f" ms, {a['mbit_s']} Mbit/s\nwith bulk: {len(times_c)} fetches, median "
               f"{statistics.median(times_c) if times_c else float('nan'):.0f} ms; bulk {bulk['mbit_s']} Mbit/s, "
               f"{bulk['retransmits']} retransmissions, window up to {bulk['snd_wnd_max_bytes']} B")
    print(figures + "\n" + "\n".join(crowded["summary"]))
    assert len(times_a) >= 10 and a["fetches_skipped"] == 0, figures
    assert len(times_c) >= 3, figures
    assert bulk["bytes"] > 1_000_000 and bulk["mbit_s"] > 1.0, figures
    assert statistics.median(times_c) >= MIN_FETCH_SLOWDOWN * statistics.median(times_a), figures
    assert a["cc"] == c["cc"] == "cubic" and bulk["cc"] == "cubic"


@pytest.fixture(scope="module")
def built() -> None:
    proc = subprocess.run(bpfobjects.build_command(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (bpfobjects.objects_dir() / drwa.OBJECT_NAME).is_file()


#: The capped flow's receive buffer, bytes (BB12's Galaxy S2 default, 110208, rounded).
CAP_BYTES = 131072


@pytest.mark.usefixtures("built")
@pytest.mark.root
@needs_toolchain
def test_a_flows_rmem_and_drwa_act_on_that_flow_only(tmp_path: Path) -> None:
    _needs_root()
    res = _flows_over_busy_cell(tmp_path / "windows", [f"bulk:rmem={CAP_BYTES}", "bulk", "bulk:drwa=true"],
                                seconds=15)
    capped, free, with_drwa = (res["rows"][n] for n in ("flow0-bulk", "flow1-bulk", "flow2-bulk"))
    figures = "\n" + "\n".join(f"{r['flow']} rmem={r['rmem']} drwa={r['drwa']}: {r['mbit_s']} Mbit/s, window up "
                               f"to {r['snd_wnd_max_bytes']} B" for r in (capped, free, with_drwa))
    figures += f"\nDRWA: {res['drwa']}\nper UE port (acks seen, lowered, window, sent, wscale): {res['drwa_flows']}"
    print(figures)
    # The capped flow's sockets got the buffer asked for; its window never exceeds it, while the
    # uncapped flow beside it, on the same UE, is offered far more.
    assert res["rcvbuf"] == {"flow0-bulk": CAP_BYTES, "flow1-bulk": None, "flow2-bulk": None}
    assert capped["snd_wnd_max_bytes"] <= CAP_BYTES, figures
    assert free["snd_wnd_max_bytes"] > 2 * CAP_BYTES, figures
    assert capped["bytes"] > 0 and free["bytes"] > 0 and with_drwa["bytes"] > 0, figures
    # DRWA lowered the ACKs of its own flow, and of no other.
    lowered = {port: value[1] for port, value in res["drwa_flows"].items()}
    assert lowered[UE_FLOW_BASE_PORT + 2] > 10, figures
    assert lowered.get(UE_FLOW_BASE_PORT, 0) == 0 and lowered.get(UE_FLOW_BASE_PORT + 1, 0) == 0, figures
    assert res["drwa"]["controller_errors"] == 0, figures
    assert with_drwa["snd_wnd_max_bytes"] < free["snd_wnd_max_bytes"], figures


@pytest.mark.usefixtures("built")
@pytest.mark.root
@needs_toolchain
def test_a_replay_reports_each_flow_per_load_and_leaves_nothing(clawbed_cli: Path, tmp_path: Path) -> None:
    _needs_root()
    proc = subprocess.run([str(clawbed_cli), "replay", "--schemes", "cubic", "--runs", "2", "--loader", "h2",
                           "--page", "set-01", "--runs-dir", str(tmp_path), "--name", "fl",
                           "--flow", "bulk:scheme=reno,rmem=65536", "--flow", "poisson:rate_per_s=4,bytes=20000,drwa=true"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "fl"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert len(records) == 2 and all(r["ok"] for r in records), records
    for r in records:
        rows = {row["flow"]: row for row in json.loads((run_dir / r["load_dir"] / "flows.json").read_text())}
        assert set(rows) == {"flow0-bulk", "flow1-poisson"}
        assert rows["flow0-bulk"]["cc"] == "reno" and rows["flow0-bulk"]["bytes"] > 0
        assert rows["flow0-bulk"]["snd_wnd_max_bytes"] <= 65536
        assert rows["flow1-poisson"]["fetches_started"] >= 0
        assert (run_dir / r["load_dir"] / "flows.csv").is_file()
        assert r["background_bytes"]["flow0-bulk"] > 0
    table = (run_dir / "flows.csv").read_text().splitlines()
    assert table[0].startswith("load,flow,kind") and len(table) == 1 + 2 * 2
    assert [line.split(" ")[0] for line in manifest["flows_summary"]] == ["flow0-bulk", "flow1-poisson"]
    # The run's output has a line per flow.
    assert "flow flow0-bulk (scheme=reno, rmem=65536, drwa=False): " in proc.stderr, proc.stderr[-2000:]
    assert "flow flow1-poisson (scheme=cubic" in proc.stderr and "fetches done" in proc.stderr
    assert [b["name"] for b in manifest["background"]] == ["flow0-bulk", "flow1-poisson"]
    # DRWA ran for the Poisson flow only (the page has no --drwa): every window it computed was
    # for a connection on that flow's port, none for the page's or the bulk flow's.
    assert manifest["drwa"]["controller_errors"] == 0
    drwa_rows = (run_dir / "drwa.csv").read_text().splitlines()
    assert drwa_rows[0].split(",")[2] == "ue_port"
    assert {int(row.split(",")[2]) for row in drwa_rows[1:]} <= {UE_FLOW_BASE_PORT + 1}, drwa_rows[:5]
    # Nothing of the run is left: its namespaces, processes and DRWA's bpffs.
    ledger = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    namespaces = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    for entry in ledger:
        if entry["kind"] == "netns":
            assert entry["name"] not in namespaces
        elif entry["kind"] == "process":
            stat = Path(f"/proc/{entry['pid']}/stat")
            assert not stat.exists() or stat.read_text().split()[2] == "Z", entry
    assert str(run_dir) not in Path("/proc/mounts").read_text()
    print("\n".join(manifest["flows_summary"]))


@pytest.mark.root
def test_emu_run_starts_flows_on_ue0_and_reports_them(tmp_path: Path, clawbed_cli: Path) -> None:
    """`emu run --flow` as a replay's --flow: the flows run beside the command on UE 0 and their
    figures land in the output directory."""
    import csv

    out = tmp_path / "emu"
    result = subprocess.run([str(clawbed_cli), "emu", "run", "--rate", "12mbit", "--flow", "bulk",
                             "--flow", "poisson:rate_per_s=2,bytes=100000", "--seconds", "5", "--out", str(out),
                             "--", "sleep", "30"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CLAWBED_RUNS=str(tmp_path / "runs")))
    assert result.returncode == 0, result.stderr
    with (out / "flows.csv").open() as f:
        rows = {r["flow"]: r for r in csv.DictReader(f)}
    assert float(rows["flow0-bulk"]["mbit_s"]) > 5  # the bulk flow had most of 12 Mbit/s
    assert int(rows["flow1-poisson"]["fetches_done"]) >= 1
    assert "flow1-poisson" in result.stderr and "fetches done" in result.stderr
