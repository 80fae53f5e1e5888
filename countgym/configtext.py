"""Reading the text of a config or profile file: one clear line for the mistakes an editor makes
(a byte-order mark, another encoding) instead of a parser's confusing error at line 1."""

from __future__ import annotations

import codecs
from pathlib import Path

from countgym.errors import UserError

_BOMS = (
    (codecs.BOM_UTF8, "UTF-8 with a byte-order mark"),
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)


def read_config_text(path: Path) -> str:
    """The file's text as UTF-8; a ``UserError`` naming the fix for a byte-order mark (some
    editors add one, and TOML does not allow it) or bytes that are not UTF-8."""
    raw = path.read_bytes()
    for bom, name in _BOMS:
        if raw.startswith(bom):
            raise UserError(
                f"{path}: starts with a byte-order mark (the file is saved as {name}); "
                "save it as plain UTF-8 without a BOM"
            )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: cannot parse: not UTF-8 text ({e.reason} at byte {e.start})") from None


__all__ = ["read_config_text"]
