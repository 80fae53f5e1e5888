"""Exceptions with a user-facing meaning (the CLI turns these into one line and exit code 2)."""


class UserError(Exception):
    """A mistake the user can fix (bad flag, missing data, invalid config); message is one line."""


class MissingExtraError(UserError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        self.package, self.extra = package, extra
        super().__init__(
            f"{package} is not installed; install the '{extra}' extra: pip install 'countgym[{extra}]'"
        )


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
