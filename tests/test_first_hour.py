"""A newcomer's first hour: the mistakes people make first get one clear line and exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from countgym.cli import main


def _run(argv: list[str], capsys) -> tuple[int, str]:
    rc = main(argv)
    return rc, capsys.readouterr().err


def test_a_mistyped_battery_is_named_before_the_arm_check(tmp_path: Path, capsys) -> None:
    # docs/cli.md's own example: the nearest battery is suggested, not "the arm does not run here".
    rc, err = _run(["run", "--data", "countvide", "--agent", "video-p1", "--model", "openai/m",
                    "--out", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2
    assert "unknown dataset 'countvide'" in err and "did you mean 'countvideo'?" in err
    assert "runs on the video task" not in err and len(err.strip().splitlines()) == 1


def test_a_mistyped_subset_suggests_the_subset(tmp_path: Path, capsys) -> None:
    rc, err = _run(["run", "--data", "dotarrays:comon", "--agent", "oracle", "--out", str(tmp_path),
                    "--no-progress"], capsys)
    assert rc == 2 and "did you mean dotarrays:common?" in err


@pytest.mark.parametrize(("option", "says"), [
    ("sigma=abc", "sigma must be a number, got 'abc'"),
    ("omission=3", "omission must be in [0, 1]"),
    ("bogus=1", "unknown option 'bogus'"),
    ("slip=true", "slip must be a number"),
])
def test_agent_option_mistakes_are_one_line_exit_2(option: str, says: str, tiny_dataset, tmp_path: Path,
                                                   capsys) -> None:
    rc, err = _run(["run", "--data", str(tiny_dataset.root), "--agent", "noisy-pointer", "--agent-option",
                    option, "--out", str(tmp_path), "--no-progress"], capsys)
    assert rc == 2, err
    assert says in err and "internal error" not in err
    assert len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.jsonl"))  # refused before any episode


def test_a_plugin_constructor_that_refuses_its_options_is_exit_2(tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "picky_policy.py").write_text(
        "class Picky:\n"
        "    def __init__(self, level=1):\n"
        "        if level not in (1, 2):\n"
        "            raise ValueError(f'level must be 1 or 2, got {level}')\n"
        "    def reset(self, obs, task): pass\n"
        "    def act(self, obs): return '{\"tool\":\"answer\",\"count\":1}'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    rc, err = _run(["run", "--data", "dotarrays:common", "--agent", "picky_policy:Picky", "--agent-option",
                    "level=7", "--out", str(tmp_path / "runs"), "--no-progress"], capsys)
    assert rc == 2 and "level must be 1 or 2, got 7" in err


def test_several_agent_options_after_one_flag(tiny_dataset, tmp_path: Path, capsys) -> None:
    # README: --agent-option sigma=3 omission=0.1 duplicate=0.05 phantom=0.05 slip=0.1
    out = tmp_path / "runs"
    rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "noisy-pointer", "--agent-option", "sigma=3",
               "omission=0.1", "duplicate=0.05", "phantom=0.05", "slip=0.1", "--out", str(out), "--no-progress"])
    assert rc == 0
    from countgym.logs import read_records

    (rec, *_) = read_records(sorted(out.glob("*.jsonl")))
    assert rec.arm.options["omission"] == 0.1 and rec.arm.options["slip"] == 0.1


def test_readme_plugin_snippet_defines_every_class_it_runs() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme[readme.index("# my_policies.py"):]
    block = block[: block.index("```")]
    defined = set(re.findall(r"^class (\w+)", block, flags=re.M))
    used = set(re.findall(r"my_policies:(\w+)", readme))
    assert used and used <= defined


def test_readme_says_where_the_commands_are() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "`.venv/bin`" in readme and "source .venv/bin/activate" in readme


def test_countvideo_env_defaults_to_the_small_set() -> None:
    import gymnasium as gym

    import countgym  # noqa: F401

    spec = gym.spec("countgym/CountVideo-v0")
    assert spec.kwargs["dataset"] == "countvideo:k1"
    from countgym.scenes.video.dataset import _build_tip

    assert 'gym.make("countgym/CountVideo-v0", dataset="countvideo")' in _build_tip(1)
    assert "--data countvideo:k1" in _build_tip(None)


# --- countgym cache ----------------------------------------------------------------------------------
def _fake_cache(root: Path) -> None:
    done = root / "dotarrays-v2"
    (done / "images").mkdir(parents=True)
    (done / "manifest.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n')
    (done / "images" / "a.png").write_bytes(b"x" * 1000)
    (root / ".countvideo-v1-all-1920x1080.k3j2.tmp").mkdir()
    (root / ".countvideo-v1-all-1920x1080.k3j2.tmp" / "v.jpg").write_bytes(b"y" * 5000)
    (root / ".countvideo-v1-all-1920x1080.lock").write_text("")
    (root / "countvideo-v1-k2-960x540" / "frames").mkdir(parents=True)
    (root / "derived" / "transforms" / "dotarrays-ablation-mirror-0123").mkdir(parents=True)
    (root / "derived" / "transforms" / "dotarrays-ablation-mirror-0123" / "manifest.jsonl").write_text('{"id": "a"}\n')
    (root / ".countvideo-v3-all-1920x1080.partial" / "frames" / "v1").mkdir(parents=True)
    (root / "derived" / "fitted").mkdir(parents=True)
    (root / "derived" / "fitted" / ("a" * 40 + ".png")).write_bytes(b"z" * 300)


def test_cache_lists_sizes_and_states(tmp_path: Path, monkeypatch, capsys) -> None:
    root = tmp_path / "cache"
    _fake_cache(root)
    monkeypatch.setenv("COUNTGYM_CACHE", str(root))
    monkeypatch.delenv("COUNTGYM_DERIVED_CACHE", raising=False)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  ")}
    assert rows["dotarrays-v2"][1] == "complete" and "2 items" in " ".join(rows["dotarrays-v2"])
    assert rows[".countvideo-v1-all-1920x1080.k3j2.tmp"][1] == "stale"
    assert rows[".countvideo-v1-all-1920x1080.lock"][1] == "stale"
    assert rows["countvideo-v1-k2-960x540"][1] == "partial"
    assert rows["dotarrays-ablation-mirror-0123"][1] == "complete" and "derived" not in rows
    assert rows[".countvideo-v3-all-1920x1080.partial"][1] == "partial"  # a resumable video build
    assert rows["fitted"][1] == "complete" and "1 items" in " ".join(rows["fitted"])
    assert "countgym cache clean --partial" in out


def test_cache_clean_removes_stale_then_partial_never_a_build_in_progress(tmp_path: Path, monkeypatch,
                                                                          capsys) -> None:
    import fcntl

    root = tmp_path / "cache"
    _fake_cache(root)
    monkeypatch.setenv("COUNTGYM_CACHE", str(root))
    monkeypatch.delenv("COUNTGYM_DERIVED_CACHE", raising=False)
    # A live build: its lock is held, so its temp folder must survive every clean.
    (root / ".lattice-v1.zz.tmp").mkdir()
    with open(root / ".lattice-v1.lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert main(["cache", "clean", "--dry-run"]) == 0
        assert (root / ".countvideo-v1-all-1920x1080.k3j2.tmp").exists()
        assert main(["cache", "clean"]) == 0
        assert not (root / ".countvideo-v1-all-1920x1080.k3j2.tmp").exists()
        assert not (root / ".countvideo-v1-all-1920x1080.lock").exists()
        assert (root / "countvideo-v1-k2-960x540").exists() and (root / "dotarrays-v2").exists()
        assert (root / ".countvideo-v3-all-1920x1080.partial").exists()
        assert main(["cache", "clean", "--partial"]) == 0
        assert not (root / "countvideo-v1-k2-960x540").exists()
        assert not (root / ".countvideo-v3-all-1920x1080.partial").exists()
        assert main(["cache", "clean", "--all"]) == 0
        assert not (root / "dotarrays-v2").exists()
        assert (root / ".lattice-v1.zz.tmp").exists() and (root / ".lattice-v1.lock").exists()
    out = capsys.readouterr()
    assert "kept" in out.err and "a build is in progress" in out.err


def test_cache_clean_of_an_unknown_name_is_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COUNTGYM_CACHE", str(tmp_path))
    assert main(["cache", "clean", "nothing-here"]) == 2
    assert "no entry 'nothing-here'" in capsys.readouterr().err


# --- countgym replay -----------------------------------------------------------------------------------
@pytest.fixture()
def oracle_run(tiny_dataset, tmp_path: Path) -> Path:
    out = tmp_path / "runs"
    assert main(["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--repeats", "2", "--out", str(out),
                 "--no-progress"]) == 0
    return out


def test_replay_lists_ids_and_takes_a_stimulus_id(oracle_run: Path, tmp_path: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["replay", str(oracle_run), "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split("\t") == ["episode_id", "stimulus_id", "truth", "answer", "end"]
    ids = [line.split("\t") for line in lines[1:]]
    assert len(ids) == 6 and all(row[0].endswith(("/r0", "/r1")) for row in ids)
    sid = ids[0][1]
    # Two repeats: the stimulus id alone is ambiguous and the error names both episodes.
    assert main(["replay", str(oracle_run), "--episode", sid, "--out", str(tmp_path / "a.png")]) == 2
    err = capsys.readouterr().err
    assert "2 episodes match" in err and f"{sid}/r0" in err and f"{sid}/r1" in err
    assert main(["replay", str(oracle_run), "--episode", f"{sid}/r1", "--out", str(tmp_path / "b.png")]) == 0
    assert (tmp_path / "b.png").stat().st_size > 0


def test_replay_with_a_single_repeat_takes_the_bare_stimulus_id(tiny_dataset, tmp_path: Path, capsys) -> None:
    out = tmp_path / "runs"
    assert main(["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    (log,) = out.glob("*.jsonl")
    assert main(["replay", str(log), "--episode", "two", "--out", str(tmp_path / "c.png")]) == 0
    assert main(["replay", str(log), "--episode", "nope", "--out", str(tmp_path / "d.png")]) == 2
    assert "--list" in capsys.readouterr().err
    assert main(["replay", str(log)]) == 2


# --- model-free baselines on every task ------------------------------------------------------------------
def _records(out: Path):
    from countgym.logs import read_records

    return read_records([out])


def test_oracle_answers_the_true_count_on_video_and_countercount(tiny_countvideo: Path, tiny_countercount: Path,
                                                                 tmp_path: Path, recwarn) -> None:
    out = tmp_path / "runs"
    for data in (tiny_countvideo, tiny_countercount):
        assert main(["run", "--data", str(data), "--agent", "oracle", "--out", str(out), "--no-progress"]) == 0
    recs = _records(out)
    assert len(recs) == 2 + 4
    assert all(r.end == "answer" and r.answer == r.truth.n for r in recs)
    # No "cannot point there" notice: the single-step tasks have nothing to point at.
    assert not [w for w in recwarn if "cannot point" in str(w.message)]


def test_noisy_counter_bias_and_spread_come_back(tiny_countvideo: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    assert main(["run", "--data", str(tiny_countvideo), "--agent", "noisy-counter", "--agent-option", "sigma=0",
                 "bias=-0.5", "--repeats", "3", "--out", str(out), "--no-progress"]) == 0
    recs = _records(out)
    assert len(recs) == 6
    # sigma 0: exactly half the true count, rounded, every time.
    assert all(r.answer == max(0, int(round(r.truth.n * 0.5))) for r in recs)


def test_noisy_counter_is_seeded_per_episode_and_has_the_stated_spread() -> None:
    from countgym.agents.base import Task
    from countgym.agents.scripted import NoisyCounter

    task = Task(obj="dots", obj_sing="dot", image_size=(10, 10), tools=(), budget=0, options={})
    answers = []
    for seed in range(400):
        p = NoisyCounter(sigma=0.1, bias=0.2)
        p.give_truth(None, 50)
        p.seed(seed)
        p.reset({}, task)
        answers.append(p.act({}).action.count)
    arr = np.asarray(answers, dtype=float)
    assert abs(arr.mean() - 60.0) < 1.0 and 4.0 < arr.std() < 6.0  # N(60, 5), rounded
    again = NoisyCounter(sigma=0.1, bias=0.2)
    again.give_truth(None, 50)
    again.seed(7)
    again.reset({}, task)
    assert again.act({}).action.count == answers[7]


@pytest.mark.parametrize(("option", "says"), [("sigma=-1", "sigma must be >= 0"), ("bias=-1", "bias must be > -1")])
def test_noisy_counter_options_are_checked(option: str, says: str, tiny_countvideo: Path, tmp_path: Path,
                                           capsys) -> None:
    assert main(["run", "--data", str(tiny_countvideo), "--agent", "noisy-counter", "--agent-option", option,
                 "--out", str(tmp_path), "--no-progress"]) == 2
    assert says in capsys.readouterr().err
