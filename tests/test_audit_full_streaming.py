"""The whole ``countgym audit`` streams its logs: records are read once and only the few a later
stage shows or tests are read again; the re-readable source gives back exactly what was read."""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import countgym.logs as logs_mod
from countgym.analysis.r80 import _resampled_means, counting_range
from countgym.analysis.source import RecordSource, records_by_id
from countgym.analysis.tables import write_audit_files
from countgym.cli import main
from countgym.logs import ArmSpec, EpisodeRecord, LogLineError, StepRecord, Truth, iter_records
from countgym.stimulus import Stimulus, write_manifest

SIDE = 768


def _stim(i: int) -> Stimulus:
    pts = [(20.0 + 14 * k, 30.0 + 9 * (i % 50)) for k in range(20)]
    return Stimulus(id=f"s{i}", n=20, obj="dots", obj_sing="dot", image=f"s{i}.png", points=pts)


def _record(stim: Stimulus, dataset: str, repeat: int = 0) -> EpisodeRecord:
    tags = [(x + 1.0, y) for x, y in stim.points or []][: 15 + int(stim.id[1:]) % 6]
    return EpisodeRecord(
        episode_id=f"c/{stim.id}/r{repeat}", stimulus_id=stim.id, dataset=dataset, repeat=repeat,
        arm=ArmSpec(name="tag", options={"tools": ["tag"]}), model="m", seed=0,
        image_size=(SIDE, SIDE), stimulus_size=(SIDE, SIDE),
        steps=[StepRecord(index=0, reply="tags", action={"tool": "tag"}, tags_added=tags),
               StepRecord(index=1, action={"tool": "answer", "count": len(tags)})],
        tags=tags, answer=len(tags), end="answer", truth=Truth(n=20), countgym_version="t",
        template_hash="h", started_at="", finished_at="",
    )  # fmt: skip


def _run(tmp_path: Path, n: int) -> tuple[Path, list[EpisodeRecord]]:
    stims = [_stim(i) for i in range(n)]
    write_manifest(tmp_path / "ds", stims)
    recs = [_record(s, str(tmp_path / "ds")) for s in stims]
    log = tmp_path / "run" / "episodes.jsonl"
    log.parent.mkdir()
    log.write_text("".join(r.model_dump_json() + "\n" for r in recs), encoding="utf-8")
    return log, recs


class _Counted(EpisodeRecord):
    """An episode record that counts its living instances (and the most alive at once)."""

    alive: ClassVar[int] = 0
    most: ClassVar[int] = 0

    def __init__(self, **data: object) -> None:
        super().__init__(**data)
        cls = type(self)
        cls.alive += 1
        cls.most = max(cls.most, cls.alive)

    def __del__(self) -> None:
        type(self).alive -= 1


