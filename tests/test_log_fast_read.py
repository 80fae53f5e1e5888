"""A log line reads to the same record, or is refused for the same reason, whether or not the
fast reader of current-schema lines takes it first.

The fast reader (``logs._current_json_validator``) skips the record's migration step; every
line it accepts must be one the migration leaves as it is, and every line it refuses is read
again by the full validation. Each line here is read both ways and the results compared.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest

from countgym import logs
from countgym.logs import ArmSpec, EpisodeRecord, StepRecord, Truth, dump_record

NO_SECRETS: tuple[str, ...] = ()


def _base() -> dict[str, Any]:
    rec = EpisodeRecord(
        episode_id="cell/s1/r0", stimulus_id="s1", dataset="dots", arm=ArmSpec(name="tag", options={"budget": 3}),
        env_options={"tools": ["tag", "answer"]}, model="m", seed=7, image_size=(768, 512),
        steps=[StepRecord(index=0, action={"tool": "tag"}, tags_added=[(1.25, 2.5), (30.0, 40.0)], calls_left=2),
               StepRecord(index=1, action={"tool": "answer", "n": 2}, reply="two")],
        tags=[(1.25, 2.5), (30.0, 40.0)], answer=2, end="answer", truth=Truth(n=2),
        countgym_version="0.1.0", template_hash="abc", started_at="t0", finished_at="t1",
    )  # fmt: skip
    return json.loads(dump_record(rec))


def _with(**changes: Any) -> str:
    d = _base()
    for key, value in changes.items():
        if value is _DROP:
            d.pop(key)
        else:
            d[key] = value
    return json.dumps(d)


_DROP = object()

LINES = {
    "valid": _with(),
    "version 1": _with(schema_version=1),
    "version 1.0": _with(schema_version=1.0),
    "version true": _with(schema_version=True),
    "version '2'": _with(schema_version="2"),
    "version 2": _with(schema_version=2),
    "newer version": _with(schema_version=4),
    "no version": _with(schema_version=_DROP),
    "answer past int64": _with(answer=2**70),
    "answer below int64": _with(answer=-(2**70), end="budget"),
    "answer past int64 with error": _with(answer=2**64, error="kept"),
    "answer true": _with(answer=True),
    "answer 5.0": _with(answer=5.0),
    "answer 5.5": _with(answer=5.5),
    "answer '7'": _with(answer="7"),
    "answer 1e30": _with(answer=1e30),
    "answer null": _with(answer=None, end="invalid"),
    "extra key": _with(bogus=1),
    "missing key": _with(model=_DROP),
    "bad end": _with(end="done"),
    "step extra key": _with(steps=[{"index": 0, "bogus": 1}]),
    "tag not a pair": _with(tags=[[1.0, 2.0, 3.0]]),
    "tag as string": _with(tags=[["1", "2"]]),
    "image size floats": _with(image_size=[768.0, 512.0]),
    "truth string": _with(truth={"n": "2"}),
    "arm extra key": _with(arm={"name": "tag", "bogus": 1}),
    "nan tag": _with().replace("[1.25, 2.5]", "[NaN, 2.5]", 1),
    "not json": _with()[:-5],
    "a list": "[1, 2]",
    "a number": "3",
}


def _slow(line: str) -> tuple[EpisodeRecord | None, str, bool]:
    """``_read_line`` with the fast reader refusing everything (the full validation alone)."""

    def refuse(_: str) -> EpisodeRecord:
        raise ValueError("refused")

    saved = logs._current_json_validator
    logs._current_json_validator = lambda cls: refuse  # type: ignore[assignment]
    try:
        return logs._read_line(line, False, NO_SECRETS)
    finally:
        logs._current_json_validator = saved


def test_the_fast_reader_is_used_with_this_pydantic() -> None:
    read = logs._current_json_validator(EpisodeRecord)
    assert getattr(read, "__self__", None) is not EpisodeRecord  # not the full validation


def test_a_subclass_with_its_own_init_gets_the_full_validation() -> None:
    class Counted(EpisodeRecord):
        made: ClassVar[int] = 0

        def __init__(self, **data: Any) -> None:
            super().__init__(**data)
            type(self).made += 1

    rec = logs._current_json_validator(Counted)(LINES["valid"])
    assert type(rec) is Counted and Counted.made == 1


def test_a_subclass_with_a_post_init_gets_the_full_validation() -> None:
    class Seen(EpisodeRecord):
        seen: ClassVar[int] = 0

        def model_post_init(self, context: Any, /) -> None:
            type(self).seen += 1

    rec = logs._current_json_validator(Seen)(LINES["valid"])
    assert type(rec) is Seen and Seen.seen == 1


@pytest.mark.parametrize("name", sorted(LINES))
def test_a_line_reads_the_same_with_and_without_the_fast_reader(name: str) -> None:
    line = LINES[name]
    fast_rec, fast_msg, fast_newer = logs._read_line(line, False, NO_SECRETS)
    slow_rec, slow_msg, slow_newer = _slow(line)
    assert (fast_msg, fast_newer) == (slow_msg, slow_newer)
    if slow_rec is None:
        assert fast_rec is None
        return
    assert type(fast_rec) is EpisodeRecord
    assert fast_rec == slow_rec
    assert fast_rec.model_fields_set == slow_rec.model_fields_set
    assert dump_record(fast_rec) == dump_record(slow_rec)


def test_lines_the_migration_changes_never_take_the_fast_reader() -> None:
    read = logs._current_json_validator(EpisodeRecord)
    for name in ("version 1", "version 2", "version true", "answer past int64", "answer below int64"):
        with pytest.raises(ValueError):
            read(LINES[name])
    old = logs._read_line(LINES["version 1"], False, NO_SECRETS)[0]
    assert old is not None and old.schema_version == 3
    big = logs._read_line(LINES["answer past int64"], False, NO_SECRETS)[0]
    assert big is not None and big.answer is None and big.end == "invalid" and "64-bit" in (big.error or "")


def test_records_read_fast_behave_as_models() -> None:
    rec = logs._current_json_validator(EpisodeRecord)(LINES["valid"])
    assert rec.steps[0].tags_added == [(1.25, 2.5), (30.0, 40.0)] and rec.arm.options == {"budget": 3}
    assert rec.model_copy(update={"answer": 3}).answer == 3
    assert EpisodeRecord.model_validate(rec.model_dump()) == rec
    with pytest.raises(ValueError):
        rec.model_validate({"x": 1})
