"""Text from a provider or a model never reaches the terminal with control sequences in it: an
error that would clear the screen or set the window title is printed as its readable words."""

from __future__ import annotations

import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from countgym.cli import main
from countgym.termtext import terminal_safe

HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[H\x9b31mprovider\r said\x00 no\x1bc\x1b[?1049h"


@pytest.mark.parametrize(("text", "safe"), [
    ("plain words", "plain words"),
    ("a\x1b[2Jb", "ab"),  # clear the screen
    ("x\x1b]0;title\x07y", "xy"),  # window title, ended by BEL
    ("x\x1b]2;title\x1b\\y", "xy"),  # ... or by ST
    ("x\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\y", "xlinky"),  # a hyperlink
    ("a\x1bPq#0\x1b\\b", "ab"),  # DCS
    ("a\x9b31mb\x9d0;t\x9cc", "abc"),  # 8-bit CSI and OSC
    ("a\rb\x08c\x00d\x7fe\x85f", "abcdef"),  # other C0 and C1 controls
    ("lines\n\tand tabs stay", "lines\n\tand tabs stay"),
    ("é 日本 ✓", "é 日本 ✓"),
    ("cut off\x1b[", "cut off"),
    ("cut off\x1b]0;no end", "cut off"),
])
def test_terminal_safe_removes_every_control(text: str, safe: str) -> None:
    assert terminal_safe(text) == safe


def test_hostile_text_loses_every_control_character() -> None:
    out = terminal_safe(HOSTILE)
    assert out == "provider said no"
    assert all(ch in "\n\t" or (ch.isprintable() and not 0x80 <= ord(ch) <= 0x9F) for ch in out)


def test_a_provider_error_with_escapes_is_printed_without_them(tmp_path: Path, tiny_dataset, monkeypatch,
                                                                capsys) -> None:
    (tmp_path / "escaping_policy.py").write_text(textwrap.dedent(f'''
        class Fails:
            def reset(self, first_observation, task):
                pass

            def act(self, observation):
                raise RuntimeError({HOSTILE!r})
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "escaping_policy:Fails",
               "--out", str(tmp_path / "run"), "--no-progress"])
    out = capsys.readouterr()
    assert rc == 1 and "provider said no" in out.err
    for text in (out.out, out.err):
        assert not any(ord(ch) < 32 and ch not in "\n\t" or 0x7F <= ord(ch) <= 0x9F for ch in text)
    sys.modules.pop("escaping_policy", None)


def test_warnings_on_the_command_line_are_printed_safe(capsys) -> None:
    main(["cache", "list"])  # installs the command line's warning format
    line = warnings.formatwarning(HOSTILE, UserWarning, "x.py", 1)
    assert line == "countgym: warning: provider said no\n"


def test_litellm_log_lines_are_made_safe() -> None:
    import logging

    from countgym.agents.backends.litellm_import import _OncePerMessage

    record = logging.LogRecord("LiteLLM", logging.ERROR, "x.py", 1, "provider said: %s", (HOSTILE,), None)
    assert _OncePerMessage().filter(record) and record.getMessage() == "provider said: provider said no"
