"""Strict count extraction from free-text replies: known answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from countgym.envs.extract import Target, extract_count

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
    assert extract_count(f"{q} I count 14.").value == 14  # "10 sampled frames" is not a count
    assert extract_count("How many blue spheres are in video 7? I count 14.").value is None
    assert extract_count("How many blue spheres are in video 7? I count 14.", question="How many blue spheres are in video 7?").value == 14
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


# --------------------------------------------------------------------------- CountVideoBench §5.1
RED_CUBE = Target("cube", "red")
Q = "How many red cubes are in this video?"

# Realistic reply shapes to "How many red cubes are in this video?": (reply, expected count).
# None is NaN: a refusal, a qualitative answer, no committed number or incompatible counts.
VIDEO_REPLIES: list[tuple[str, int | None]] = [
    # the count bound to the queried object, other numbers are not counts of it
    ("I count 23 red cubes across the 10 frames.", 23),
    ("Looking at all 10 frames, in total there are 23 red cubes.", 23),
    ("There are 7 red cubes in this video.", 7),
    ("7", 7),
    ("7.", 7),
    ("Seven.", 7),
    ("There are seven red cubes.", 7),
    ("The video shows twelve red cubes.", 12),
    ("There is one red cube.", 1),
    ("There is only 1 red cube visible.", 1),
    ("There are no red cubes in this video.", 0),
    ("None.", 0),
    ("I see 4 cubes.", 4),
    ("In frame 3 I can see 5 red cubes.", 5),
    ("Across frames 1-10 there are 9 red cubes.", 9),
    ("At 0:05 all 6 red cubes are visible.", 6),
    ("There are 6 red cubes; 2 of them leave the frame at around 3.5 seconds.", 6),
    ("There are 8 red cubes and 3 blue spheres.", 8),
    ("I see 2 green cubes and 5 red cubes.", 5),
    ("The 1st frame shows the scene from above. There are 11 red cubes.", 11),
    ("There are 15 red cubes visible in 3 of the 10 frames.", 15),
    ("The camera rotates 90 degrees; I count 14 red cubes.", 14),
    ("14 red cubes (100% confident).", 14),
    ("**Answer:** 9", 9),
    ("ANSWER: 9 red cubes across 10 frames", 9),
    ("Final answer: 21", 21),
    ("The answer is 18.", 18),
    ("The total number of red cubes is 30.", 30),
    ("Frame 1 shows 4 red cubes and frame 2 shows 5 red cubes, so in total there are 5 red cubes.", 5),
    ("I first counted 20, but after checking again the total is 22.", 22),
    ("There are a total of 16 red cubes.", 16),
    ("16 red cubes in total.", 16),
    ("<think>Frame 1 has 3, frame 2 has 4.</think>There are 4 red cubes.", 4),
    ("1. Look at each frame.\n2. Count the red cubes.\nThere are 13 red cubes.", 13),
    ("There are 12 objects in total, 5 of which are red cubes.", 5),
    ("In total, there are 10 shapes: 4 red cubes and 6 blue spheres.", 4),
    ("In total there are 3 blue spheres and 5 red cubes.", 5),
    ("The video is 1920x1080 and shows 8 red cubes.", 8),
    # no committed count: NaN
    ("Frame 1: 4 red cubes. Frame 2: 5 red cubes.", None),
    ("There are between 20 and 25 red cubes.", None),
    ("There are 20-25 red cubes.", None),
    ("Either 4 or 5 red cubes.", None),
    ("Many red cubes.", None),
    ("I cannot determine the number of red cubes from these frames.", None),
    ("There are more than 20 red cubes.", None),
    ("There are 2.5 red cubes.", None),
    ("There are 3 blue spheres.", None),
    ("ANSWER: many", None),
    ("ANSWER: 7.5", None),
    ("There are -3 red cubes.", None),
    ("There are 99999999999999999999999 red cubes.", None),
    ("", None),
]


def test_video_reply_table_is_large_enough() -> None:
    assert len(VIDEO_REPLIES) >= 40


@pytest.mark.parametrize(("text", "expected"), VIDEO_REPLIES)
def test_video_replies(text: str, expected: int | None) -> None:
    res = extract_count(text, question=Q, target=RED_CUBE)
    assert res.value == expected, res.reason
    assert res.reason


@pytest.mark.parametrize(("text", "expected"), VIDEO_REPLIES)
def test_video_replies_with_the_question_only(text: str, expected: int | None) -> None:
    assert extract_count(text, question=Q).value == expected


def test_target_from_question() -> None:
    from countgym.envs.extract import target_from_question

    assert target_from_question(Q) == RED_CUBE
    assert target_from_question("Count the blue spheres shown in this video.") == Target("sphere", "blue")
    assert target_from_question("What is the total number of green cubes in the video?") == Target("cube", "green")
    assert target_from_question("How many cubes are in this video?") == Target("cube")
    assert target_from_question("Describe the video.") is None


def test_video_reasons_name_the_rule() -> None:
    assert "total" in extract_count("In total there are 23 red cubes.", target=RED_CUBE).reason
    assert "queried object" in extract_count("There are 23 red cubes.", target=RED_CUBE).reason
    assert "other objects" in extract_count("There are 3 blue spheres.", target=RED_CUBE).reason
    assert "out of range" in extract_count("ANSWER: 99999999999999999999999").reason
