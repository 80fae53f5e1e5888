"""Text from a provider or a model, made safe to print on a terminal.

An error body, a warning or a reply can hold terminal control sequences: ``ESC [ 2 J`` clears the
screen, ``ESC ] 0 ; ... BEL`` sets the window title, a carriage return overwrites the line
before it. Everything countgym prints that such text may reach goes through ``terminal_safe``,
which removes escape sequences (CSI, OSC, DCS, SOS, PM, APC and the two-byte ones, in their
7-bit and 8-bit forms) and every other C0 or C1 control character except newline and tab.
"""

from __future__ import annotations

import re

_CONTROLS = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI ... final byte (a cut-off one too)
    r"|\x1b[\]PX^_].*?(?:\x07|\x1b\\|\x9c|$)"  # OSC, DCS, SOS, PM, APC ... BEL or ST
    r"|\x1b[ -/]*[0-~]?"  # any other escape (nF, Fp, Fe, Fs), or a lone ESC
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|[\x90\x98\x9d\x9e\x9f].*?(?:\x07|\x9c|\x1b\\|$)"  # 8-bit DCS, SOS, OSC, PM, APC
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]",  # every other control but tab and newline
    re.DOTALL,
)


def terminal_safe(text: str) -> str:
    """``text`` without terminal control sequences or control characters (newline and tab kept)."""
    if text.isprintable():
        return text  # the usual case, and cheap: no control character at all
    return _CONTROLS.sub("", text)


__all__ = ["terminal_safe"]
