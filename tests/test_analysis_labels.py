"""Arm labels: provenance never splits an arm, ablations are judged against the arm's defaults."""

from __future__ import annotations

import pytest

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


def test_the_transport_does_not_make_a_variant() -> None:
    base = {**ARMS["tag"].env_options(), "tools": ["tag"]}
    a = rec("tag", **base, transport="litellm")
    b = rec("tag", **base)
    assert arm_labels([a, b]) == ["tag", "tag"]


def test_arm_defaults_are_not_ablations() -> None:
    direct = rec("direct", **ARMS["direct"].env_options())
    tag = rec("tag", **ARMS["tag"].env_options())
    no_verify = rec("tag", **{**ARMS["tag"].env_options(), "verify": False})
    off = rec("direct", **ARMS["direct"].env_options(), thinking=False)
    assert arm_labels([direct, tag, no_verify, off]) == ["direct", "tag", "tag[verify=False]", "direct[thinking=False]"]


# --- labels name the real cell (against the arm's built-in defaults) ---------------------------

TAG_LOGGED = {**ARMS["tag"].env_options(), "tools": ["tag", "answer"], "reward": "exact", "tool_cost": 0.0}


def logged(arm: str, defaults: dict | None, **options) -> EpisodeRecord:
    r = rec(arm, **options)
    r.arm.defaults = defaults
    r.env_options = {k: v for k, v in options.items() if k != "thinking"}
    return r


@pytest.mark.parametrize("with_defaults", [True, False])
def test_most_frequent_variant_is_not_the_reference(with_defaults: bool) -> None:
    # A run that holds only tag+grid at T = 3 (three times) and plain tag once: the frequent
    # cell must not take the bare name (it did: the reference was picked by frequency).
    ref = TAG_LOGGED if with_defaults else None
    grid3 = {**TAG_LOGGED, "tools": ["tag", "grid", "answer"], "budget": 3}
    recs = [logged("tag", ref, **grid3) for _ in range(3)] + [logged("tag", ref, **TAG_LOGGED)]
    labels = arm_labels(recs)
    assert labels[:3] == ["tag[tools=tag+grid+answer;budget=3]"] * 3
    assert labels[3] == "tag"
    # alone, the cell still names its options
    assert arm_labels(recs[:1]) == ["tag[tools=tag+grid+answer;budget=3]"]


def test_label_of_a_cell_does_not_depend_on_the_other_cells() -> None:
    b3 = logged("tag", TAG_LOGGED, **{**TAG_LOGGED, "budget": 3})
    b12 = logged("tag", TAG_LOGGED, **{**TAG_LOGGED, "budget": 12})
    crop = logged("tag", TAG_LOGGED, **{**TAG_LOGGED, "tools": ["tag", "crop", "answer"]})
    assert arm_labels([b3]) == arm_labels([b3, b12])[:1] == arm_labels([crop, b12, b3])[2:] == ["tag[budget=3]"]


def test_plugin_reference_is_its_env_defaults() -> None:
    env_defaults = dict(TAG_LOGGED)
    mine = logged("mypkg.mod:Policy", env_defaults, **{**TAG_LOGGED, "budget": 4})
    assert arm_labels([mine]) == ["mypkg.mod:Policy[budget=4]"]
    assert arm_labels([logged("mypkg.mod:Policy", env_defaults, **TAG_LOGGED)]) == ["mypkg.mod:Policy"]


def test_fallback_table_matches_the_arms_the_runner_builds(tiny_dataset) -> None:
    from countgym.agents.registry import base_env_options
    from countgym.analysis.arms import BUILTIN_REFERENCES, ENV_DEFAULTS
    from countgym.envs.image_env import CountImageEnv

    assert set(BUILTIN_REFERENCES) == set(ARMS)
    for name in ARMS:
        built = CountImageEnv(tiny_dataset, **base_env_options(name)).options()
        assert {**ENV_DEFAULTS["image"], **BUILTIN_REFERENCES[name]} == built, name


SWEEP = '''
out = "{out}"
datasets = ["{data}"]
arms = ["tag"]
models = ["openai/fake"]
tool_sets = [["tag"], ["grid", "tag"]]
budgets = [3, 6]
limit = 1
[model_options."openai/fake"]
api_base = "{base}"
api_key = "x"
'''


@pytest.mark.slow
def test_sweep_labels_columns_and_tool_spelling(tiny_dataset, tmp_path, capsys) -> None:
    import pandas as pd

    from countgym.cli import main
    from countgym.logs import read_records
    from countgym.testing.server import TestServer

    with TestServer() as srv:
        cfg = tmp_path / "s.toml"
        cfg.write_text(SWEEP.format(out=tmp_path / "runs", data=tiny_dataset.root, base=srv.base_url))
        assert main(["sweep", str(cfg), "--dry-run"]) == 0
        dry = capsys.readouterr().out
        assert main(["sweep", str(cfg), "--no-progress"]) == 0
    # the tool list is spelled as the log spells it, in the dry-run too
    assert "tools=['tag', 'grid', 'answer']" in dry and "['grid', 'tag']" not in dry
    recs = [r for f in sorted((tmp_path / "runs").glob("*.jsonl")) for r in read_records([f])]
    assert {tuple(r.arm.options["tools"]) for r in recs} == {("tag", "answer"), ("tag", "grid", "answer")}
    assert all(r.arm.defaults is not None and r.arm.defaults["budget"] == 6 for r in recs)
    assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "audit")]) == 0
    summary = pd.read_csv(tmp_path / "audit" / "summary.csv")
    rows = {r.arm: (r.tools, int(r.budget)) for r in summary.itertuples()}
    assert rows == {
        "tag": ("tag+answer", 6),
        "tag[budget=3]": ("tag+answer", 3),
        "tag[tools=tag+grid+answer]": ("tag+grid+answer", 6),
        "tag[tools=tag+grid+answer;budget=3]": ("tag+grid+answer", 3),
    }
    episodes = pd.read_csv(tmp_path / "audit" / "episodes.csv")
    for col in ("tools", "budget", "verify", "numbered", "one_point_per_call", "order", "perturb", "prompt"):
        assert col in episodes.columns and col in summary.columns
    contrasts = pd.read_csv(tmp_path / "audit" / "contrasts.csv")
    assert set(contrasts["arm_a"]) | set(contrasts["arm_b"]) <= set(rows)
    html = (tmp_path / "audit" / "report.html").read_text()
    assert "tag[tools=tag+grid+answer;budget=3]" in html
