"""CLAW's per-load set-up: the scheme is ready when its processes say they can do their job
(the agent serving, each client with its ACK marker attached, its feedback socket open and
its diag feed connected), before the client's first estimate. A load started at once still
gets the client's feedback to the server during it; a client that cannot reach its feed
fails the set-up with an error that names it, and leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from clawbed.paths import REPO_ROOT
from clawbed.replay.rundir import read_csv, read_results

pytestmark = pytest.mark.root

TRACE = REPO_ROOT / "traces" / "samples" / "busy-cell.cbt"
#: 1.25 MB in 70 objects: a load of a second or more on the busy cell, longer than the phone
#: feed's first flush (300 ms) and a feedback period after it.
PAGE = "set-10"


def test_a_load_started_right_after_readiness_gets_the_clients_feedback_during_it(clawbed_cli: Path,
                                                                                  tmp_path: Path) -> None:
    proc = subprocess.run([str(clawbed_cli), "replay", "--trace", str(TRACE), "--page", PAGE, "--schemes", "claw",
                           "--runs", "1", "--loader", "h2", "--runs-dir", str(tmp_path), "--name", "ready"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run_dir = tmp_path / "ready"
    (record,) = read_results(run_dir)
    assert record.ok, record.error
    load_dir = run_dir / record.load_dir
    # The agent accepted and answered the client's reports.
    agent = json.loads((load_dir / "claw-agent.json").read_text())
    assert agent["accepted"] > 0 and agent["echoes"] > 0 and agent["rejected_total"] == 0, agent
    # The CC applied them during the load: W_claw is sampled only once a report is in force;
    # before, the CC runs on its Cubic window (no feedback), as it does with no client.
    tcp = read_csv(load_dir / "tcp.csv")
    assert record.t_start_unix_s is not None and record.t_end_unix_s is not None
    during = [w for t, w in zip(tcp["t_unix_s"], tcp["w_claw_bytes"])
              if record.t_start_unix_s <= float(t) <= record.t_end_unix_s]
    with_feedback = [w for w in during if w]
    print(f"set-up {record.overhead_ms['scheme_setup']:.0f} ms, PLT {record.plt_ms:.0f} ms, agent accepted "
          f"{agent['accepted']}, samples during the load {len(during)}, with feedback in force {len(with_feedback)}")
    assert with_feedback, "no sample of the load had the client's W_claw in force"


@pytest.mark.parametrize("impl", ["fast", "reference"])
def test_a_client_whose_feed_cannot_connect_fails_the_setup_clearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   impl: str) -> None:
    from clawbed.claw.schemes import SchemeContext, UeEndpoint, get_scheme
    from clawbed.claw.server.loader import available_congestion_controls
    from clawbed.emulator.process import EmulatedCell
    from clawbed.netns import ResourceError

    monkeypatch.setenv("CLAWBED_CLAW_CLIENT", impl)  # the scheme's clients inherit it
    with EmulatedCell(1, tmp_path / "cell", ue={"trace": str(TRACE)}, mode="cell") as cell:
        topo = cell.topo
        ue = topo.ues[0]
        wrong_port = cell.emulator.diag_port(0) + 7  # nothing listens there
        ctx = SchemeContext(resources=cell.res, run_dir=tmp_path, server_ns=topo.core.ns,
                            server_address=str(topo.core.address), server_device=topo.core.tun,
                            ues=[UeEndpoint(ns=ue.ns, address=str(ue.address), index=0, device=ue.tun,
                                            diag_port=wrong_port)],
                            client_args=["--connect-timeout-s", "0.5"])
        scheme = get_scheme("claw")()
        scheme.setup(ctx)
        name = scheme.server_cc
        try:
            with pytest.raises(ResourceError) as failed:
                scheme.start_clients(ctx, timeout_s=30)
            message = str(failed.value)
            print(message)
            # Which client, what it could not do, and where its log is.
            assert "claw-client-ue0 exited with status 1 before it was ready" in message
            assert f"diag feed 127.0.0.1:{wrong_port}" in message and "connection refused" in message
            assert str(tmp_path / "claw-client-ue0.log") in message
        finally:
            scheme.teardown()
        assert name not in available_congestion_controls()
        assert not scheme.agent.alive()
        assert str(tmp_path) not in Path("/proc/mounts").read_text(), "a bpffs of the scheme is still mounted"
        assert not (tmp_path / "claw-ready").exists()


def test_an_agent_that_cannot_serve_fails_the_setup_clearly(tmp_path: Path) -> None:
    import socket

    from clawbed.claw.schemes import SchemeContext, UeEndpoint, get_scheme
    from clawbed.claw.server.loader import available_congestion_controls
    from clawbed.emulator.process import EmulatedCell
    from clawbed.netns import ResourceError, socket_in_namespace

    with EmulatedCell(1, tmp_path / "cell", ue={"trace": str(TRACE)}, mode="cell") as cell:
        topo = cell.topo
        ue = topo.ues[0]
        ctx = SchemeContext(resources=cell.res, run_dir=tmp_path, server_ns=topo.core.ns,
                            server_address=str(topo.core.address), server_device=topo.core.tun,
                            ues=[UeEndpoint(ns=ue.ns, address=str(ue.address), index=0, device=ue.tun,
                                            diag_port=cell.emulator.diag_port(0))])
        taken = socket_in_namespace(topo.core.name, socket.AF_INET, socket.SOCK_DGRAM)
        taken.bind((ctx.server_address, ctx.agent_port))  # the agent's port, held by someone else
        scheme = get_scheme("claw")()
        try:
            with pytest.raises(ResourceError) as failed:
                scheme.setup(ctx)
        finally:
            taken.close()
        message = str(failed.value)
        print(message)
        assert "the claw agent exited with status 1 before it was ready" in message
        assert f"binding UDP {ctx.server_address}:{ctx.agent_port}" in message
        assert str(tmp_path / "claw-agent.log") in message
        # What the set-up had made is gone again.
        # (This run's own: other runs on the machine may register theirs meanwhile.)
        assert not [cc for cc in available_congestion_controls() if cc.startswith(f"claw_{cell.res.run_id}")]
        assert str(tmp_path) not in Path("/proc/mounts").read_text()
