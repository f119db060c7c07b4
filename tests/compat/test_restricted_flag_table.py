"""docs/compatibility.md's flag table, held against the CLI (and against the reference's --help).

Each row says what tritonlite does with one tritonserver flag: implemented, ignored (with a
warning whose reason is the row's notes) or refused (with an error whose reason is the notes).
The example of every row goes through the CLI; a real server starts with every ignored
example at once; a refused example stops a real server with the stated message.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import start_server
from support.reference import reference_env, require_reference, tritonserver
from test_restricted_api import write_repo

from tritonlite import cli

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "compatibility.md"
_ROW = re.compile(r"^\| `(--[a-z0-9-]+)` \| (implemented|ignored|refused) \| `([^`]*)` \| (.*) \|$")
_ACCEPTED = re.compile(r" \((--\S+) is accepted\)$")


def rows(section: str | None = None) -> list[tuple[str, str, str, str]]:
    """(flag, status, example, notes) of every row; ``section``: only that ``##`` section's."""
    out, current = [], ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            current = line[3:]
        m = _ROW.match(line)
        if m and (section is None or current.startswith(section)):
            out.append((m.group(1), m.group(2), m.group(3), m.group(4)))
    return out


def parse(args: list[str]) -> None:
    cli.options_from_args(["--model-repository", ".", *args])


def test_the_table_is_there_and_each_flag_once() -> None:
    flags = [r[0] for r in rows()]
    assert len(flags) >= 87
    assert len(flags) == len(set(flags))


@pytest.mark.parametrize(
    ("flag", "example", "notes"), [(f, e, n) for f, s, e, n in rows() if s == "implemented"]
)
def test_implemented(
    flag: str, example: str, notes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if flag == "--help":
        with pytest.raises(SystemExit) as exc:
            parse([example])
        assert exc.value.code == 0
        return
    parse(shlex.split(example))  # on the default front end: nothing implemented is ignored
    assert "is accepted and ignored" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "example", "notes"), [(f, e, n) for f, s, e, n in rows() if s == "ignored"]
)
def test_ignored_warns_why(
    flag: str, example: str, notes: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.IGNORED[flag][1] == notes
    parse(shlex.split(example))
    assert f"Warning: {flag} is accepted and ignored: {notes}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "example", "notes"), [(f, e, n) for f, s, e, n in rows() if s == "refused"]
)
def test_refused_says_why(flag: str, example: str, notes: str) -> None:
    accepted = _ACCEPTED.search(notes)
    why = notes[: accepted.start()] if accepted else notes
    with pytest.raises(SystemExit) as exc:
        parse(shlex.split(example))
    assert str(exc.value) == f"tritonlite: error: {example} is not supported: {why}"
    if accepted:
        parse([accepted.group(1)])


def test_every_flag_the_cli_special_cases_is_in_the_table() -> None:
    table = {r[0]: r[1] for r in rows()}
    assert {f for f in cli.IGNORED} == {f for f, s in table.items() if s == "ignored"}
    assert set(cli.REFUSED) == {f for f, s in table.items() if s == "refused"}
    known = set(build_option_strings())
    assert not [f for f in table if f not in known]


def build_option_strings() -> list[str]:
    return [s for a in cli.build_parser()._actions for s in a.option_strings]


def test_the_table_lists_the_reference_flags() -> None:
    base = require_reference()
    out = subprocess.run(
        [tritonserver(base), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=reference_env(base),
    )
    theirs = set(re.findall(r"^  (--[a-z0-9-]+)", out.stdout + out.stderr, re.M))
    assert theirs == {r[0] for r in rows("tritonserver 2.51")}


def test_a_server_starts_with_every_ignored_flag(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "repo")
    ignored = [a for f, s, e, n in rows() if s == "ignored" for a in shlex.split(e)]
    server = start_server(repo, "--allow-metrics=false", *ignored)
    try:
        out = server.output()
        for flag, status, _, notes in rows():
            if status == "ignored":
                assert f"Warning: {flag} is accepted and ignored: {notes}" in out
    finally:
        server.stop()


def test_a_refused_flag_stops_the_server_saying_why(tmp_path: Path) -> None:
    repo = write_repo(tmp_path / "repo")
    flag, _, example, notes = next(r for r in rows() if r[1] == "refused")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonlite",
            "--model-repository",
            str(repo),
            *shlex.split(example),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert f"{example} is not supported: " in proc.stderr, proc.stderr
