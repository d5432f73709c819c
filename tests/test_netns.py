"""Owned namespaces, links and processes: created, used, and removed exactly (needs root)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from pyroute2 import netns

from clawbed.netns import Endpoint, Ledger, ResourceError, Resources, cleanup_from_ledger, new_run_id, resource_name


def leftovers(run_id: str) -> list[str]:
    """Namespaces and root-namespace links of this run (links inside a namespace go with it)."""
    prefix = f"cb{run_id}"
    names = [n for n in netns.listnetns() if n.startswith(prefix)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names += [line.split(": ")[1].split("@")[0] for line in links.splitlines() if f": {prefix}" in line]
    return names


def test_resource_names_are_prefixed_and_short() -> None:
    rid = new_run_id()
    assert resource_name(rid, "ue0").startswith("cb" + rid)
    with pytest.raises(ValueError, match="longer than 15"):
        resource_name(rid, "a-very-long-role")


@pytest.mark.root
def test_namespaces_and_veth_work_and_are_removed(tmp_path: Path) -> None:
    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        a, b = res.namespace("a"), res.namespace("b")
        res.veth(Endpoint(a, res.name("va"), "10.201.0.1"), Endpoint(b, res.name("vb"), "10.201.0.2"))
        out = a.run(["ping", "-c", "1", "-W", "2", "10.201.0.2"])
        assert "1 received" in out.stdout
        sleeper = res.process(a.command(["sleep", "30"]), name="sleeper")
        assert sleeper.alive()
        assert len(leftovers(rid)) == 2  # the namespaces; the veth ends live inside them
    assert leftovers(rid) == []
    assert not sleeper.alive()


@pytest.mark.root
def test_error_inside_the_run_still_removes_everything(tmp_path: Path) -> None:
    rid = new_run_id()
    with pytest.raises(RuntimeError):
        with Resources(rid, tmp_path / "ledger.jsonl") as res:
            res.namespace("x")
            raise RuntimeError("boom")
    assert leftovers(rid) == []


@pytest.mark.root
def test_failed_system_call_names_what_was_attempted(tmp_path: Path) -> None:
    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        a = res.namespace("a")
        with pytest.raises(Exception, match=f"in namespace cb{rid}a: false exited 1"):
            a.run(["false"])
    assert leftovers(rid) == []


def _child_script(rid: str, ledger: Path) -> str:
    return textwrap.dedent(f"""
        import time
        from clawbed.netns import Resources, Endpoint
        with Resources({rid!r}, __import__('pathlib').Path({str(ledger)!r})) as res:
            a, b = res.namespace("a"), res.namespace("b")
            res.veth(Endpoint(a, res.name("va")), Endpoint(b, res.name("vb")))
            # It renames itself, as nginx does: the ledger must still recognise it.
            sleeper = res.process(a.command(["bash", "-c", "exec -a renamed-sleeper sleep 60"]), name="sleeper")
            open({str(ledger) + ".pid"!r}, "w").write(str(sleeper.pid))
            print("ready", flush=True)
            time.sleep(60)
    """)


@pytest.mark.root
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_unwinds_the_run(tmp_path: Path, sig: signal.Signals) -> None:
    rid = new_run_id()
    child = subprocess.Popen([sys.executable, "-c", _child_script(rid, tmp_path / "l.jsonl")],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    assert len(leftovers(rid)) == 2  # the namespaces; the veth ends live inside them
    child.send_signal(sig)
    child.wait(timeout=10)
    assert leftovers(rid) == []


@pytest.mark.root
def test_ledger_cleans_up_after_sigkill(tmp_path: Path) -> None:
    rid = new_run_id()
    ledger = tmp_path / "l.jsonl"
    child = subprocess.Popen([sys.executable, "-c", _child_script(rid, ledger)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    child.kill()
    child.wait(timeout=10)
    assert len(leftovers(rid)) == 2  # the namespaces; the veth ends live inside them
    sleeper_pid = int(Path(str(ledger) + ".pid").read_text())
    removed = cleanup_from_ledger(ledger)
    assert f"namespace cb{rid}a" in removed
    assert f"process sleeper (pid {sleeper_pid})" in removed
    time.sleep(0.05)
    assert leftovers(rid) == []


def test_a_recorded_process_of_another_library_is_stopped_by_its_own_signal(tmp_path: Path) -> None:
    """As a Mininet host's shell is: started by another library, ignoring SIGTERM (an
    interactive bash does), recorded with SIGHUP for ``clawbed cleanup``."""
    ledger = tmp_path / "l.jsonl"
    shell = subprocess.Popen(["bash", "-c", "trap '' TERM; exec sleep 60"])
    try:
        # Only its ledger is used, as a SIGKILLed run leaves it.
        Resources(new_run_id(), ledger).record_process(shell.pid, name="shell", argv=shell.args,
                                                       stop_signal=signal.SIGHUP)
        assert cleanup_from_ledger(ledger) == [f"process shell (pid {shell.pid})"]
        assert shell.wait(timeout=5) == -signal.SIGHUP
    finally:
        shell.kill()
        shell.wait()


@pytest.mark.root
def test_socket_in_namespace_reaches_that_namespaces_loopback(tmp_path: Path) -> None:
    from clawbed.netns import socket_in_namespace

    rid = new_run_id()
    with Resources(rid, tmp_path / "ledger.jsonl") as res:
        a = res.namespace("a")
        server = res.process(a.command([sys.executable, "-c", textwrap.dedent("""
            import socket
            s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", 47011)); s.listen()
            c, _ = s.accept(); c.sendall(b"inside"); c.close()
        """)]), name="server")
        sock = socket_in_namespace(a.name)
        deadline = time.monotonic() + 5
        while True:
            try:
                sock.connect(("127.0.0.1", 47011))
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
                sock.close()
                sock = socket_in_namespace(a.name)
        assert sock.recv(16) == b"inside"
        sock.close()
        assert server.popen.wait(timeout=5) == 0


def test_a_torn_last_ledger_line_is_skipped_and_a_bad_middle_line_named(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.jsonl")
    ledger.record("netns", "cbzzzza")
    with ledger.path.open("a") as f:
        f.write('{"kind": "netns", "na')  # killed mid-write
    assert [e["name"] for e in ledger.entries()] == ["cbzzzza"]
    assert cleanup_from_ledger(ledger.path) == []  # nothing of it exists; no error either
    ledger.path.write_text('{"kind": "netns", "name": "a"}\nnot json\n{"kind": "netns", "name": "b"}\n')
    with pytest.raises(ResourceError, match=r"l.jsonl:2: not a ledger entry"):
        ledger.entries()
