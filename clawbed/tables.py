"""Terminal tables that stay readable in an 80-column terminal, and listings that print as
a table, CSV, JSON or Markdown.

Rich cuts a cell or header that does not fit with an ellipsis ("reduct…"), losing what it
said, or folds a narrow column until every word sits on a line of its own. Every table the
CLI prints is a :class:`TerminalTable`: a light frame (fewer columns of rule characters) and
text that wraps instead of being cut.

A :class:`Listing` (rows of plain values under named columns) goes further: it
lays itself out for the terminal's width deliberately. Each column says how it gives way:
``keep`` (ids, numbers: never wrapped), ``wrap`` (prose: wrapped at words, never narrower
than its ``min_width``) or ``cut`` (one line, shortened at a word with "…"; the listing's
other formats and a ``show`` command have the whole text). When even the narrowest layout
does not fit, the columns marked droppable go first and the caption names them. Its other
formats carry every column, raw values, whatever the width: ``csv`` (a header line),
``json`` (one object per line) and ``markdown``. ``--format`` (:func:`format_option`)
defaults to ``table`` on a terminal and to ``csv`` when standard output is a pipe or a file,
so a script never parses a picture.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import click
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text


class TerminalTable(Table):
    """A rich :class:`Table` whose columns fold rather than cut, in a light frame."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("box", box.SIMPLE_HEAD)
        super().__init__(*args, **kwargs)

    def add_column(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("overflow", "fold")
        super().add_column(*args, **kwargs)


def markdown_table(columns: list[str] | tuple[str, ...], rows: list[tuple[str, ...]] | list[list[str]]) -> str:
    """The rows as a GitHub-flavoured Markdown table (a ``|`` in a cell escaped, line breaks
    turned to spaces), for pasting into a README or a note."""

    def cell(text: object) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


#: What ``--format`` takes for a listing.
FORMATS = ("table", "csv", "json", "markdown")
#: A table's frame and padding beyond its cells, for ``n`` columns, in characters: one space
#: of padding each side of a cell, one rule character between columns and at each edge.
FRAME_PER_COLUMN = 3
FRAME_FIXED = 1
#: The longest word a wrapping column widens for, characters (a longer one is folded).
MAX_WORD = 24
Fit = Literal["keep", "wrap", "cut"]
F = TypeVar("F", bound=Callable[..., Any])


def default_format() -> str:
    """``table`` when standard output is a terminal; ``csv`` when it is piped or redirected."""
    return "table" if sys.stdout.isatty() else "csv"


def format_option(command: F) -> F:
    """The ``--format`` option of a listing (its value None until :func:`default_format`)."""
    return click.option(
        "--format", "fmt", type=click.Choice(FORMATS), default=None,
        help="table (the default on a terminal: fits its width), csv (the default when the output is piped "
             "or redirected), json (one object per line) or markdown; csv, json and markdown carry every "
             "column")(command)


def _text(value: Any) -> str:
    """How a value reads in a table or Markdown cell when its column says nothing else."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Listing`."""

    #: The machine name: CSV header, JSON key.
    key: str
    #: The table's and Markdown's header (default: ``key``).
    header: str | None = None
    #: How the column gives way in a narrow terminal: ``keep`` (never wrapped), ``wrap`` (at
    #: words, at least ``min_width`` characters wide), ``cut`` (one line, shortened with "…").
    fit: Fit = "keep"
    justify: Literal["left", "right"] = "left"
    #: The narrowest a ``wrap`` or ``cut`` column gets, characters.
    min_width: int = 14
    #: 0: always in the table; otherwise dropped from it, highest first, when even the
    #: narrowest layout does not fit (still in csv, json and markdown).
    drop: int = 0
    #: In the table at all (False: only in csv, json and markdown).
    in_table: bool = True
    #: In csv, json and markdown (False: a table's own form of values other columns carry).
    in_data: bool = True
    #: A value → its text in the table and Markdown (default :func:`_text`).
    show: Callable[[Any], str] | None = None
    #: A value → its rich style in the table (a status's colour), or None.
    style: Callable[[Any], str | None] | None = None

    @property
    def title(self) -> str:
        return self.header or self.key

    def cell(self, value: Any) -> str:
        return (self.show or _text)(value)


def shorten(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` characters, cut at a word with "…" when it is
    longer (inside a word only when its first word alone is too long)."""
    text = " ".join(text.split())
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    head = text[:width - 1]
    at = head.rfind(" ")
    if at >= width // 2:
        head = head[:at]
    return head.rstrip(" ,;:|—-") + "…"


@dataclass
class Listing:
    """Rows of plain values under named columns, printable in every format of :data:`FORMATS`."""

    title: str
    columns: Sequence[Column]
    rows: Sequence[Sequence[Any]] = field(default_factory=list)
    caption: str | None = None

    def dicts(self) -> list[dict[str, Any]]:
        """The rows as {key: raw value} of the columns in csv and json."""
        return [{c.key: v for c, v in zip(self.columns, row) if c.in_data} for row in self.rows]

    def csv_text(self) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([c.key for c in self.columns if c.in_data])
        for row in self.dicts():
            writer.writerow(["" if v is None else json.dumps(v, sort_keys=True) if isinstance(v, (dict, list))
                             else v for v in row.values()])
        return out.getvalue()

    def json_lines(self) -> str:
        return "".join(json.dumps(d, default=str) + "\n" for d in self.dicts())

    def markdown(self) -> str:
        """Every column of csv and json, as the table writes their values."""
        return markdown_table([c.title for c in self.columns if c.in_data],
                              [[c.cell(v) for c, v in zip(self.columns, row) if c.in_data] for row in self.rows])

    def layout(self, width: int) -> tuple[list[int], list[int]]:
        """(the table's columns by index, their widths in characters) for a terminal ``width``
        wide: every column at its natural width when that fits; else ``keep`` columns whole,
        the others shared what is left (in proportion to what they lack), at least their
        ``min_width``; droppable columns leave, highest ``drop`` first, until that fits."""
        shown = [i for i, c in enumerate(self.columns) if c.in_table]
        natural, word = {}, {}
        for i in shown:
            c = self.columns[i]
            cells = [c.cell(row[i]) for row in self.rows]
            longest = max((cell_len(line) for text in cells for line in text.splitlines() or [""]), default=0)
            natural[i] = max(cell_len(c.title), longest, 1)
            word[i] = max((cell_len(w) for text in [c.title, *cells] for w in text.split()), default=1)

        def least(i: int) -> int:
            c = self.columns[i]
            if c.fit == "keep":
                return natural[i]
            # No word is split (one of more than MAX_WORD characters may be); a column needs no
            # more than its longest cell.
            return min(natural[i], max(c.min_width, min(word[i], MAX_WORD)))

        def frame(n: int) -> int:
            return FRAME_PER_COLUMN * n + FRAME_FIXED

        while sum(least(i) for i in shown) + frame(len(shown)) > width:
            droppable = [i for i in shown if self.columns[i].drop > 0]
            if not droppable:
                break
            shown.remove(max(droppable, key=lambda i: (self.columns[i].drop, i)))
        room = width - frame(len(shown))
        widths = {i: natural[i] for i in shown}
        if sum(widths.values()) > room:
            widths = {i: least(i) for i in shown}
            spare = room - sum(widths.values())
            # Shared out evenly, the columns lacking least filled first: a column a few
            # characters short of whole gets them (its cells stay on one line).
            lacking = sorted((natural[i] - widths[i], i) for i in shown if natural[i] > widths[i])
            for n, (lack, i) in enumerate(lacking):
                give = min(lack, max(spare, 0) // (len(lacking) - n))
                widths[i] += give
                spare -= give
            # Still too wide with nothing left to drop: the widest column gives the rest (folded).
            over = sum(widths.values()) - room
            if over > 0:
                widest = max(shown, key=lambda i: widths[i])
                widths[widest] = max(widths[widest] - over, 1)
        return shown, [widths[i] for i in shown]

    def table(self, width: int) -> TerminalTable:
        """The rows as a table laid out for a terminal ``width`` characters wide (:meth:`layout`)."""
        shown, widths = self.layout(width)
        dropped = [c.title for c in self.columns if c.in_table and self.columns.index(c) not in shown]
        caption = self.caption or ""
        if dropped:
            caption += ("; " if caption else "") + (f"not shown at {width} columns: {', '.join(dropped)} "
                                                    "(a wider terminal, or --format csv|json)")
        table = TerminalTable(title=self.title, caption=caption or None, title_justify="left",
                              caption_justify="left")
        for i, w in zip(shown, widths):
            c = self.columns[i]
            # A kept column squeezed by a terminal too narrow for it folds rather than loses text.
            folds = c.fit == "wrap" or (c.fit == "keep" and any(cell_len(c.cell(row[i])) > w for row in self.rows))
            table.add_column(c.title, width=w, justify=c.justify, no_wrap=not folds,
                             overflow="fold" if folds else "crop")
        for row in self.rows:
            cells = []
            for i, w in zip(shown, widths):
                c = self.columns[i]
                text = c.cell(row[i])
                if c.fit == "cut":
                    text = shorten(text, w)
                cells.append(Text(text, style=(c.style(row[i]) if c.style else None) or ""))
            table.add_row(*cells)
        return table

    def render(self, fmt: str | None = None, console: Console | None = None) -> None:
        """Print the listing to standard output in ``fmt`` (None: :func:`default_format`)."""
        fmt = fmt or default_format()
        if fmt == "csv":
            click.echo(self.csv_text(), nl=False)
        elif fmt == "json":
            click.echo(self.json_lines(), nl=False)
        elif fmt == "markdown":
            click.echo(f"**{self.title}**\n\n{self.markdown()}", nl=False)
        elif fmt == "table":
            console = console or Console()
            console.print(self.table(console.width))
        else:
            raise click.UsageError(f"--format {fmt}: one of {', '.join(FORMATS)}")


def styled(colours: Mapping[str, str]) -> Callable[[Any], str | None]:
    """A column's ``style``: the colour of each value named in ``colours``."""
    return lambda value: colours.get(str(value))
