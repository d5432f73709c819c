"""Terminal tables that stay readable in an 80-column terminal.

Rich cuts a cell or header that does not fit with an ellipsis ("reduct…"), losing what it
said. Every table the CLI prints is a :class:`TerminalTable`: a light frame (fewer columns of
rule characters) and text that wraps instead of being cut.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table


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
