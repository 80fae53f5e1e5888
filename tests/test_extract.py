"""Strict count extraction from free-text replies (envs.md section 2): known answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from countgym.envs.extract import extract_count

CASES: list[tuple[str, int | None]] = [
    # digits
    ("12", 12),
    ("There are 12 red cubes.", 12),
    ("I count 1,000 dots", 1000),
    ("Thirty cubes. 30.", 30),
    ("The answer is 42", 42),
    # number words
    ("zero", 0),
    ("There is only one red cube.", 1),
    ("Nineteen.", 19),
    ("twenty-one", 21),
    ("I count twenty one spheres", 21),
    ("Forty-Two purple spheres", 42),
    ("fifty", 50),
    ("one hundred and five", 105),
    ("a hundred", 100),
    ("ninety-nine", 99),
    # ANSWER lines win, the last one decides
    ("Maybe 5 or 6.\nANSWER: 6", 6),
    ("ANSWER: 12\nANSWER: 13", 13),
    ("Final answer: 17", 17),
    ("**ANSWER:** 8", 8),
    ("Choose one: two, three, four or five. Answer: three", 3),
    ("ANSWER: many", None),
    ("ANSWER: 20-25", None),
    # several incompatible numbers: no answer
    ("Between 20 and 25.", None),
    ("20-25", None),
    ("5 in frame 1 and 7 in frame 2", None),
    ("Either 30 or thirty-one.", None),
    # not counts
    ("many", None),
    ("", None),
    ("   ", None),
    ("There are 3.5 cubes", None),
    ("more than 20", None),
    ("at least 10 cubes", None),
    ("20+", None),
    ("There are no cubes", None),
    # things that are not number mentions
    ("1. I look at every frame.\n2. I count 14 cubes.", 14),
    ("In the 3rd frame there are 9 cubes", 9),
    ("Each one is red; there are 9.", 9),
    ("One of them is hidden, but there are 11.", 11),
    ("<think>maybe 3, maybe 4</think>There are 7.", 7),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_known_answers(text: str, expected: int | None) -> None:
    res = extract_count(text)
    assert res.value == expected, res.reason
    assert res.reason


def test_none_reply() -> None:
    assert extract_count(None).value is None


def test_question_echo_is_ignored() -> None:
    q = "How many blue spheres are in the 10 sampled frames?"
    assert extract_count(f"{q} I count 14.").value is None  # without the question: 10 and 14
    assert extract_count(f"{q}\nI count 14.", question=q).value == 14
    assert (
        extract_count("how  many blue SPHERES are in the 10 sampled frames? 14", question=q).value
        == 14
    )


def test_mcq_options() -> None:
    opts = [2, 3, 4, 5]
    assert extract_count("four", options=opts).value == 4
    assert (
        extract_count("The options are two, three, four and five. I pick four.", options=opts).value
        == 4
    )
    res = extract_count("seven", options=opts)
    assert res.value is None and "not one of the options" in res.reason
    assert extract_count("three or four", options=opts).value is None


def test_reasons_say_why() -> None:
    assert "several incompatible" in extract_count("5 or 6").reason
    assert "no number" in extract_count("lots").reason
    assert "answer line" in extract_count("ANSWER: 4").reason


@given(st.integers(min_value=0, max_value=10**6))
def test_any_integer_round_trips(n: int) -> None:
    assert extract_count(f"There are {n} objects.").value == n
    assert extract_count(f"ANSWER: {n}").value == n


@given(st.text(max_size=200))
def test_never_raises_on_untrusted_text(text: str) -> None:
    res = extract_count(text)
    assert res.value is None or res.value >= 0
