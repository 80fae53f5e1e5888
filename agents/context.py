"""The context policy of Appendix C: only the most recent images stay in a request.

A tool-loop conversation grows by one image per turn; re-sending all of them would make late
turns slow and expensive and, for long loops (tag-1, T = 80), overflow the context. The paper
keeps the two most recent images and replaces each earlier image part by a short text, so the
model still sees that an image was there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from countgym.agents.backends.base import Message
from countgym.envs.templates import OMITTED_IMAGE

KEEP_IMAGES = 2


def apply_context_policy(
    history: Sequence[Message], *, keep_images: int = KEEP_IMAGES, image_type: str = "image"
) -> list[Message]:
    """The request to send for ``history``: the ``keep_images`` most recent image parts kept,
    every earlier one replaced by a text part ``OMITTED_IMAGE``. ``history`` is not modified.
    ``image_type``: the ``type`` of an image part ("image" in countgym's messages, "image_url"
    in OpenAI's); a message whose content is not a list of parts passes as it is."""
    if keep_images < 0:
        raise ValueError(f"keep_images must be >= 0, got {keep_images}")
    # Walk backwards so "most recent" is counted over the whole conversation, not per message.
    seen = 0
    out: list[Message] = []
    for msg in reversed(history):
        content = msg.get("content")
        if not isinstance(content, list):
            out.append(dict(msg))
            continue
        parts: list[dict[str, Any]] = []
        for part in reversed(content):
            if part.get("type") == image_type:
                seen += 1
                if seen > keep_images:
                    parts.append({"type": "text", "text": OMITTED_IMAGE})
                    continue
            parts.append(part)
        parts.reverse()
        out.append({**msg, "content": parts})
    out.reverse()
    return out
