"""The loader's command building and bookkeeping, with a stand-in namespace that records
commands (the kernel tests run the same code for real)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import clawbed.netns as netns_mod
from clawbed.claw import bpfobjects
from clawbed.claw.server import loader
from clawbed.claw.server.sysctls import SERVER_SYSCTLS, apply_server_sysctls, restore_sysctls
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


class FakeTc:
    """Stands in for ``tc -n NETNS ...``: records the arguments, answers from ``replies``
    (first matching prefix), fails the command starting with ``fail``."""

    def __init__(self, replies: dict[tuple[str, ...], str] | None = None, fail: tuple[str, ...] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.replies = replies or {}
        self.fail = fail

    def __call__(self, netns: str, *args: str) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(args))
        if self.fail and args[: len(self.fail)] == self.fail:
            return subprocess.CompletedProcess(args, 2, "", "RTNETLINK answers: nope")
        out = next((v for k, v in self.replies.items() if args[: len(k)] == k), "")
        return subprocess.CompletedProcess(args, 0, out, "")


def test_tc_program_adds_clsact_only_when_missing_and_removes_only_its_own(tmp_path: Path, monkeypatch) -> None:
    removed: list[tuple] = []
    monkeypatch.setattr(bpfobjects, "remove_tc_filter", lambda *a: removed.append(a) or True)
    ledger = Ledger(tmp_path / "ledger.jsonl")
    tc = FakeTc(replies={("qdisc", "show"): "qdisc noqueue 0: root refcnt 2\n"})
    monkeypatch.setattr(bpfobjects, "tc_in", tc)
    prog = bpfobjects.TcProgram("cbtestns", "cbxxs0", Path("/run/x/prog"), direction="ingress", pref=loader.TC_PREF,
                            ledger=ledger)
    assert tc.calls[1] == ["qdisc", "add", "dev", "cbxxs0", "clsact"]
    assert tc.calls[2] == ["filter", "add", "dev", "cbxxs0", "ingress", "pref", str(loader.TC_PREF), "bpf",
                           "object-pinned", "/run/x/prog", "direct-action"]
    prog.close()
    prog.close()
    assert removed == [("cbtestns", "cbxxs0", "ingress", loader.TC_PREF, True)]
    entry = ledger.entries()[0]
    assert entry == {"kind": "tc-filter", "name": "cbxxs0", "netns": "cbtestns", "direction": "ingress",
                     "pref": loader.TC_PREF, "qdisc": True}

    removed.clear()
    tc = FakeTc(replies={("qdisc", "show"): "qdisc clsact ffff: parent ffff:fff1\n"})
    monkeypatch.setattr(bpfobjects, "tc_in", tc)
    bpfobjects.TcProgram("cbtestns", "cbxxs0", Path("/p"), direction="egress", pref=7).close()
    assert not any(c[:2] == ["qdisc", "add"] for c in tc.calls)
    assert removed == [("cbtestns", "cbxxs0", "egress", 7, False)]


def test_tc_program_failure_names_the_command_and_undoes_the_qdisc(monkeypatch) -> None:
    removed: list[tuple] = []
    monkeypatch.setattr(bpfobjects, "remove_tc_filter", lambda *a: removed.append(a) or True)
    monkeypatch.setattr(bpfobjects, "tc_in", FakeTc(fail=("filter", "add")))
    with pytest.raises(ResourceError, match="tc filter add dev cbxxs0"):
        bpfobjects.TcProgram("cbtestns", "cbxxs0", Path("/p"), direction="ingress", pref=loader.TC_PREF)
    assert removed == [("cbtestns", "cbxxs0", "ingress", loader.TC_PREF, True)]
    with pytest.raises(ValueError):
        bpfobjects.TcProgram("cbtestns", "d", Path("/p"), direction="sideways", pref=1)


@pytest.mark.parametrize("arphrd,l2_len", [("1", 14), ("772", 14), ("65534", 0)])
def test_device_l2_len_from_link_type(monkeypatch, arphrd: str, l2_len: int) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, arphrd + "\n", "")

    monkeypatch.setattr(bpfobjects.subprocess, "run", run)
    assert bpfobjects.device_l2_len("cbtestns", "cbxxt0") == l2_len
    assert calls == [["ip", "netns", "exec", "cbtestns", "cat", "/sys/class/net/cbxxt0/type"]]


def test_device_l2_len_refuses_other_link_types(monkeypatch) -> None:
    monkeypatch.setattr(bpfobjects.subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 0, "776\n", ""))
    with pytest.raises(ResourceError, match="link type 776"):
        bpfobjects.device_l2_len("cbtestns", "cbxxg0")


def test_a_missing_object_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(ResourceError, match="build.sh"):
        bpfobjects.object_path("ack_mark_egress.bpf.o", tmp_path)


def test_build_command_and_objects_dir(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CLAWBED_BPF_DIR", str(tmp_path))
    assert bpfobjects.objects_dir() == tmp_path
    cmd = bpfobjects.build_command()
    assert cmd[0] == "bash" and cmd[1].endswith("claw/bpf/build.sh") and cmd[2] == str(tmp_path)


def test_bpffs_source_must_be_prefixed(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must start with 'cb'"):
        bpfobjects.BpffsMount(tmp_path / "m", "claw")


def test_unknown_variant_is_refused(tmp_path: Path) -> None:
    # Any built <variant>_cc.bpf.o loads (vegas too: tests/test_vegas.py); one never built says how to build it.
    with pytest.raises(ResourceError, match="build.sh"):
        loader.CongestionControl(None, "nosuch", name="nosuch_ab12", obj_dir=tmp_path)  # type: ignore[arg-type]
    for variant in ("Vegas", "claw_cc", "", "1x"):
        with pytest.raises(ValueError, match="unknown congestion control variant"):
            loader.cc_name(variant, "ab12")


def test_cc_names_are_the_runs_own_and_fit_the_kernels_limit() -> None:
    assert loader.cc_name("claw", "ab12") == "claw_ab12" and loader.cc_name("cqic", "ab12") == "cqic_ab12"
    assert loader.cc_name("claw", "w" * 10) == "claw_" + "w" * 10          # 15 characters: TCP_CA_NAME_MAX - 1
    for run_id in ("w" * 11, "AB12", "a-b"):
        with pytest.raises(ValueError, match="congestion control name"):
            loader.cc_name("claw", run_id)
    with pytest.raises(ValueError, match="congestion control name"):
        loader.CongestionControl(None, "claw", name="claw with space")  # type: ignore[arg-type]


def _object(tmp_path: Path, section: str, data: bytes) -> Path:
    """A minimal 64-bit little-endian ELF file: a null section, ``section`` holding
    ``data``, and the section-name table."""
    import struct
    names = b"\0" + section.encode() + b"\0.shstrtab\0"
    data_at, names_at = 64, 64 + len(data)
    shoff = names_at + len(names)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 2)
    sections = (bytes(64) + struct.pack("<IIQQQQIIQQ", 1, 1, 0, 0, data_at, len(data), 0, 0, 8, 0)
                + struct.pack("<IIQQQQIIQQ", 2 + len(section), 3, 0, 0, names_at, len(names), 0, 0, 1, 0))
    path = tmp_path / "x_cc.bpf.o"
    path.write_bytes(bytes(header) + data + names + sections)
    return path


def test_struct_ops_image_renames_the_one_compiled_name(tmp_path: Path) -> None:
    ops = bytes(88) + b"claw".ljust(16, b"\0") + bytes(40) + b"\x01\0\0\0"
    path = _object(tmp_path, ".struct_ops", ops)
    image = loader.struct_ops_image(path, "claw", "claw_ab12")
    assert len(image) == path.stat().st_size
    assert image == path.read_bytes().replace(b"claw".ljust(16, b"\0"), b"claw_ab12".ljust(16, b"\0"))
    with pytest.raises(ResourceError, match="occurs 0 times"):
        loader.struct_ops_image(path, "cqic", "cqic_ab12")
    twice = _object(tmp_path, ".struct_ops", ops + ops)
    with pytest.raises(ResourceError, match="occurs 2 times"):
        loader.struct_ops_image(twice, "claw", "claw_ab12")
    other = _object(tmp_path, ".data", ops)
    with pytest.raises(ResourceError, match="expected one .struct_ops section, found 0"):
        loader.struct_ops_image(other, "claw", "claw_ab12")
    (tmp_path / "junk.o").write_bytes(b"not an ELF file")
    with pytest.raises(ResourceError, match="not a 64-bit little-endian ELF"):
        loader.struct_ops_image(tmp_path / "junk.o", "claw", "claw_ab12")


def test_the_ledger_undoes_bpf_kinds_itself(tmp_path: Path) -> None:
    pin = tmp_path / "claw_peers"
    pin.write_text("")
    assert netns_mod.undo_entry({"kind": "bpf-pin", "name": str(pin)}) == f"BPF pin {pin}"
    assert not pin.exists()
    assert netns_mod.undo_entry({"kind": "bpf-pin", "name": str(pin)}) is None
    assert netns_mod.undo_entry({"kind": "struct_ops", "name": "claw", "pin": str(tmp_path / "nolink")}) is None
    assert netns_mod.undo_entry({"kind": "bpffs", "name": "cbxxbp", "path": str(tmp_path)}) is None  # not a bpffs
    assert netns_mod.undo_entry({"kind": "netns", "name": "cbxx"}) is None  # not a BPF kind
    # Every kind the BPF modules record is one the ledger undoes, with nothing imported first.
    assert {"bpffs", "bpf-pin", "tc-filter", "struct_ops", "cc-default"} <= netns_mod.BPF_AND_TC_KINDS


@pytest.mark.root
def test_server_sysctls_are_set_and_previous_values_returned(tmp_path: Path) -> None:
    """Set in a real namespace from a thread inside it (no ip netns exec), read back by a
    process in it, and put back; the root namespace's are untouched."""
    from clawbed.netns import Resources, new_run_id

    root_before = Path("/proc/sys/net/ipv4/tcp_wmem").read_text()
    with Resources(new_run_id(), tmp_path / "ledger.jsonl") as res:
        ns = res.namespace("s")

        def shown(key: str) -> str:
            return " ".join(ns.run(["cat", "/proc/sys/" + key.replace(".", "/")]).stdout.split())

        before = {k: shown(k) for k in SERVER_SYSCTLS}
        previous = apply_server_sysctls(ns, {"net.ipv4.tcp_slow_start_after_idle": "1"})  # type: ignore[arg-type]
        assert previous == before
        assert shown("net.ipv4.tcp_no_metrics_save") == "1"
        assert shown("net.ipv4.tcp_slow_start_after_idle") == "1"  # the override
        wmem = [int(v) for v in shown("net.ipv4.tcp_wmem").split()]
        assert wmem[2] >= 2 * 19_000_000  # twice the largest LTE W_claw
        restore_sysctls(ns, previous)
        assert {k: shown(k) for k in SERVER_SYSCTLS} == before
        with pytest.raises(ResourceError, match="tcp_wmem"):
            apply_server_sysctls(ns, {"net.ipv4.tcp_wmem": "not numbers"})  # type: ignore[arg-type]
    assert Path("/proc/sys/net/ipv4/tcp_wmem").read_text() == root_before
