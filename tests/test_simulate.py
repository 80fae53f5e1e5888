"""The simulated model (``--simulate``): profiles, the real path, and the audit recovering what
was injected (omissions, duplicates, phantoms, pointing error, CounterCount bias, video
under-counting, a finite R80)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image, ImageDraw

from countgym.cli import main
from countgym.logs import iter_records
from countgym.simulate_context import (
    STIMULUS_HEADER,
    register_endpoint,
    simulation_headers,
    stimulus_scope,
    unregister_endpoint,
)
from countgym.stimulus import Stimulus, write_manifest
from countgym.testing.profiles import BUILTIN, builtin_profile, load_profiles


def dots_dataset(root: Path, n_images: int, counts: list[int] | None = None, seed: int = 0) -> Path:
    """Images of well-separated black discs on a 768 px canvas (jittered grid cells)."""
    rng = random.Random(seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    stims = []
    for i in range(n_images):
        n = counts[i] if counts is not None else 30
        cells = [(c % 8, c // 8) for c in rng.sample(range(64), n)]
        pts = [(48 + 96 * cx + rng.uniform(-20, 20), 48 + 96 * cy + rng.uniform(-20, 20)) for cx, cy in cells]
        im = Image.new("RGB", (768, 768), "white")
        d = ImageDraw.Draw(im)
        for x, y in pts:
            d.ellipse([x - 12, y - 12, x + 12, y + 12], fill="black")
        rel = f"images/s{i:03d}.png"
        im.save(root / rel)
        stims.append(Stimulus(id=f"s{i:03d}", n=n, obj="dots", obj_sing="dot", image=rel, points=pts))
    write_manifest(root, stims)
    return root


def write_profile(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def run_cli(*argv: str) -> int:
    return main([*argv])


def audit(runs: Path, out: Path) -> Path:
    assert run_cli("audit", str(runs), "--out", str(out), "--viewer-episodes", "0", "--resamples", "200") == 0
    return out


# --- profiles -----------------------------------------------------------------------------------
def test_builtin_profiles_differ_by_name_and_are_deterministic() -> None:
    a, b = builtin_profile("REPLACE:qwen3-vl-8b"), builtin_profile("REPLACE:gemma-3-4b")
    assert a == builtin_profile("REPLACE:qwen3-vl-8b")
    assert a != b and a.omission != b.omission and a.canonical != b.canonical
    assert BUILTIN.provenance("x")["source"] == "built-in"


def test_profile_file_layers_default_and_model(tmp_path: Path) -> None:
    p = load_profiles(write_profile(tmp_path / "p.toml", '[default]\nomission = 0.2\n[models."openai/sim-a"]\nduplicate = 0.1\n'))
    assert p.for_model("openai/sim-a").omission == 0.2 and p.for_model("openai/sim-a").duplicate == 0.1
    assert p.for_model("other").duplicate == 0.0 and p.for_model("other").count_sigma == 0.1
    assert p.provenance("other")["source"] == "p.toml"


@pytest.mark.parametrize("text", [
    "[default]\nomision = 0.1\n",
    "[default]\nomission = 1.5\n",
    "[default]\ncount_sigma = 'big'\n",
    "[default]\ncanonical = true\n",
    "[defaults]\n",
    "[default\n",
])
def test_bad_profile_is_one_line_exit_2(tmp_path: Path, text: str, tiny_dataset, capsys) -> None:
    prof = write_profile(tmp_path / "bad.toml", text)
    rc = run_cli("run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "openai/x",
                 "--simulate", str(prof), "--out", str(tmp_path / "runs"), "--no-progress")
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "bad.toml" in err and "Traceback" not in err


def test_header_goes_only_to_a_registered_simulated_endpoint() -> None:
    url = "http://127.0.0.1:1/v1"
    with stimulus_scope("a b/c", 3):
        assert simulation_headers(url) == {}
        register_endpoint(url)
        try:
            assert simulation_headers(url + "/chat/completions") == {STIMULUS_HEADER: "a%20b%2Fc;3"}
            assert simulation_headers("https://api.openai.com/v1") == {}
        finally:
            unregister_endpoint(url)
    assert simulation_headers(url) == {}


# --- a perfect model: every arm answers the truth through the real path ----------------------------
PERFECT = """[default]
count_sigma = 0.0
pointing_sigma = 0.0
"""


@pytest.mark.parametrize("agent", ["direct", "cot", "list", "tag", "tag-1", "tiles", "tag+crop"])
def test_error_free_profile_answers_the_truth(tmp_path: Path, tiny_dataset, agent: str) -> None:
    prof = write_profile(tmp_path / "perfect.toml", PERFECT)
    runs = tmp_path / "runs"
    assert run_cli("run", "--data", str(tiny_dataset.root), "--agent", agent, "--model", "REPLACE:any-model",
                   "--simulate", str(prof), "--out", str(runs), "--no-progress") == 0
    recs = list(iter_records(sorted(runs.glob("*.jsonl"))))
    assert len(recs) == 3
    for r in recs:
        assert r.end == "answer" and r.answer == r.truth.n, (r.stimulus_id, r.answer, r.steps[-1].reply)
        assert r.model == "REPLACE:any-model"
        assert r.simulated == {"profile": load_profiles(prof).for_model("REPLACE:any-model").as_dict(),
                               "source": "perfect.toml"}
        # Model calls cost 0; a step the policy took without a call (list's answer) has none.
        assert all(s.cost in (0, None) for s in r.steps) and any(s.cost == 0 for s in r.steps)
        if agent not in ("direct", "cot"):
            assert len(r.tags) == r.truth.n


# --- the audit recovers the injected point errors (tool loop) ---------------------------------------
INJECTED = {"omission": 0.10, "duplicate": 0.05, "phantom": 0.06, "pointing_sigma": 6.0}


@pytest.fixture(scope="module")
def point_audit(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    root = tmp_path_factory.mktemp("sim-points")
    data = dots_dataset(root / "data", 20)  # 600 objects
    prof = write_profile(root / "p.toml", '[models."openai/sim-a"]\n' + "".join(f"{k} = {v}\n" for k, v in INJECTED.items()))
    runs = root / "runs"
    assert run_cli("run", "--data", str(data), "--agent", "tag", "--model", "openai/sim-a", "--simulate", str(prof),
                   "--out", str(runs), "--concurrency", "4", "--no-progress") == 0
    out = audit(runs, root / "audit")
    summary = pd.read_csv(out / "summary.csv")
    row = summary[(summary["model"] == "openai/sim-a") & (summary["arm"] == "tag")]
    assert len(row) == 1
    return row.iloc[0]


@pytest.mark.slow  # 600 objects through the tag loop and the audit (about 30 s)
def test_point_errors_recovered_within_3_per_100(point_audit) -> None:
    s = point_audit
    assert s["n_objects"] >= 500
    assert abs(s["omission_per100"] - 100 * INJECTED["omission"]) <= 3
    assert abs(s["duplicate_per100"] - 100 * INJECTED["duplicate"]) <= 3
    assert abs(s["phantom_per100"] - 100 * INJECTED["phantom"]) <= 3


@pytest.mark.slow
def test_pointing_error_recovered(point_audit) -> None:
    # Median distance of a 2-D Gaussian with sd sigma per axis (thousandths of the shorter side).
    expected = INJECTED["pointing_sigma"] * math.sqrt(2 * math.log(2))
    assert point_audit["pointing_error"] == pytest.approx(expected, rel=0.15)


def test_a_clean_model_scores_no_point_errors(tmp_path: Path) -> None:
    data = dots_dataset(tmp_path / "data", 4)
    prof = write_profile(tmp_path / "p.toml", "[default]\npointing_sigma = 2.0\n")
    runs = tmp_path / "runs"
    assert run_cli("run", "--data", str(data), "--agent", "list", "--model", "openai/clean", "--simulate", str(prof),
                   "--out", str(runs), "--no-progress") == 0
    s = pd.read_csv(audit(runs, tmp_path / "audit") / "summary.csv").iloc[0]
    assert s["omission_per100"] == s["duplicate_per100"] == s["phantom_per100"] == 0.0
    assert s["em"] == 1.0


# --- CounterCount: the bias rate recovers `canonical` ---------------------------------------------
@pytest.fixture(scope="module")
def countercount_100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from countgym.scenes.make import make_dataset

    return make_dataset("countercount", tmp_path_factory.mktemp("cc100") / "cc", limit=100, progress=False)


def _cf_bias(runs: Path, out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    audit(runs, out)
    return pd.read_csv(out / "countercount" / "cf_scores.csv"), pd.read_csv(out / "countercount" / "cf_episodes.csv")


@pytest.mark.slow  # draws 100 CounterCount pairs (about 40 s)
@pytest.mark.parametrize("arm", ["cf-mcq", "cf-oe"])
def test_countercount_bias_rate_recovers_canonical(tmp_path: Path, countercount_100: Path, arm: str) -> None:
    prof = write_profile(tmp_path / "p.toml", "[default]\ncanonical = 0.4\n")
    runs = tmp_path / "runs"
    assert run_cli("run", "--data", str(countercount_100), "--agent", arm, "--model", "REPLACE:vlm",
                   "--simulate", str(prof), "--out", str(runs), "--concurrency", "4", "--no-progress") == 0
    scores, ep = _cf_bias(runs, tmp_path / "audit")
    assert ep["answered"].all()  # both formats parse
    row = scores.iloc[0]
    assert row["n_cf"] >= 100 and row["factual_accuracy"] == 1.0
    # Within three binomial standard errors (0.15 at 100 CF items): each draw is Bernoulli(0.4).
    assert abs(row["bias_rate"] - 0.4) <= 3 * (0.4 * 0.6 / row["n_cf"]) ** 0.5


@pytest.mark.slow  # 200 episodes and their audit (about 20 s)
@pytest.mark.parametrize("arm", ["cf-mcq", "cf-oe"])
def test_countercount_bias_rate_over_repeats(tmp_path: Path, tiny_countercount: Path, arm: str) -> None:
    """The fast version: two pairs, 50 repeats each (each repeat an independent draw)."""
    prof = write_profile(tmp_path / "p.toml", "[default]\ncanonical = 0.7\n")
    runs = tmp_path / "runs"
    assert run_cli("run", "--data", str(tiny_countercount), "--agent", arm, "--model", "REPLACE:vlm",
                   "--simulate", str(prof), "--out", str(runs), "--repeats", "50", "--concurrency", "4",
                   "--no-progress") == 0
    scores, ep = _cf_bias(runs, tmp_path / "audit")
    assert ep["answered"].all()
    row = scores.iloc[0]
    assert row["n_cf"] >= 100 and row["factual_accuracy"] == 1.0
    assert abs(row["bias_rate"] - 0.7) <= 0.1
    assert row["bias_rate"] + row["cf_accuracy"] == pytest.approx(1.0)


# --- video: a negative count bias is a negative mean signed error -----------------------------------
def test_video_under_counting_recovered(tmp_path: Path, tiny_countvideo: Path) -> None:
    prof = write_profile(tmp_path / "p.toml", "[default]\ncount_bias = -0.3\ncount_sigma = 0.05\n")
    runs = tmp_path / "runs"
    assert run_cli("run", "--data", str(tiny_countvideo), "--agent", "video-p1", "--model", "REPLACE:video-llm",
                   "--simulate", str(prof), "--out", str(runs), "--repeats", "5", "--no-progress") == 0
    ep = pd.read_csv(audit(runs, tmp_path / "audit") / "episodes.csv")
    assert len(ep) == 10 and ep["answer"].notna().all()
    assert ep["signed_error"].mean() < 0


def test_simulated_runs_are_not_called_blind(tmp_path: Path, tiny_countercount: Path, tiny_countvideo: Path,
                                             capsys) -> None:
    """The simulated model answers CounterCount and video from their truth: none of the test
    server's "cannot see the truth" lines (or headers) belong in a simulated run."""
    for data, arm in ((tiny_countercount, "cf-mcq"), (tiny_countvideo, "video-p1")):
        assert run_cli("run", "--data", str(data), "--agent", arm, "--model", "REPLACE:vlm", "--simulate",
                       "--out", str(tmp_path / arm), "--no-progress") == 0
    err = capsys.readouterr().err
    assert "countgym testserver" not in err and "mean nothing" not in err