@pytest.mark.slow
def test_full_audit_command_holds_no_more_records_than_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``countgym audit`` over 240 episodes with a 5-episode viewer: every record read from the
    log is counted while alive; at no time are more than the viewer's few alive (reading the
    whole log into a list, as before, holds all 240)."""
    n = 240
    log, _ = _run(tmp_path, n)
    monkeypatch.setattr(logs_mod, "EpisodeRecord", _Counted)
    _Counted.alive = _Counted.most = 0
    rc = main(["audit", str(log.parent), "--out", str(tmp_path / "out"), "--viewer-episodes", "5"])
    out = capsys.readouterr().out
    assert rc == 0 and "viewer: 5 of 240 episodes" in out
    assert (tmp_path / "out" / "episodes.csv").read_text().count("\n") == n + 1
    assert 1 <= _Counted.most <= 8, f"{_Counted.most} records alive at once"


@pytest.mark.slow
def test_log_and_in_memory_records_write_the_same_audit(tmp_path: Path) -> None:
    """The streamed source (records read again from the file for the viewer and the tests)
    and a list of the same records give the same files, byte for byte (but the date)."""
    log, recs = _run(tmp_path, 30)
    a = write_audit_files([log], tmp_path / "a", n_resamples=50)
    b = write_audit_files(recs, tmp_path / "b", n_resamples=50)
    assert a.viewer_shown == b.viewer_shown == 30
    names = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    for name in names:
        x, y = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        if name.name == "report.html":
            x = b"".join(line for line in x.splitlines(True) if b"generated:" not in line)
            y = b"".join(line for line in y.splitlines(True) if b"generated:" not in line)
        assert x == y, name


def test_empty_log_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "run" / "episodes.jsonl"
    log.parent.mkdir()
    log.write_text("not json\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(["audit", str(log), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "no valid episode records" in err and "(1 invalid lines)" in err
    assert not (tmp_path / "out").exists()


# --- the record source ----------------------------------------------------------------------------


def test_source_reads_back_what_the_file_reader_reads(tmp_path: Path) -> None:
    """Bad lines, blank lines, CRLF endings and a bare CR (text mode splits lines there): the
    same records and the same reported line numbers as ``iter_records``, then each record read
    again by position and by id (the last record of a repeated id)."""
    stims = [_stim(i) for i in range(5)]
    recs = [_record(s, "ds") for s in stims]
    dup = recs[1].model_copy(update={"answer": 99})
    raw = (
        recs[0].model_dump_json() + "\r\n" + "{bad\n\n" + recs[1].model_dump_json() + "\r"
        + recs[2].model_dump_json() + "\n" + "[1]\r\n" + recs[3].model_dump_json() + "\n"
        + dup.model_dump_json() + "\n" + recs[4].model_dump_json()
    )  # fmt: skip
    log = tmp_path / "log.jsonl"
    log.write_bytes(raw.encode())
    want_errors: list[LogLineError] = []
    got_errors: list[LogLineError] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = list(iter_records([log], want_errors))
        src = RecordSource([], [log], got_errors)
        first = list(src)
    assert [r.model_dump() for r in first] == [r.model_dump() for r in want]
    assert [e.model_dump() for e in got_errors] == [e.model_dump() for e in want_errors]
    assert [e.line for e in got_errors] == [2, 6]
    assert len(src) == 6
    assert [r.model_dump() for r in src] == [r.model_dump() for r in want]
    assert src[-1].episode_id == "c/s4/r0" and src[2].episode_id == "c/s2/r0"
    assert [r.episode_id for r in src.view([4, 0])] == ["c/s1/r0", "c/s0/r0"]
    got = records_by_id(src, ["c/s1/r0", "nope"])
    assert list(got) == ["c/s1/r0"] and got["c/s1/r0"].answer == 99
    assert records_by_id(want, ["c/s1/r0"])["c/s1/r0"].answer == 99


def test_source_keeps_what_a_hook_replaced(tmp_path: Path) -> None:
    recs = [_record(_stim(i), "ds") for i in range(3)]
    src = RecordSource(recs)
    src.add_hook(lambda i, r: r.model_copy(update={"answer": 7}) if i == 1 else r)
    assert [r.answer for r in src] == [recs[0].answer, 7, recs[2].answer]
    assert [r.answer for r in src] == [recs[0].answer, 7, recs[2].answer]
    assert src[1].answer == 7 and records_by_id(src, ["c/s1/r0"])["c/s1/r0"].answer == 7
    with pytest.raises(RuntimeError):
        src.add_hook(lambda i, r: r)


def test_source_needs_its_first_pass(tmp_path: Path) -> None:
    log, _ = _run(tmp_path, 3)
    src = RecordSource([], [log])
    with pytest.raises(TypeError, match="first"):
        len(src)
    src.scan()
    assert len(src) == 3


# --- R80's bootstrap in bounded memory ----------------------------------------------------------


def test_resampled_means_are_the_one_draw_means() -> None:
    """Below the one-draw limit the resample means are those of the single index matrix the
    bootstrap always drew (same seed, same numbers)."""
    r = np.sort(np.random.default_rng(1).random(3_001))  # in canonical order: resampled as it is
    got = _resampled_means(r, 700, np.random.default_rng(5))
    want = r[np.random.default_rng(5).integers(0, len(r), size=(700, len(r)))].mean(axis=1)
    assert np.array_equal(got, want)


@pytest.mark.parametrize(("m", "chunk"), [(9_999, 2_010_000), (7, 15), (216, 1_000_000), (5, 4)])
def test_resampled_means_in_blocks_are_the_one_draw_means(m: int, chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of rows, odd-sized ones included, give the means of the one index matrix a
    single call draws, and leave the generator where that call leaves it."""
    import countgym.analysis.r80 as r80

    monkeypatch.setattr(r80, "_CHUNK_ENTRIES", chunk)
    r = np.sort(np.random.default_rng(2).random(m))  # in canonical order: resampled as it is
    rng = np.random.default_rng(5)
    got = _resampled_means(r, 333, rng)
    one = np.random.default_rng(5)
    want = r[one.integers(0, m, size=(333, m))].mean(axis=1)
    assert np.array_equal(got, want)
    assert rng.integers(0, m, size=9).tolist() == one.integers(0, m, size=9).tolist()


