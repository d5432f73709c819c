"""The CLI's last line of defence: any error reaches the user as one line, never a traceback."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from clawbed import cli as clawbed_cli


def test_an_unexpected_exception_is_one_line_with_its_traceback_in_a_file(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    @click.command("explode")
    def explode() -> None:
        {}["t_ms"]  # noqa: B018 - the kind of bug that once reached users as a traceback

    monkeypatch.setenv("CLAWBED_STATE", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["clawbed", "explode"])
    clawbed_cli.cli.add_command(explode)
    try:
        with pytest.raises(SystemExit) as exit_info:
            clawbed_cli.main()
    finally:
        clawbed_cli.cli.commands.pop("explode")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("clawbed: internal error: KeyError: 't_ms'")
    saved = Path(err.rsplit("details in ", 1)[1].strip())
    assert saved.parent == tmp_path / "errors" and "Traceback" in saved.read_text()
