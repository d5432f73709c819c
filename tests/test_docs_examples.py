"""Every shell example in the README and the guide is run, so the docs cannot rot.

Each ```sh block is preceded by a directive saying how it is checked:

- ``<!-- example: run -->``: run as it is, in a scratch folder that sees the repository's
  folders (``traces/``, ``orchestrator/``, …) and keeps what the example writes; exit 0 expected;
- ``<!-- example: root -->``: the same, as root (namespaces, the emulator): marked ``root``;
- ``<!-- example: shared -->``: the same, where the third-party data folder is (skipped without);
- ``<!-- example: slow -->``: too long for ``make test`` (a full replay, ``make bench``): every
  ``clawbed …`` line is parsed by the CLI itself (flags, choices, values: a renamed flag or a
  bad value fails) and every ``make TARGET`` names a target of the Makefile; the rest is shown
  as written.

A block without a directive fails the test, so a new example is checked from the day it is
written. Lines ending in ``\\`` continue; ``#`` starts a comment.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from clawbed.errors import ClawbedError
from clawbed.paths import REPO_ROOT, shared_data, shared_dir

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
KINDS = ("run", "root", "shared", "slow")
_DIRECTIVE = re.compile(r"<!--\s*example:\s*(\w+)\s*-->")


@dataclass(frozen=True)
class Example:
    path: Path
    line: int
    kind: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def examples(path: Path) -> list[Example]:
    found = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() in ("```sh", "```bash", "```shell"):
            start = i
            kind = None
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            if j >= 0 and (m := _DIRECTIVE.search(lines[j])):
                kind = m.group(1)
            body = []
            i += 1
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            found.append(Example(path, start + 1, kind, "\n".join(body)))
        i += 1
    return found


ALL = [e for p in DOCS for e in examples(p)]


def commands(text: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    out, current = [], ""
    for raw in text.splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(current.strip())
        current = ""
    return out


def test_every_example_says_how_it_is_checked() -> None:
    missing = [e.where for e in ALL if e.kind not in KINDS]
    assert not missing, f"shell examples without a directive <!-- example: {'|'.join(KINDS)} -->: {missing}"


def _scratch(tmp_path: Path) -> Path:
    """A folder that sees the repository's folders and files under their own names, and the
    shared data folder beside it as ``../shared`` (where a clone finds it), when there is one."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in REPO_ROOT.iterdir():
        if not entry.name.startswith(".") and entry.name not in ("runs",):
            (work / entry.name).symlink_to(entry)
    try:
        (tmp_path / "shared").symlink_to(shared_dir())
    except ClawbedError:
        pass  # no shared folder: the shared examples are skipped
    return work


def _run(example: Example, tmp_path: Path) -> None:
    work = _scratch(tmp_path)
    env = dict(os.environ, PATH=f"{REPO_ROOT / '.venv' / 'bin'}:{os.environ['PATH']}",
               CLAWBED_RUNS=str(tmp_path / "runs"), CLAWBED_STATE=str(tmp_path / "state"))
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", example.text], cwd=work, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"{example.where}: exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def _parse_clawbed(argv: list[str], where: str) -> None:
    from clawbed.cli import cli

    command: click.Command = cli
    args = argv
    name = "clawbed"
    while True:
        try:
            ctx = command.make_context(name, list(args), resilient_parsing=False)
        except click.BadParameter as e:
            if "does not exist" in str(e):  # a file of the user's, named for the example
                return
            raise AssertionError(f"{where}: {' '.join(argv)}: {e.format_message()}") from None
        except click.UsageError as e:
            raise AssertionError(f"{where}: {' '.join(argv)}: {e.format_message()}") from None
        if not isinstance(command, click.Group):
            return
        with warnings.catch_warnings():  # click 8.2+ deprecates protected_args; 9 puts all in args
            warnings.simplefilter("ignore", DeprecationWarning)
            rest = [*getattr(ctx, "protected_args", []), *ctx.args]
        if not rest:
            return
        sub_name, sub, args = command.resolve_command(ctx, rest)
        assert sub is not None and sub_name is not None, f"{where}: no command {rest[0]!r}"
        name, command = sub_name, sub


def _check_slow(example: Example) -> None:
    targets = set(re.findall(r"^([A-Za-z][\w-]*):", (REPO_ROOT / "Makefile").read_text(), re.M))
    for cmd in commands(example.text):
        words = shlex.split(cmd)
        while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value before a command
            words = words[1:]
        if words[:1] == ["nohup"]:
            words = words[1:]
        if words and words[0] in ("clawbed", ".venv/bin/clawbed"):
            cut = [w for w in words[1:]]
            for stop in ("|", ">", "&&", ";", "&"):
                if stop in cut:
                    cut = cut[: cut.index(stop)]
            _parse_clawbed(cut, example.where)
        elif words[:1] == ["make"]:
            for target in (w for w in words[1:] if not w.startswith("-") and "=" not in w):
                assert target in targets, f"{example.where}: make {target}: no such target in the Makefile"


@pytest.mark.parametrize("example", [e for e in ALL if e.kind == "slow"], ids=lambda e: e.where)
def test_slow_examples_parse(example: Example) -> None:
    _check_slow(example)


@pytest.mark.parametrize("example", [e for e in ALL if e.kind == "run"], ids=lambda e: e.where)
def test_examples_run(example: Example, tmp_path: Path) -> None:
    _run(example, tmp_path)


@pytest.mark.root
@pytest.mark.parametrize("example", [e for e in ALL if e.kind == "root"], ids=lambda e: e.where)
def test_root_examples_run(example: Example, tmp_path: Path) -> None:
    _run(example, tmp_path)


@pytest.mark.parametrize("example", [e for e in ALL if e.kind == "shared"], ids=lambda e: e.where)
def test_shared_examples_run(example: Example, tmp_path: Path) -> None:
    if shared_data("real-logs") is None:
        pytest.skip("needs the third-party recordings (CLAWBED_SHARED or ../shared beside the repository)")
    _run(example, tmp_path)


def test_the_checker_catches_a_renamed_flag() -> None:
    """The oracle works: a flag no command has is reported, naming the place."""
    bad = Example(REPO_ROOT / "README.md", 1, "slow", "clawbed replay --no-such-flag 3")
    with pytest.raises(AssertionError, match="README.md:1: replay --no-such-flag"):
        _check_slow(bad)
    with pytest.raises(AssertionError, match="no such target"):
        _check_slow(Example(REPO_ROOT / "README.md", 1, "slow", "make no-such-target"))