def test_counting_range_of_a_crowded_level_in_bounded_memory() -> None:
    """40,000 images at one level x 2,000 resamples: drawing every index at once took 640 MB
    (plus as much again for the picked values); the bootstrap stays under 100 MB."""
    rng = np.random.default_rng(0)
    n = np.full(40_000, 50)
    correct = (rng.random(40_000) < 0.9).astype(float)
    tracemalloc.start()
    try:
        cr = counting_range(n, correct, n_resamples=2000, seed=0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One tested level: every resample gives R80 = 50, so no interval is claimed (never [50, 50]).
    assert cr.r80 == 50 and cr.censored and np.isnan(cr.ci_low) and np.isnan(cr.ci_high)
    assert cr.ci_note == "every resample gives the same R80 (50)"
    assert peak < 100_000_000, f"peak {peak / 1e6:.0f} MB"


def test_traversal_tau_is_kendall_tau_b_of_the_index() -> None:
    """The traversal statistic without the index side's pairs: the same float as
    ``kendall_tau_b(arange(n), y)``, ties in y included, and the same errors."""
    from countgym.analysis.correlation import kendall_tau_b
    from countgym.analysis.order import traversal_tau

    rng = np.random.default_rng(0)
    for k in range(600):
        n = int(rng.integers(5, 70))
        t = rng.uniform(0, 500, (n, 2))
        if k % 3 == 0:
            t = np.round(t / 50) * 50  # ties
        if k % 50 == 0:
            t[:, 1] = 7.0  # constant: undefined
        want = kendall_tau_b(np.arange(n), t[:, 1])
        got = traversal_tau(t)
        assert got == want or (np.isnan(got) and np.isnan(want))
    assert traversal_tau([(0, 3), (1, 2), (2, 1), (3, 0), (4, -1)]) == -1.0
    with pytest.raises(ValueError, match="finite"):
        traversal_tau([(0, 1), (0, 2), (0, float("nan")), (0, 4), (0, 5)])


# --- lean ground truth ------------------------------------------------------------------------------


def _manifest(tmp_path: Path, n: int) -> list[Stimulus]:
    rng = np.random.default_rng(0)
    stims = [
        Stimulus(id=f"s{i}", n=50, obj="dots", obj_sing="dot", image=f"s{i}.png",
                 points=[(float(x), float(y)) for x, y in rng.uniform(0, 768, (50, 2))], meta={"k": i})
        for i in range(n)
    ]  # fmt: skip
    write_manifest(tmp_path / "ds", stims)
    return stims


@pytest.mark.slow
def test_dataset_keeps_manifest_lines_not_objects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 stimuli of 50 points: as objects about 20 MB; kept as their manifest lines (a
    few parsed) under half of that. Every access gives the stimulus the manifest holds."""
    import countgym.stimulus as stimulus_mod
    from countgym.errors import UserError
    from countgym.stimulus import Dataset

    stims = _manifest(tmp_path, 3000)
    monkeypatch.setattr(stimulus_mod, "STIMULUS_CACHE_SIZE", 16)
    tracemalloc.start()
    try:
        ds = Dataset(tmp_path / "ds")
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held < 9_000_000, f"{held / 1e6:.1f} MB held"
    assert len(ds) == 3000 and ds.ids() == [s.id for s in stims]
    for i in (0, 2999, 17, 0, 1500):
        assert ds[f"s{i}"] == stims[i]
    assert list(ds) == stims
    with pytest.raises(UserError, match="no stimulus 'nope'"):
        ds["nope"]
    assert ds.stimuli == stims and ds["s5"] is ds.stimuli[5]  # the list, once built, is kept
    ds.stimuli = stims[:2]  # as subset datasets do
    assert len(ds) == 2 and ds.ids() == ["s0", "s1"]
    with pytest.raises(UserError):
        ds["s2"]


# --- the table printed after a run streams too ------------------------------------------------


def test_glance_of_logs_holds_no_more_records_than_it_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The results table after ``countgym run``/``sweep`` reads its logs as the audit does:
    each record is taken into the tables as it goes by (reading them into a list, as before,
    holds all 240 at once)."""
    from countgym.analysis.glance import glance_of_logs

    log, _ = _run(tmp_path, 240)
    monkeypatch.setattr(logs_mod, "EpisodeRecord", _Counted)
    _Counted.alive = _Counted.most = 0
    g = glance_of_logs([log], cache_dir=tmp_path / "cache")
    assert g is not None and int(g.summary["n_episodes"].sum()) == 240
    assert 1 <= _Counted.most <= 8, f"{_Counted.most} records alive at once"


def test_glance_of_logs_is_the_table_of_the_records(tmp_path: Path) -> None:
    """Streamed from the log, the glance has the summary that the in-memory records give, and
    a log without a valid record has no table."""
    from countgym.analysis.glance import GLANCE_RESAMPLES, glance_of_logs, render
    from countgym.analysis.pipeline import compute_tables

    log, recs = _run(tmp_path, 30)
    g = glance_of_logs([log], cache_dir=tmp_path / "cache")
    want = compute_tables(recs, n_resamples=GLANCE_RESAMPLES)
    assert g is not None
    pd_testing = pytest.importorskip("pandas.testing")
    pd_testing.assert_frame_equal(g.summary, want.summary)
    assert g.tasks == {(str(log.parents[1] / "ds"), "tag", "m"): "image"}
    assert "tag" in render(g, where="x")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert glance_of_logs([bad], cache_dir=tmp_path / "cache") is None


# --- the fast log and manifest readers read what the careful ones read -------------------------


def _careful(line: str) -> EpisodeRecord | None:
    import json

    try:
        return EpisodeRecord.model_validate(json.loads(line))
    except (ValueError, RecursionError):
        return None


def test_log_lines_read_as_json_loads_and_model_validate_read_them() -> None:
    """Lines parsed and validated by pydantic in one go give the record (or the refusal) that
    ``json.loads`` + ``model_validate`` give: duplicate keys, NaN in free options, numbers at
    and past the digit limit, 64-bit bounds, true for an int, a version-1 record, a newer one."""
    import json

    from countgym.logs import _read_line

    base = _record(_stim(1), "ds").model_dump_json()
    cut = base[:-1]
    lines = [
        base,
        cut + ',"answer":3,"answer":4}',  # the last duplicate wins
        cut + ',"env_options":{"x":NaN,"y":1e400}}',
        cut + ',"env_options":{"x":' + "7" * 4300 + "}}",
        cut + ',"env_options":{"x":' + "7" * 4301 + "}}",
        cut + ',"seed":' + str(2**63) + "}",
        cut + ',"answer":' + str(2**70) + "}",
        cut + ',"repeat":true}',
        cut + ',"schema_version":1}',
        cut + ',"schema_version":2}',
        cut + ',"schema_version":4}',
        cut + ',"tags":[[1,"2"]]}',
        cut + ',"cost":"NaN"}',
        base + " x",
        "[" * 300 + "]" * 300,
    ]
    for line in lines:
        got, msg, _ = _read_line(line, False, [])
        want = _careful(line)
        assert (got is None) == (want is None), (line[-60:], msg)
        if want is not None:
            assert got is not None and json.dumps(got.model_dump(), default=str) == json.dumps(
                want.model_dump(), default=str
            ), line[-60:]


def test_manifest_lines_read_as_json_loads_and_model_validate_read_them(tmp_path: Path) -> None:
    """A manifest's stimuli, parsed by pydantic in one go, are those the careful reader gives
    (kept and parsed again alike), and a bad line is refused naming the same field."""
    import json

    from countgym.errors import UserError
    from countgym.stimulus import Dataset

    good = _stim(0).model_dump_json()[:-1]
    lines = [
        good.replace('"id":"s0"', '"id":"a"') + ',"meta":{"k":NaN,"k":2,"big":' + "9" * 4300 + "}}",
        good.replace('"id":"s0"', '"id":"b"') + ',"n":20,"n":20}',
    ]
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    ds = Dataset(tmp_path / "ds")
    for line in lines:
        want = Stimulus.model_validate(json.loads(line))
        assert ds[want.id] == want
    for bad, field in [(',"meta":{"k":' + "9" * 4301 + "}}", "digits"), (',"n":3}', "points")]:
        (tmp_path / "ds" / "manifest.jsonl").write_text(good + bad + "\n")
        with pytest.raises(UserError, match=field):
            Dataset(tmp_path / "ds")
