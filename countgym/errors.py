"""Exceptions with a user-facing meaning (the CLI turns these into one line and exit code 2)."""


class UserError(Exception):
    """A mistake the user can fix (bad flag, missing data, invalid config); message is one line."""


class MissingExtraError(UserError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        self.package, self.extra = package, extra
        super().__init__(f"{package} is not installed; install the '{extra}' extra: {install_command(extra)}")


def install_command(extra: str) -> str:
    """The command that adds ``extra`` to this installation of countgym.

    From a checkout (``pip install -e .``, the README's route) that is the checkout's folder with
    the extra, installed by this interpreter's pip (``.venv/bin/python -m pip install -e
    '.[api]'``): a bare ``pip`` may belong to another Python, and ``countgym[api]`` names a
    package index's project, not the checkout. Otherwise ``pip install 'countgym[EXTRA]'``.
    """
    import json
    import os
    import shlex
    import sys
    from importlib import metadata
    from urllib.parse import unquote, urlparse

    info: dict[str, object] = {}
    for dist in metadata.distributions(name="countgym"):  # a checkout's egg-info may come first
        try:
            info = json.loads(dist.read_text("direct_url.json") or "{}")
        except (ValueError, OSError):
            continue
        if info:
            break
    url = urlparse(str(info.get("url", "")))
    if url.scheme != "file" or not isinstance(info.get("dir_info"), dict):
        return f"pip install 'countgym[{extra}]'"

    def short(path: str) -> str:
        path = os.path.abspath(path)  # normalised, symlinks kept (a venv's python is one)
        rel = os.path.relpath(path)
        return path if rel == ".." or rel.startswith(".." + os.sep) else rel

    dir_info = info.get("dir_info")
    editable = "-e " if isinstance(dir_info, dict) and dir_info.get("editable") else ""
    python = short(sys.executable) if sys.executable else "python3"
    return f"{shlex.quote(python)} -m pip install {editable}{shlex.quote(short(unquote(url.path)) + f'[{extra}]')}"


class ProviderQuotaError(UserError):
    """The provider asks to wait longer than a run may (a spent quota, a long ``Retry-After``).

    Raised by a backend instead of failing every remaining episode within seconds: the runner
    stops the cell (episodes in flight are still logged) and the CLI prints one line.
    """


TRANSIENT_MARK = "[transient]"
"""Starts the error of a call that failed only for a passing reason (429, 5xx, timeout, dropped
connection, a deadline): such episodes are re-run when the cell is resumed, and analysis
counts them as errors, not as wrong answers."""

_LEGACY_TRANSIENT = "gave up after "  # what the litellm backend wrote before the mark existed


def is_transient_error(error: str | None) -> bool:
    """True when an episode's recorded error is a transient one (worth a re-run)."""
    return bool(error) and (TRANSIENT_MARK in error or _LEGACY_TRANSIENT in error)  # type: ignore[operator]