def test_countercount_interventions_draw_anew(tmp_path: Path, tiny_countercount: Path) -> None:
    """An intervention changes what the request shows, so its CF answers are drawn anew (paired
    deltas under no injected effect are noise, not exactly zero); the same request draws the same."""
    import json as _json

    prof = write_profile(tmp_path / "p.toml", "[default]\ncanonical = 0.5\nhedge = 0.0\n")

    def answers(arm: str, out: str) -> dict[str, object]:
        assert run_cli("run", "--data", str(tiny_countercount), "--agent", arm, "--model", "REPLACE:vlm",
                       "--simulate", str(prof), "--out", str(tmp_path / out), "--repeats", "20",
                       "--no-progress") == 0
        recs = [_json.loads(line) for f in sorted((tmp_path / out).glob("*.jsonl")) for line in f.read_text().splitlines()]
        return {r["episode_id"].split("/", 1)[1]: r["steps"][0]["reply"] for r in recs}

    plain, again, blurred = answers("cf-mcq", "a"), answers("cf-mcq", "b"), answers("cf-mcq+blur", "c")
    assert plain == again
    assert plain.keys() == blurred.keys() and plain != blurred


# --- R80: finite when count_sigma > 0 -----------------------------------------------------------
def test_finite_r80_with_count_noise(tmp_path: Path) -> None:
    counts = list(range(1, 13))
    data = dots_dataset(tmp_path / "data", len(counts), counts=counts)
    prof = write_profile(tmp_path / "p.toml", "[default]\ncount_sigma = 0.15\n")
    runs = tmp_path / "runs"
    assert run_cli("run", "--data", str(data), "--agent", "direct", "--model", "openai/sim-r", "--simulate", str(prof),
                   "--out", str(runs), "--repeats", "4", "--no-progress") == 0
    summary = pd.read_csv(audit(runs, tmp_path / "audit") / "summary.csv")
    row = summary[(summary["model"] == "openai/sim-r") & (summary["arm"] == "direct")]
    assert len(row) == 1
    value = float(row.iloc[0]["r80"])
    assert math.isfinite(value) and 1 <= value < 12


