"""The 17 CounterCount categories and the normalisation of category labels.

Released metadata and user manifests spell categories freely ("Birds", "birds", "Symbols",
"sea_creatures"). ``canonical_category`` maps any such label to the paper's category name
(*CounterCount*, Table 1 and App. C.4) by case, separators and plural; a label it cannot map is
unknown (None), never a silent default.
"""

from __future__ import annotations

import re

CATEGORIES: tuple[str, ...] = (
    "Ancient Creatures",
    "Birds",
    "Bugs",
    "Fictional Characters",
    "Flag",
    "Food",
    "Functional",
    "Housing",
    "Human",
    "Landmark",
    "Logo",
    "Mammals",
    "Mythical Creatures",
    "Reptiles",
    "Sea Creatures",
    "Symbol",
    "Transportation",
)
"""The 17 CounterCount categories (App. C.4 lists them by their generic names)."""

_SEPARATORS = re.compile(r"[\s_\-]+")


def _singular(word: str) -> str:
    """English singular of one lower-case word, as far as the category names need it."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us")):
        return word[:-1]
    return word


def category_key(label: str) -> str:
    """A label's comparison key: lower case, single spaces, every word singular."""
    words = _SEPARATORS.sub(" ", str(label).strip().lower()).split()
    return " ".join(_singular(w) for w in words)


_BY_KEY: dict[str, str] = {category_key(c): c for c in CATEGORIES}


def canonical_category(label: str) -> str | None:
    """The category a label names ("birds" -> "Birds", "Symbols" -> "Symbol"), or None."""
    return _BY_KEY.get(category_key(label))
