"""Exceptions with a user-facing meaning (the CLI turns these into one line and exit code 2)."""


class UserError(Exception):
    """A mistake the user can fix (bad flag, missing data, invalid config); message is one line."""


class MissingExtraError(UserError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f"{package} is not installed; install the '{extra}' extra: pip install 'countgym[{extra}]'"
        )
