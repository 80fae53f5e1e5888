"""The context policy (Appendix C): only the two most recent images stay in a request."""

from __future__ import annotations

import numpy as np
import pytest

from countgym.agents.backends.base import image_part, message, text_part
from countgym.agents.context import apply_context_policy
from countgym.envs.templates import OMITTED_IMAGE


def img(k: int) -> np.ndarray:
    return np.full((4, 4, 3), k, np.uint8)


def conversation(n_turns: int) -> list[dict]:
    hist = [message("system", text_part("sys"))]
    for k in range(n_turns):
        hist.append(message("user", image_part(img(k)), text_part(f"turn {k}")))
        hist.append(message("assistant", text_part(f"reply {k}")))
    return hist


def shape(msgs: list[dict]) -> list[list[str]]:
    """Each message as a list of 'img:<k>' / text parts."""
    out = []
    for m in msgs:
        parts = []
        for p in m["content"]:
            parts.append(f"img:{int(p['image'][0, 0, 0])}" if p["type"] == "image" else p["text"])
        out.append(parts)
    return out


def test_only_two_most_recent_images_kept_with_placeholders_in_place() -> None:
    hist = conversation(4)
    got = shape(apply_context_policy(hist))
    assert got == [
        ["sys"],
        [OMITTED_IMAGE, "turn 0"],
        ["reply 0"],
        [OMITTED_IMAGE, "turn 1"],
        ["reply 1"],
        ["img:2", "turn 2"],
        ["reply 2"],
        ["img:3", "turn 3"],
        ["reply 3"],
    ]
    # The history itself is untouched (later turns still need the images).
    assert sum(p["type"] == "image" for m in hist for p in m["content"]) == 4


def test_two_images_in_one_message_count_separately() -> None:
    hist = [
        message("user", image_part(img(0)), text_part("a"), image_part(img(1))),
        message("user", text_part("b"), image_part(img(2))),
    ]
    assert shape(apply_context_policy(hist)) == [[OMITTED_IMAGE, "a", "img:1"], ["b", "img:2"]]


@pytest.mark.parametrize("n", [0, 1, 2])
def test_short_conversations_are_unchanged(n: int) -> None:
    hist = conversation(n)
    assert shape(apply_context_policy(hist)) == shape(hist)


def test_keep_images_option_and_string_content() -> None:
    hist = [{"role": "system", "content": "plain"}, *conversation(3)[1:]]
    got = shape_safe(apply_context_policy(hist, keep_images=1))
    assert got[0] == "plain"
    assert [p for m in got[1:] if isinstance(m, list) for p in m if p.startswith("img:")] == [
        "img:2"
    ]
    with pytest.raises(ValueError):
        apply_context_policy(hist, keep_images=-1)


def shape_safe(msgs: list[dict]) -> list:
    return [m["content"] if isinstance(m["content"], str) else shape([m])[0] for m in msgs]
