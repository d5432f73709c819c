"""Every link in the README and the guide leads somewhere: a file or folder of the repository,
and, for ``page.md#anchor``, a heading of that page (GitHub's anchors). Links to the web are
not fetched. The CLI reference names every command the CLI has."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from clawbed.paths import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces → '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = re.sub(r"[`*~]|<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path.read_text()):
        if m := _HEADING.match(line):
            base = slug(m.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text()):
        found.add(m.group(1))
    return found


def broken_links(path: Path) -> list[str]:
    """Each relative link of PATH that leads nowhere, as 'file:line: target: why'."""
    bad = []
    where = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    for n, line in prose_lines(path.read_text()):
        # A link inside inline code is an example, not a link; a code span in a link's text is not.
        spans = [s.span() for s in _CODE_SPAN.finditer(line)]
        for m in _LINK.finditer(line):
            if any(a <= m.start() < b for a, b in spans):
                continue
            target = m.group(1)
            if re.match(r"[a-zA-Z][\w+.-]*:", target):  # http:, https:, mailto:: not fetched
                continue
            file_part, _, anchor = target.partition("#")
            dest = (path.parent / file_part).resolve() if file_part else path
            if not dest.is_relative_to(REPO_ROOT.resolve()) and path.is_relative_to(REPO_ROOT):
                bad.append(f"{where}:{n}: {target}: outside the repository")
            elif not dest.exists():
                bad.append(f"{where}:{n}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{where}:{n}: {target}: no heading #{anchor} in {dest.name}")
    return bad


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_link_resolves(path: Path) -> None:
    bad = broken_links(path)
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_the_checker_finds_a_broken_link_and_anchor(tmp_path: Path) -> None:
    """The oracle works: a missing file, a missing heading and a link in code are told apart."""
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n## Past runs\n\n[ok](#past-runs) [gone](nope.md) [anchor](#no-such)\n"
                    "`[in code](nope.md)`\n```\n[in a block](nope.md)\n```\n[self](page.md#a-page)\n")
    bad = broken_links(page)
    assert len(bad) == 2, bad
    assert "nope.md: no such file" in bad[0] and "#no-such" in bad[1]


def test_slugs_follow_githubs_anchors() -> None:
    assert slug("Topologies: the wired side, with Mininet") == "topologies-the-wired-side-with-mininet"
    assert slug("`clawbed emu run`") == "clawbed-emu-run"
    assert slug("Where CLAW's gain comes from") == "where-claws-gain-comes-from"
    assert slug("Install, test, and where things go") == "install-test-and-where-things-go"


def test_the_cli_reference_names_every_command() -> None:
    """docs/reference/cli.md has a row for every command the CLI has (a new command is documented)."""
    from clawbed.cli import cli

    text = (REPO_ROOT / "docs" / "reference" / "cli.md").read_text()
    missing = []

    def walk(group: click.Group, prefix: str, ctx: click.Context) -> None:
        for name in group.list_commands(ctx):
            sub = group.get_command(ctx, name)
            full = f"{prefix} {name}"
            if isinstance(sub, click.Group):
                walk(sub, full, click.Context(sub, info_name=name, parent=ctx))
                if not sub.invoke_without_command:
                    continue
            if f"`{full}`" not in text:
                missing.append(full)

    walk(cli, "clawbed", click.Context(cli, info_name="clawbed"))
    assert not missing, f"docs/reference/cli.md does not name: {missing}"
