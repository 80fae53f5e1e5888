"""What the model was asked: the first observation's text (system prompt, tools, question and
options) is rebuilt from the log, identical to what the policy was shown, on every task; the
viewer and `countgym replay` show it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from countgym.cli import main
from countgym.envs.replay import first_observation_text
from countgym.logs import read_records
from countgym.runner import CellSpec, run_cell
from countgym.stimulus import Dataset


def _run(data: Path | str, agent: str, env_options: dict[str, Any], out: Path) -> list[tuple[Any, dict[str, str]]]:
    """Run a cell with a policy that keeps the text of the first observation it was shown."""
    seen: list[dict[str, str]] = []

    class Recorder:
        def reset(self, first_observation: dict[str, Any], task: Any) -> None:
            seen.append({"system": first_observation.get("system", ""), "user": first_observation["text"]})

        def act(self, observation: dict[str, Any]) -> str:
            return '{"tool":"answer","count":3}'

    spec = CellSpec(dataset=str(data), agent=agent, env_options=env_options)
    res = run_cell(spec, out, policy_factory=Recorder, concurrency=1, progress=False)
    recs = read_records([res.log])
    assert len(recs) == len(seen) > 0
    return list(zip(recs, seen, strict=True))


IMAGE_OPTIONS = [
    {"prompt": "direct", "tools": ["answer"], "budget": 1},
    {"prompt": "cot", "tools": ["answer"], "budget": 1},
    {"prompt": "list", "tools": ["tag", "answer"], "budget": 2},
    {"tools": ["tag", "crop", "answer"], "budget": 4},
    {"tools": ["tag", "answer"], "budget": 80, "one_point_per_call": True, "order": "reading"},
    {"tools": ["tag", "answer"], "budget": 6, "protocol": "native"},
]


@pytest.mark.parametrize("options", IMAGE_OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()))
def test_image_first_text_is_what_the_policy_saw(tiny_dataset: Dataset, tmp_path: Path, options: dict[str, Any]) -> None:
    for rec, seen in _run(tiny_dataset.root, "scripted", options, tmp_path):
        text = first_observation_text(rec, tiny_dataset)
        assert text["system"] == seen["system"]
        assert text["user"] == seen["user"]
        if options.get("prompt") in ("direct", "cot", "list"):
            assert text["system"] == ""
        else:
            assert f"at most {options['budget']} tool calls" in text["system"] or options.get("protocol") == "native"
        if options.get("protocol") == "native":
            names = [t["function"]["name"] for t in json.loads(text["tools"])]
            assert names == ["tag", "answer"]
        else:
            assert "tools" not in text


@pytest.mark.parametrize(("agent", "options"), [("cf-mcq", {}), ("cf-oe", {}), ("cf-mcq", {"cue": True, "generic": True})])
def test_countercount_first_text_has_the_question_and_options(
    tiny_countercount: Path, tmp_path: Path, agent: str, options: dict[str, Any]
) -> None:
    ds = Dataset(tiny_countercount)
    for rec, seen in _run(tiny_countercount, agent, options, tmp_path):
        text = first_observation_text(rec, ds)
        assert text["user"] == seen["user"] and text["user"]
        assert ("Choose one of the following options" in text["user"]) == (agent == "cf-mcq")


def test_video_first_text_is_the_prompt(tiny_countvideo: Path, tmp_path: Path) -> None:
    ds = Dataset(tiny_countvideo)
    for rec, seen in _run(tiny_countvideo, "video-p2", {}, tmp_path):
        text = first_observation_text(rec, ds)
        assert text["user"] == seen["user"]
        stim = ds[rec.stimulus_id]
        assert stim.meta["shape"] in text["user"]


def test_replay_prints_the_transcript(tiny_dataset: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pairs = _run(tiny_dataset.root, "scripted", {"tools": ["tag", "answer"], "budget": 5}, tmp_path)
    rec, seen = pairs[0]
    log = next(tmp_path.glob("*.jsonl"))
    assert main(["replay", str(log), "--episode", rec.episode_id]) == 0
    out = capsys.readouterr().out
    assert "--- system prompt ---" in out and seen["system"].splitlines()[0] in out
    assert "at most 5 tool calls" in out
    assert "--- user (first observation) ---\n" + seen["user"] in out
    assert '--- step 1: model ---\n{"tool":"answer","count":3}' in out
    # With --out the image is written; --text prints the transcript too.
    png = tmp_path / "o.png"
    assert main(["replay", str(log), "--episode", rec.episode_id, "--out", str(png)]) == 0
    assert png.exists() and "--- system prompt ---" not in capsys.readouterr().out
    assert main(["replay", str(log), "--episode", rec.episode_id, "--out", str(png), "--text"]) == 0
    assert "--- system prompt ---" in capsys.readouterr().out


def test_replay_transcript_strips_terminal_controls(tiny_dataset: Dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Hostile:
        def reset(self, first_observation: dict[str, Any], task: Any) -> None:
            pass

        def act(self, observation: dict[str, Any]) -> str:
            return '\x1b]0;pwned\x07\x1b[2Jsure\r\n{"tool":"answer","count":3}'

    spec = CellSpec(dataset=str(tiny_dataset.root), agent="scripted", env_options={}, limit=1)
    res = run_cell(spec, tmp_path, policy_factory=Hostile, concurrency=1, progress=False)
    (rec,) = read_records([res.log])
    assert main(["replay", str(res.log), "--episode", rec.episode_id]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "pwned" not in out and "sure" in out


def test_viewer_entries_carry_the_first_text(tiny_countercount: Path, tmp_path: Path) -> None:
    pairs = _run(tiny_countercount, "cf-mcq", {}, tmp_path / "run")
    audit = tmp_path / "audit"
    assert main(["audit", str(tmp_path / "run"), "--out", str(audit)]) == 0
    html = (audit / "report.html").read_text()
    blob = html.split('id="cg-viewer-data"', 1)[1].split(">", 1)[1].split("</script>", 1)[0]
    eps = json.loads(blob)["episodes"]
    assert eps and all(e["prompt"] and "Choose one of the following options" in e["prompt"]["user"] for e in eps)
    assert "what the model was asked" in html
    assert {e["prompt"]["user"] for e in eps} <= {seen["user"] for _, seen in pairs}