# --- sweep --simulate with --out / --limit ----------------------------------------------------------
def test_sweep_out_and_limit_override_the_config(tmp_path: Path, tiny_dataset, capsys) -> None:
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'out = "{tmp_path / "elsewhere"}"\ndatasets = ["{tiny_dataset.root}"]\n'
                   'arms = ["direct", "tag"]\nmodels = ["REPLACE:a", "REPLACE:b"]\nlimit = 3\n')
    out = tmp_path / "here"
    assert run_cli("sweep", str(cfg), "--simulate", "--out", str(out), "--limit", "2", "--no-progress") == 0
    logs = sorted(out.glob("*.jsonl"))
    assert len(logs) == 4 and not (tmp_path / "elsewhere").exists()
    recs = list(iter_records(logs))
    assert len(recs) == 8 and all(r.simulated["source"] == "built-in" for r in recs)
    # Built-in behaviour differs between the two model names.
    assert recs[0].simulated["profile"] != next(r for r in recs if r.model != recs[0].model).simulated["profile"]
    assert "4 cells, 8 episodes run, 0 errors, $0.0000" in capsys.readouterr().out


def test_placeholder_model_without_simulate_is_still_refused(tmp_path: Path, tiny_dataset, capsys) -> None:
    rc = run_cli("run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "REPLACE:x",
                 "--out", str(tmp_path / "r"), "--no-progress")
    assert rc == 2


