"""Arm labels: provenance never splits an arm, ablations are judged against the arm's defaults."""

from __future__ import annotations

from countgym.agents.arms import ARMS
from countgym.analysis.arms import arm_labels
from countgym.logs import ArmSpec, EpisodeRecord


def rec(arm: str, **options) -> EpisodeRecord:
    return EpisodeRecord(
        episode_id=f"{arm}-{len(options)}-{id(options)}", stimulus_id="s", dataset="d",
        arm=ArmSpec(name=arm, options=options), model="m", seed=0, end="answer",
        countgym_version="0", template_hash="0", started_at="t", finished_at="t",
    )


def test_provider_and_endpoint_do_not_make_variants() -> None:
    base = {**ARMS["tag"].env_options(), "tools": ["tag"]}
    a = rec("tag", **base, provider={"model": "openai/a", "temperature": 0}, api_base="http://x")
    b = rec("tag", **base, provider={"model": "openai/b", "temperature": 0}, api_base="http://y")
    assert arm_labels([a, b]) == ["tag", "tag"]


def test_arm_defaults_are_not_ablations() -> None:
    direct = rec("direct", **ARMS["direct"].env_options())
    tag = rec("tag", **ARMS["tag"].env_options())
    no_verify = rec("tag", **{**ARMS["tag"].env_options(), "verify": False})
    off = rec("direct", **ARMS["direct"].env_options(), thinking=False)
    assert arm_labels([direct, tag, no_verify, off]) == ["direct", "tag", "tag[verify=False]", "direct[thinking=False]"]
