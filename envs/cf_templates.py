"""Every prompt text of *CounterCount* (Sections 4.1.1, 4.1.3 and Appendices B.2, B.3, C.4),
verbatim, in one place.

Placeholders use the paper's names: ``{anomaly}`` (the attribute, singular), ``{name}`` (the
subject name), ``{options}``, ``{question}``, ``{response}``, ``{correct_answer}``.

Transcription notes:
- The paper pluralises with ``{anomaly}s``. For attributes whose plural is not "+s" the
  question builder substitutes the stored plural for ``{anomaly}s`` (``fill_question``), so
  the template text stays verbatim and no "cherrys" reaches a model.
- The paper does not say how the four MCQ options are joined into ``{options}``; we join the
  word forms with ", " (``OPTION_SEPARATOR``).
- The judge prompt is typeset on one line with typographic quotes around ``{response}``; we
  keep the single line and use ASCII single quotes, as the image study's templates do.
- The cue instruction goes before the question, separated by one space (Appendix D.4: the
  caveat is displayed "before the question").
"""

from __future__ import annotations

import hashlib

BASE_QUESTION = "How many {anomaly}s does this {name} have?"
"""The shared base question (Appendix B.3)."""

OE = (
    "How many {anomaly}s does this {name} have? Complete the following sentence with just the "
    "count and the name of the part: The {name} has"
)
"""Open-ended completion (Appendix B.3)."""

MCQ = (
    "How many {anomaly}s does this {name} have? Choose one of the following options: {options}. "
    "Reply with only one word from the given options and nothing else."
)
"""Four-option multiple choice (Appendix B.3); options are number words (Appendix B.1)."""

OPTION_SEPARATOR = ", "

CUE = "Some images are digitally altered, so counts may be unrealistic. Count only what you actually see."
"""The cue instruction (Section 4.1.3)."""

JUDGE = (
    "Question: {question} Model response: '{response}' The correct answer to this question is "
    "{correct_answer}. What single number did the model give as its final answer to the question? "
    "Reply with only a single digit, nothing else."
)
"""VLM-as-a-judge prompt for replies with several numbers (Appendix B.2)."""

GENERIC_NAMES: dict[str, str] = {
    "Ancient Creatures": "animal",
    "Birds": "animal",
    "Bugs": "animal",
    "Mammals": "animal",
    "Reptiles": "animal",
    "Sea Creatures": "animal",
    "Functional": "object",
    "Housing": "object",
    "Transportation": "object",
    "Fictional Characters": "character",
    "Mythical Creatures": "creature",
    "Flag": "flag",
    "Food": "food",
    "Human": "human",
    "Landmark": "landmark",
    "Logo": "logo",
    "Symbol": "symbol",
}
"""Generic subject name per category (Appendix C.4): animal, object, character, creature, and
the singular category name for the rest."""

NUMBER_WORDS: tuple[str, ...] = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)
TENS_WORDS: tuple[str, ...] = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def number_word(n: int) -> str:
    """The English word form of 0 <= n <= 99 ("three", "twenty-one"), digits beyond."""
    if n < 0 or n > 99:
        return str(n)
    if n < 20:
        return NUMBER_WORDS[n]
    tens, unit = divmod(n, 10)
    return TENS_WORDS[tens] + (f"-{NUMBER_WORDS[unit]}" if unit else "")


def generic_name(category: str) -> str:
    """The generic subject name of a category (Appendix C.4).

    The label is normalised first (case, separators, plural: "Symbols" -> "symbol", "birds" ->
    "animal"). An unknown category raises ``UserError`` naming it: a silent default such as
    "object" would put a wrong word in the prompt and mislabel the run.
    """
    from countgym.errors import UserError
    from countgym.scenes.counterfactual.categories import canonical_category

    canonical = canonical_category(category)
    if canonical is None or canonical not in GENERIC_NAMES:
        raise UserError(
            f"unknown CounterCount category {category!r}: the generic-name intervention knows "
            f"{', '.join(GENERIC_NAMES)} (case and plural are ignored)"
        )
    return GENERIC_NAMES[canonical]


def fill_question(template: str, *, anomaly: str, anomaly_plural: str, name: str, options: str = "") -> str:
    """Fill a question template; ``{anomaly}s`` becomes the stored plural."""
    text = template.replace("{anomaly}s", "{anomaly_plural}")
    return text.format(anomaly=anomaly, anomaly_plural=anomaly_plural, name=name, options=options)


TEMPLATES: dict[str, str] = {
    "base": BASE_QUESTION,
    "oe": OE,
    "mcq": MCQ,
    "cue": CUE,
    "judge": JUDGE,
}
TEMPLATE_HASH = hashlib.sha256(
    "\x1e".join([*(f"{k}={v}" for k, v in sorted(TEMPLATES.items())), OPTION_SEPARATOR,
                 *(f"{k}={v}" for k, v in sorted(GENERIC_NAMES.items()))]).encode()
).hexdigest()[:16]
"""Hash of every CounterCount prompt text (written into each episode record)."""