def test_simulate_is_resumable_and_reproducible(tmp_path: Path, tiny_dataset) -> None:
    runs = tmp_path / "runs"
    args = ("run", "--data", str(tiny_dataset.root), "--agent", "tag", "--model", "REPLACE:m", "--simulate",
            "--out", str(runs), "--no-progress")
    assert run_cli(*args) == 0
    first = [json.loads(line) for line in next(runs.glob("*.jsonl")).read_text().splitlines()]
    assert run_cli(*args) == 0  # resumes: nothing to run
    assert len(next(runs.glob("*.jsonl")).read_text().splitlines()) == 3
    assert run_cli(*args, "--force") == 0
    again = [json.loads(line) for line in next(runs.glob("*.jsonl")).read_text().splitlines()]
    key = lambda r: r["stimulus_id"]  # noqa: E731
    assert [r["tags"] for r in sorted(first, key=key)] == [r["tags"] for r in sorted(again, key=key)]


@pytest.mark.parametrize("arm", ["cf-mcq", "cf-oe"])
def test_countercount_canonical_one_biases_every_cf_answer(tmp_path: Path, tiny_countercount: Path, arm: str) -> None:
    prof = write_profile(tmp_path / "p.toml", "[default]\ncanonical = 1.0\n")
    runs = tmp_path / "runs"
    assert run_cli("run", "--data", str(tiny_countercount), "--agent", arm, "--model", "REPLACE:vlm",
                   "--simulate", str(prof), "--out", str(runs), "--no-progress") == 0
    from countgym.stimulus import Dataset

    ds = Dataset(tiny_countercount)
    recs = list(iter_records(sorted(runs.glob("*.jsonl"))))
    assert len(recs) == 4
    for r in recs:
        meta = ds[r.stimulus_id].meta
        assert r.end == "answer" and r.answer is not None, r.steps[-1].reply
        assert r.answer == (meta["canonical_count"] if meta["kind"] == "cf" else r.truth.n)
