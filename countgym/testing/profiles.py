"""Behaviour profiles of the simulated model (``--simulate [PROFILE.toml]``).

A profile file is TOML: ``[default]`` applies to every model not named, ``[models."name"]`` to
one model (its keys override ``[default]``, which overrides ``BASE``). Every key is optional:

==================  ===========================================================================
key                 meaning
==================  ===========================================================================
count_sigma         answer-only arms and video: answer = round(n * (1 + count_bias)
                    + Normal(0, count_sigma * n)), at least 0
count_bias          relative bias of those answers (-0.2: a fifth too few)
omission            tool loop, list, tiles: probability an object is left unpointed
duplicate           probability a pointed object gets a second point nearby
phantom             expected extra points per object, placed away from every object
pointing_sigma      sd (per axis) of a point's offset from its object, thousandths of the
                    image's shorter side
canonical           CounterCount: probability a counterfactual answer is the canonical count
hedge               CounterCount: probability a reply names a wrong number before its answer
                    ("At first glance 4, but counting again I see 3."), so the rules find
                    several numbers and the audit's judge reads it (the simulated judge answers
                    the last number)
==================  ===========================================================================

Without a file, ``builtin_profile(name)`` gives each model name its own behaviour, derived from
a hash of the name (so a rehearsed config shows differences between models and runs the same
every time): count_sigma 0.05-0.30, count_bias -0.20 to +0.05, omission 0.02-0.15, duplicate
0.01-0.08, phantom 0.00-0.05, pointing_sigma 2-8, canonical 0.10-0.70, hedge 0.05-0.25 (pointing errors
well below the spacing of clustered DotArrays, so offsets do not turn into phantom/omission pairs).
"""

from __future__ import annotations

import hashlib
import math
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from countgym.configtext import read_config_text
from countgym.errors import UserError
from countgym.limits import config_depth_problem, nesting_message


@dataclass(frozen=True)
class Profile:
    """How one simulated model behaves (see the module docstring for each key)."""

    count_sigma: float = 0.1
    count_bias: float = 0.0
    omission: float = 0.0
    duplicate: float = 0.0
    phantom: float = 0.0
    pointing_sigma: float = 5.0
    canonical: float = 0.0
    hedge: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """The keys in force, for the episode log."""
        return asdict(self)


BASE = Profile()
"""The values of keys a profile file leaves out (those of the issue's example)."""

KEYS: tuple[str, ...] = tuple(BASE.as_dict())

_RANGES: dict[str, tuple[float, float]] = {
    "count_sigma": (0.0, 10.0),
    "count_bias": (-1.0, 10.0),
    "omission": (0.0, 1.0),
    "duplicate": (0.0, 1.0),
    "phantom": (0.0, 10.0),
    "pointing_sigma": (0.0, 1000.0),
    "canonical": (0.0, 1.0),
    "hedge": (0.0, 1.0),
}

_BUILTIN_SPANS: dict[str, tuple[float, float]] = {
    "count_sigma": (0.05, 0.30),
    "count_bias": (-0.20, 0.05),
    "omission": (0.02, 0.15),
    "duplicate": (0.01, 0.08),
    "phantom": (0.0, 0.05),
    "pointing_sigma": (2.0, 8.0),
    "canonical": (0.10, 0.70),
    "hedge": (0.05, 0.25),
}


def builtin_profile(model: str) -> Profile:
    """The built-in behaviour of a model name: each key drawn from its span by a hash of the
    name and the key (deterministic; two names almost surely differ in every key)."""
    values = {}
    for key, (lo, hi) in _BUILTIN_SPANS.items():
        h = hashlib.sha256(f"countgym-simulated|{model}|{key}".encode()).digest()
        u = int.from_bytes(h[:8], "little") / 2**64
        values[key] = round(lo + (hi - lo) * u, 3)
    return Profile(**values)


@dataclass(frozen=True)
class ProfileSet:
    """Profiles of every model of a simulated run, and where they came from."""

    default: dict[str, float] | None = None
    """``[default]`` keys of a file; None: the built-in per-name behaviour."""
    models: dict[str, dict[str, float]] | None = None
    source: str = "built-in"
    """The profile file's name, or ``built-in``."""

    def for_model(self, model: str) -> Profile:
        """The profile in force for ``model``."""
        if self.default is None:
            return builtin_profile(model)
        named = (self.models or {}).get(model, {})
        return Profile(**{**BASE.as_dict(), **self.default, **named})

    def provenance(self, model: str) -> dict[str, Any]:
        """What an episode log records: ``{"profile": {...}, "source": ...}``."""
        return {"profile": self.for_model(model).as_dict(), "source": self.source}


BUILTIN = ProfileSet()


def _check_table(where: str, table: Any) -> dict[str, float]:
    if not isinstance(table, dict):
        raise UserError(f"{where}: expected a table of profile keys, got {type(table).__name__}")
    out: dict[str, float] = {}
    for key, value in table.items():
        if key not in _RANGES:
            import difflib

            close = difflib.get_close_matches(str(key), KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UserError(f"{where}: unknown key {key!r}{hint}; valid keys: {', '.join(KEYS)}")
        lo, hi = _RANGES[key]
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or not lo <= value <= hi:
            got = repr(value) if isinstance(value, int | float | str) and len(str(value)) <= 40 else (
                f"a {type(value).__name__}")  # a list or table is not quoted back whole
            raise UserError(f"{where}: {key} must be a number from {lo:g} to {hi:g}, got {got}")
        out[key] = float(value)
    return out


def load_profiles(path: str | Path) -> ProfileSet:
    """Read and check a profile file; every mistake is one ``UserError`` line."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"no such simulation profile: {p}")
    text = read_config_text(p)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise UserError(f"{p}: cannot parse: {nesting_message()}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{p}: cannot parse: {str(e).splitlines()[0]}") from None
    deep = config_depth_problem(data)
    if deep:
        raise UserError(f"{p}: {deep}")
    for key in data:
        if key not in ("default", "models"):
            raise UserError(f"{p}: unknown table {key!r}; a profile has [default] and [models.\"NAME\"]")
    default = _check_table(f"{p}: [default]", data.get("default", {}))
    models_raw = data.get("models", {})
    if not isinstance(models_raw, dict):
        raise UserError(f"{p}: 'models' must be tables [models.\"NAME\"]")
    models = {str(name): _check_table(f'{p}: [models."{name}"]', t) for name, t in models_raw.items()}
    return ProfileSet(default=default, models=models, source=p.name)
