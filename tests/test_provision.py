"""Every program the code runs is installed by ``scripts/provision.sh``.

A machine that already holds a package hides a missing install step (it happened: ``nft``
ran in the cross-traffic code but ``nftables`` was never provisioned). This test reads the
code, not the machine: it collects the programs the Python sources start (the first word of
every literal command list handed to a process-starting call, and every ``shutil.which``
name) and the commands of the project's shell scripts, maps each to the Debian package that
provides it, and fails on a program it cannot map or whose package the script does not
install. ``make check-fresh`` proves the same on a fresh root file system.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from clawbed.paths import REPO_ROOT

#: Program → Debian package (bookworm) that provides it. "essential": in every Debian root
#: file system (debootstrap's minbase), "built": the project's own build output.
PACKAGE_OF = {
    "ip": "iproute2", "tc": "iproute2", "ss": "iproute2",
    "nft": "nftables", "iptables": "iptables", "ethtool": "ethtool",
    "ping": "iputils-ping", "iperf3": "iperf3", "nginx": "nginx", "openssl": "openssl",
    "chromium": "chromium", "bpftool": "bpftool", "clang": "clang", "llvm-strip": "llvm",
    "influxd": "influxdb", "influx": "influxdb-client", "mnexec": "mininet", "git": "git",
    "vagrant": "vagrant", "debootstrap": "debootstrap", "tcpdump": "tcpdump",
    # Mahimahi's link emulator: Debian 12 has no package; `make bench` compares with it only
    # when one is installed (MM_LINK or on PATH) and says so otherwise.
    "mm-link": "optional",
    "sh": "essential", "bash": "essential", "cat": "essential", "false": "essential", "true": "essential",
    "env": "essential", "sysctl": "procps",
    "mount": "essential", "umount": "essential", "kill": "procps", "sleep": "essential",
    # passwd (Priority: required, so in minbase): the emulator bench makes the user mm-link runs as.
    "useradd": "essential", "userdel": "essential", "setpriv": "essential",
    "rustc": "built", "cargo": "built", "clawbed-emu": "built", "cbtrace": "built",
}

#: Programs that libraries the project uses start on its behalf (not visible as literals).
STARTED_BY_LIBRARIES = {
    "mnexec": "Mininet starts every host's shell through it",
    "chromium": "Playwright launches it (replay/loaders/browser.py: executable_path)",
}

#: Calls whose first argument is a command line.
PROCESS_CALLS = {"run", "Popen", "check_output", "check_call", "call", "OwnedProcess", "popen", "cmd",
                 "create_subprocess_exec", "spawn"}

SOURCE_DIRS = ("claw", "clawbed", "dashboards", "emulator", "orchestrator", "replay", "traces", "tests")


def _call_name(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _head(node: ast.expr | None) -> str | None:
    """The program of a literal command list (``["nginx", "-t"]``), else None."""
    if isinstance(node, ast.List) and node.elts:
        head = node.elts[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str) and not head.value.startswith("-"):
            return Path(head.value).name
    return None


def _command_names(node: ast.expr | None) -> set[str]:
    """Variables whose value starts a command: ``argv`` or ``[*argv, "-t"]`` (only a list's
    first element names the program)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.List) and node.elts:
        head = node.elts[0]
        if isinstance(head, ast.Starred) and isinstance(head.value, ast.Name):
            return {head.value.id}
    return set()


def programs_in_python() -> dict[str, str]:
    """Program → the first place (file:line) that starts it: a literal command list handed
    to a process-starting call, assigned to a variable that is handed to one, or returned by
    a function whose name says it makes a command (``*_argv``); and ``shutil.which`` names."""
    found: dict[str, str] = {}
    for folder in SOURCE_DIRS:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            where = str(path.relative_to(REPO_ROOT))
            for func in [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]:
                calls = [n for n in ast.walk(func) if isinstance(n, ast.Call)]
                commands = {c.args[0] for c in calls if _call_name(c) in PROCESS_CALLS and c.args}
                names = set().union(*(_command_names(c) for c in commands)) if commands else set()
                candidates: list[ast.expr] = list(commands)
                for node in ast.walk(func):
                    if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names
                                                            for t in node.targets):
                        candidates.append(node.value)
                    elif (isinstance(node, ast.Return) and isinstance(func, ast.FunctionDef)
                          and "argv" in func.name):
                        candidates.append(node.value)  # type: ignore[arg-type]
                for cand in candidates:
                    program = _head(cand)
                    if program:
                        found.setdefault(program, f"{where}:{cand.lineno}")
                for c in calls:
                    first = c.args[0] if c.args else None
                    if (_call_name(c) == "which" and isinstance(first, ast.Constant)
                            and isinstance(first.value, str)):
                        found.setdefault(first.value, f"{where}:{c.lineno}")
    return found


def provisioned_packages() -> set[str]:
    text = (REPO_ROOT / "scripts" / "provision.sh").read_text()
    match = re.search(r"^apt_packages=\((.*?)^\)", text, re.MULTILINE | re.DOTALL)
    assert match, "scripts/provision.sh has no apt_packages=( … ) list"
    return set(match.group(1).split())


def test_the_scan_sees_the_programs_it_must() -> None:
    """The oracle is not empty: programs known to be run are found where they are run."""
    found = programs_in_python()
    for program in ("ip", "tc", "nft", "iperf3", "nginx", "ping", "influxd", "ss", "openssl"):
        assert program in found, program


def test_every_program_the_code_runs_is_provisioned() -> None:
    packages = provisioned_packages()
    used = {**programs_in_python(), **{p: why for p, why in STARTED_BY_LIBRARIES.items()}}
    problems = []
    for program, where in sorted(used.items()):
        package = PACKAGE_OF.get(program)
        if package is None:
            problems.append(f"{program} ({where}): unknown here; add it to PACKAGE_OF with its Debian package "
                            "and install that package in scripts/provision.sh")
        elif package not in ("essential", "built", "optional") and package not in packages:
            problems.append(f"{program} ({where}): package {package} is not in provision.sh's apt_packages")
    assert not problems, "\n".join(problems)


def test_the_bpf_build_script_tools_are_provisioned() -> None:
    """claw/bpf/build.sh compiles with clang and generates vmlinux.h with bpftool."""
    script = (REPO_ROOT / "claw" / "bpf" / "build.sh").read_text()
    packages = provisioned_packages()
    for program in ("clang", "bpftool"):
        assert re.search(rf"\b{program}\b", script), program
        assert PACKAGE_OF[program] in packages
