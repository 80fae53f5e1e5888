"""Every prompt text of *CountVideoBench*, in one place.

- ``PROMPTS``: the question formulations of Appendix E, verbatim; P1 is the paper's prompt
  (Section 5.1).
- ``PARSER``: the answer-parser request. Section 5.1 extracts the count from each reply "with a
  lightweight model parser (Qwen2.5-7B), returning the integer when one can be unambiguously
  identified and NaN otherwise"; the paper does not print the parser's prompt, so this text is
  ours. It states that role in the paper's words: one integer, or NaN for a refusal, a
  qualitative answer, no committed number, or several incompatible integers.
"""

from __future__ import annotations

import hashlib

PROMPTS: dict[str, str] = {
    "P1": "How many {color} {shape}s are in this video?",
    "P2": "Count the {color} {shape}s shown in this video.",
    "P3": "What is the total number of {color} {shape}s in the video?",
}
"""The question formulations of Appendix E, verbatim; P1 is the paper's prompt."""

PARSER = (
    "You extract the predicted count from a video-language model's answer to a counting "
    "question.\n"
    "Question: {question}\n"
    "Model answer: '{response}'\n"
    "If the answer commits to a single integer count of the objects the question asks about, "
    "reply with that integer only. Otherwise (a refusal, a qualitative answer such as \"many\", "
    "no committed number, or several incompatible integers) reply with NaN only."
)
"""The model parser's request (Section 5.1 names its role, not its text)."""

VIDEO_TEMPLATE_HASH = hashlib.sha256(
    "\n".join(f"{k}={v}" for k, v in sorted(PROMPTS.items())).encode()
).hexdigest()[:16]
"""Hash of the question prompts (written into each episode record)."""
PARSER_HASH = hashlib.sha256(PARSER.encode()).hexdigest()[:16]
"""Hash of the parser request (part of the parser cache key)."""
