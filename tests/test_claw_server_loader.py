"""The loader's command building and bookkeeping, with a stand-in namespace that records
commands (the kernel tests run the same code for real)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from clawbed.claw.server import loader
from clawbed.claw.server.sysctls import SERVER_SYSCTLS, apply_server_sysctls
from clawbed.netns import Ledger, ResourceError


class FakeNs:
    """Records ``run`` calls; answers from ``replies`` (first matching prefix), else empty."""

    def __init__(self, name: str = "cbtestns", replies: dict[tuple[str, ...], str] | None = None,
                 fail: tuple[str, ...] | None = None) -> None:
        self.name = name
        self.path = f"/var/run/netns/{name}"
        self.calls: list[list[str]] = []
        self.replies = replies or {}
        self.fail = fail

    def run(self, argv: list[str], *, check: bool = True, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if self.fail and tuple(argv[: len(self.fail)]) == self.fail:
            raise ResourceError(f"in namespace {self.name}: {' '.join(argv)} exited 2: RTNETLINK answers: nope")
        out = next((v for k, v in self.replies.items() if tuple(argv[: len(k)]) == k), "")
        return subprocess.CompletedProcess(argv, 0, out, "")

    def sysctl(self, key: str, value: str) -> None:
        self.calls.append(["sysctl", key, str(value)])


def test_tc_program_adds_clsact_only_when_missing_and_removes_only_its_own(tmp_path: Path, monkeypatch) -> None:
    removed: list[tuple] = []
    monkeypatch.setattr(loader, "remove_tc_filter", lambda *a: removed.append(a) or True)
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ns = FakeNs(replies={("tc", "qdisc", "show"): "qdisc noqueue 0: root refcnt 2\n"})
    tc = loader.TcProgram(ns, "cbxxs0", Path("/run/x/prog"), ledger=ledger)  # type: ignore[arg-type]
    assert ns.calls[1] == ["tc", "qdisc", "add", "dev", "cbxxs0", "clsact"]
    assert ns.calls[2] == ["tc", "filter", "add", "dev", "cbxxs0", "ingress", "pref", str(loader.TC_PREF), "bpf",
                           "object-pinned", "/run/x/prog", "direct-action"]
    tc.close()
    tc.close()
    assert removed == [("cbtestns", "cbxxs0", "ingress", loader.TC_PREF, True)]
    entry = ledger.entries()[0]
    assert entry == {"kind": "tc-filter", "name": "cbxxs0", "netns": "cbtestns", "direction": "ingress",
                     "pref": loader.TC_PREF, "qdisc": True}

    removed.clear()
    ns = FakeNs(replies={("tc", "qdisc", "show"): "qdisc clsact ffff: parent ffff:fff1\n"})
    loader.TcProgram(ns, "cbxxs0", Path("/p"), direction="egress").close()  # type: ignore[arg-type]
    assert not any(c[:3] == ["tc", "qdisc", "add"] for c in ns.calls)
    assert removed == [("cbtestns", "cbxxs0", "egress", loader.TC_PREF, False)]


def test_tc_program_failure_names_the_command_and_undoes_the_qdisc(monkeypatch) -> None:
    removed: list[tuple] = []
    monkeypatch.setattr(loader, "remove_tc_filter", lambda *a: removed.append(a) or True)
    ns = FakeNs(fail=("tc", "filter", "add"))
    with pytest.raises(ResourceError, match="tc filter add dev cbxxs0"):
        loader.TcProgram(ns, "cbxxs0", Path("/p"))  # type: ignore[arg-type]
    assert removed == [("cbtestns", "cbxxs0", "ingress", loader.TC_PREF, True)]
    with pytest.raises(ValueError):
        loader.TcProgram(FakeNs(), "d", Path("/p"), direction="sideways")  # type: ignore[arg-type]


@pytest.mark.parametrize("arphrd,kind", [("1", "eth"), ("772", "eth"), ("65534", "l3")])
def test_device_kind_from_link_type(arphrd: str, kind: str) -> None:
    ns = FakeNs(replies={("cat",): arphrd + "\n"})
    assert loader.device_l2_kind(ns, "cbxxt0") == kind  # type: ignore[arg-type]
    assert ns.calls == [["cat", "/sys/class/net/cbxxt0/type"]]


def test_device_kind_refuses_other_link_types() -> None:
    with pytest.raises(ResourceError, match="link type 776"):
        loader.device_l2_kind(FakeNs(replies={("cat",): "776"}), "cbxxg0")  # type: ignore[arg-type]


def test_build_command_and_objects_dir(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLAWBED_BPF_DIR", str(tmp_path))
    assert loader.objects_dir() == tmp_path
    cmd = loader.build_command()
    assert cmd[0] == "bash" and cmd[1].endswith("claw/bpf/build.sh") and cmd[2] == str(tmp_path)


def test_bpffs_source_must_be_prefixed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must start with 'cb'"):
        loader.BpffsMount(tmp_path / "m", "claw")


def test_unknown_variant_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown CLAW variant"):
        loader.CongestionControl(None, "vegas")  # type: ignore[arg-type]


def test_cleanup_entry_removes_a_leftover_pin_and_ignores_what_is_gone(tmp_path: Path) -> None:
    pin = tmp_path / "claw_peers"
    pin.write_text("")
    assert loader.cleanup_entry({"kind": "bpf-pin", "name": str(pin)}) == f"BPF pin {pin}"
    assert not pin.exists()
    assert loader.cleanup_entry({"kind": "bpf-pin", "name": str(pin)}) is None
    assert loader.cleanup_entry({"kind": "struct_ops", "name": "claw", "pin": str(tmp_path / "nolink")}) is None
    assert loader.cleanup_entry({"kind": "bpffs", "name": "cbxxbp", "path": str(tmp_path)}) is None  # not a bpffs
    assert loader.cleanup_entry({"kind": "netns", "name": "cbxx"}) is None  # not ours


def test_server_sysctls_are_set_and_previous_values_returned() -> None:
    ns = FakeNs(replies={("cat",): "0\n"})
    previous = apply_server_sysctls(ns, {"net.ipv4.tcp_slow_start_after_idle": "1"})  # type: ignore[arg-type]
    assert set(previous) == set(SERVER_SYSCTLS)
    sets = {c[1]: c[2] for c in ns.calls if c[0] == "sysctl"}
    assert sets["net.ipv4.tcp_no_metrics_save"] == "1"
    assert sets["net.ipv4.tcp_slow_start_after_idle"] == "1"  # the override
    wmem = [int(v) for v in sets["net.ipv4.tcp_wmem"].split()]
    assert wmem[2] >= 2 * 19_000_000  # twice the largest LTE W_claw
