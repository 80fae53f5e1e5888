"""Point-level audit columns are empty (not 0 or 100) for arms that cannot point, decided from
the tool set the log records, and the CSVs and the report say why."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from countgym.analysis import audit_episodes, summarize
from countgym.analysis.audit import NO_POINTING, arm_points
from countgym.analysis.report import summary_section
from countgym.logs import ArmSpec, EpisodeRecord

from .test_analysis_audit import make_dataset, record, resolver, stimulus

PTS = [(100.0, 100.0), (300.0, 100.0), (500.0, 100.0), (100.0, 400.0)]
POINT_COLUMNS = ("on_target", "duplicate", "phantom", "omission", "pointing_error", "cardinality_consistent",
                 "revised", "on_target_t075", "omission_t150")


def _as(rec: EpisodeRecord, arm: str, env: dict, name_options: dict | None = None) -> EpisodeRecord:
    return rec.model_copy(update={"arm": ArmSpec(name=arm, options=name_options or dict(env)), "env_options": env})


def _records() -> list[EpisodeRecord]:
    tagged = record("tag", "s", [PTS[:3]], answer=3, n=4)
    silent_tag = record("tag-no-call", "s", [], answer=4, n=4)  # a tag arm that answered at once
    # What `tool_sets` x `direct` logged: tag and crop enabled, but the prompt asks for a number.
    direct_tools = _as(record("direct-tools", "s", [], answer=4, n=4), "direct",
                       {"tools": ["tag", "crop", "answer"], "budget": 1, "prompt": "direct"})
    cot = _as(record("cot", "s", [], answer=5, n=4), "cot", {"tools": ["answer"], "prompt": "cot"})
    # A plug-in named like a baseline still points if its tool set offers tag.
    named_direct = _as(record("named-direct", "s", [], answer=4, n=4), "direct",
                       {"tools": ["tag", "answer"], "prompt": "tools"})
    cf = _as(record("cf", "s", [], answer=4, n=4), "cf-mcq", {"task": "countercount", "question": "mcq"})
    return [tagged, silent_tag, direct_tools, cot, named_direct, cf]


def test_arm_points_reads_the_logged_tool_set() -> None:
    got = {r.episode_id: arm_points(r) for r in _records()}
    assert got == {"tag": True, "tag-no-call": True, "direct-tools": False, "cot": False,
                   "named-direct": True, "cf": False}


def test_non_pointing_episodes_get_empty_point_columns_and_a_note(tmp_path: Path) -> None:
    ds = make_dataset(tmp_path / "ds", [stimulus("s", PTS)])
    df = audit_episodes(_records(), resolve=resolver(ds=ds)).set_index("episode_id")
    for eid in ("direct-tools", "cot", "cf"):
        for col in POINT_COLUMNS:
            assert pd.isna(df.loc[eid, col]), (eid, col)
        assert df.loc[eid, "audit_note"] == NO_POINTING
        assert bool(df.loc[eid, "correct"]) == (eid != "cot")  # counting metrics still count
    # A pointing arm that placed no tag is scored: every object omitted is the finding.
    assert df.loc["tag-no-call", "omission"] == 4 and df.loc["tag-no-call", "on_target"] == 0
    assert df.loc["tag", "omission"] == 1 and df.loc["tag", "on_target"] == 3
    assert pd.isna(df.loc["tag", "audit_note"]) and df.loc["named-direct", "omission"] == 4

    s = summarize(df.reset_index(), n_resamples=20).set_index("arm")
    row = s.loc["direct[tools=tag+crop+answer]"]
    for col in ("on_target_per100", "omission_per100", "phantom_per100", "duplicate_per100", "pointing_error",
                "cardinality_consistency", "revision_rate", "omission_per100_t075"):
        assert pd.isna(row[col]), col  # not 0 on-target and 100 omissions per 100 objects
    assert row["n_audited"] == 0 and row["audit_note"] == NO_POINTING
    assert row["em"] == 1.0  # the counting metrics are there

    html = summary_section(s.reset_index())
    assert "arm cannot point" in html and "direct[tools=tag+crop+answer]" in html


def test_written_csvs_say_why(tmp_path: Path) -> None:
    from countgym.analysis import write_audit

    ds = make_dataset(tmp_path / "ds", [stimulus("s", PTS)])
    write_audit(_records()[:4], tmp_path / "audit", resolve=resolver(ds=ds), n_resamples=20)
    ep = pd.read_csv(tmp_path / "audit" / "episodes.csv").set_index("episode_id")
    assert ep.loc["direct-tools", "audit_note"] == NO_POINTING and pd.isna(ep.loc["direct-tools", "omission"])
    sm = pd.read_csv(tmp_path / "audit" / "summary.csv")
    d = sm[sm["arm"].str.startswith("direct")].iloc[0]
    assert d["audit_note"] == NO_POINTING and pd.isna(d["omission_per100"]) and pd.isna(d["on_target_per100"])
