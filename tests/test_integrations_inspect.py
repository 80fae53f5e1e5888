"""The Inspect AI adapter and the exports, with the real libraries: an Inspect eval driving the
countgym tool loop (scripted mock model), the audit as its scorer, `countgym export` to .eval
(read back by Inspect's own reader), Parquet and a Hugging Face datasets folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai")
pytest.importorskip("pyarrow")
datasets = pytest.importorskip("datasets")

from inspect_ai import eval as inspect_eval  # noqa: E402
from inspect_ai.log import read_eval_log  # noqa: E402
from inspect_ai.model import ModelOutput, ModelUsage, get_model  # noqa: E402

from countgym.analysis.audit import audit_episodes  # noqa: E402
from countgym.cli import main  # noqa: E402
from countgym.errors import UserError  # noqa: E402
from countgym.integrations import export  # noqa: E402
from countgym.integrations.inspect import countgym_task, episode_records  # noqa: E402
from countgym.logs import find_logs, read_records  # noqa: E402


def scripted(*replies: str):
    """Inspect's mock model answering the given replies in order (usage given: no tokenizer)."""
    outs = []
    for r in replies:
        o = ModelOutput.from_content("mockllm/model", r)
        o.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
        outs.append(o)
    return get_model("mockllm/model", custom_outputs=outs)


def run_eval(task, model, tmp_path: Path):
    [log] = inspect_eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    return log


# --- the task, solver and scorer -------------------------------------------------------------------
def test_inspect_task_runs_the_tool_loop_and_scores_with_the_audit(tiny_dataset, tmp_path) -> None:
    task = countgym_task("countgym/DotArrays-v0", arm="tag", dataset=tiny_dataset, stimulus_ids=["two"])
    model = scripted(
        'Tagging both.\n{"tool":"tag","points":[[65,78],[521,521],[530,525]]}',  # the third is a duplicate
        '{"tool":"answer","count":2}',
    )
    log = run_eval(task, model, tmp_path)
    [sample] = log.samples
    score = sample.scores["countgym_audit"].value
    assert score == {"n_true": 2.0, "correct": 1.0, "abs_error": 0.0, "answered": 1.0, "audited": 1.0,
                     "on_target": 2.0, "duplicate": 1.0, "phantom": 0.0, "omission": 0.0,
                     "cardinality_consistent": 0.0, "error": 0.0}
    [rec] = episode_records(log)
    assert rec.answer == 2 and len(rec.tags) == 3 and rec.model == "mockllm/model" and rec.end == "answer"
    # The model saw the image each turn and the verification prompt after the tag call.
    users = [m for m in sample.messages if m.role == "user"]
    assert len(users) == 2 and all(any(c.type == "image" for c in m.content) for m in users)
    assert sample.messages[0].role == "system" and "tag" in sample.messages[0].text
    [summary] = log.results.scores
    metrics = {k: m.value for k, m in summary.metrics.items()}
    # The audit's names and units: rates per 100 ground-truth objects.
    assert metrics["em"] == 1.0 and metrics["duplicate_per100"] == 50.0 and metrics["on_target_per100"] == 100.0
    # The written log reads back with Inspect's own reader.
    again = read_eval_log(log.location)
    assert again.samples[0].scores["countgym_audit"].value["on_target"] == 2.0


def test_untrusted_replies_end_the_episode_without_crashing(tiny_dataset, tmp_path) -> None:
    task = countgym_task("countgym/DotArrays-v0", arm="tag", dataset=tiny_dataset, stimulus_ids=["four"])
    log = run_eval(task, scripted("<script>", "{not json", "[[1e999, NaN]]", "", "{}"), tmp_path)
    [rec] = episode_records(log)
    assert rec.end == "invalid" and rec.answer is None
    assert log.samples[0].scores["countgym_audit"].value["correct"] == 0.0


def test_single_call_arm_and_mistakes(tiny_dataset, tmp_path) -> None:
    task = countgym_task("countgym/DotArrays-v0", arm="direct", dataset=tiny_dataset, limit=1)
    log = run_eval(task, scripted("ANSWER: 4"), tmp_path)
    assert len(log.samples) == 1 and log.samples[0].output.completion == "ANSWER: 4"
    with pytest.raises(UserError, match="harness-driven"):
        countgym_task("countgym/DotArrays-v0", arm="tiles", dataset=tiny_dataset)
    with pytest.raises(UserError, match="unknown environment"):
        countgym_task("countgym/Nope-v0", dataset=tiny_dataset)
    # Unknown arms, policies and arms of another task are refused as `countgym run` refuses them.
    with pytest.raises(UserError, match="unknown arm 'bogus': use one of .*tag"):
        countgym_task("countgym/DotArrays-v0", arm="bogus", dataset=tiny_dataset)
    with pytest.raises(UserError, match="not a model arm"):
        countgym_task("countgym/DotArrays-v0", arm="blob-counter", dataset=tiny_dataset)
    with pytest.raises(UserError, match="not a model arm"):
        countgym_task("countgym/DotArrays-v0", arm="tests.plugins.mypol:MyPolicy", dataset=tiny_dataset)
    with pytest.raises(UserError, match="does not run on countgym/DotArrays-v0"):
        countgym_task("countgym/DotArrays-v0", arm="cf-mcq", dataset=tiny_dataset)


ENTRY_POINT_SCRIPT = """
import sys
from inspect_ai import eval as inspect_eval
from inspect_ai.model import ModelOutput, ModelUsage, get_model
out = ModelOutput.from_content("mockllm/model", "ANSWER: 4")
out.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
[log] = inspect_eval("countgym/countgym", model=get_model("mockllm/model", custom_outputs=[out]),
                     task_args={"env": "countgym/DotArrays-v0", "arm": "direct", "dataset": sys.argv[1], "limit": 1},
                     log_dir=sys.argv[2], display="none")
print(log.status, log.samples[0].scores["countgym_audit"].value["correct"])
"""


def test_inspect_finds_the_task_through_its_entry_point(tiny_dataset, tmp_path) -> None:
    import subprocess
    import sys
    from importlib.metadata import entry_points

    if not [e for e in entry_points(group="inspect_ai") if e.value == "countgym.integrations.inspect"]:
        pytest.skip("countgym is not installed with its entry points (pip install -e .)")
    # Run as a user would, outside the source tree (Inspect namespaces tasks of installed packages).
    script = tmp_path / "use.py"
    script.write_text(ENTRY_POINT_SCRIPT)
    proc = subprocess.run([sys.executable, str(script), str(tiny_dataset.root), str(tmp_path / "logs")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.stdout.split()[-2:] == ["success", "1.0"], proc.stderr[-2000:]


# --- exports -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tiny_dataset, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    for agent in ("noisy-pointer", "blob-counter"):
        assert main(["run", "--data", str(tiny_dataset.root), "--agent", agent, "--out", str(out)]) == 0
    return out


def test_export_inspect_writes_eval_logs_inspect_reads(run_dir, tmp_path, capsys) -> None:
    from countgym.analysis.summary import summarize

    out = tmp_path / "inspect"
    assert main(["export", "--format", "inspect", str(run_dir), "--out", str(out)]) == 0
    files = sorted(out.glob("*.eval"))
    assert len(files) == 2 and f"wrote {files[0]}" in capsys.readouterr().out
    records = read_records(find_logs([run_dir]))
    rows = audit_episodes(records, label_arms=False).set_index("episode_id")
    summary = summarize(audit_episodes(records, label_arms=False), n_resamples=10).set_index("model")
    seen = 0
    for f in files:
        log = read_eval_log(str(f))
        assert log.status == "success" and log.eval.model in ("noisy-pointer", "blob-counter")
        assert log.eval.task == f"countgym/DotArrays-v0/{log.eval.model}"
        for s in log.samples:
            row = rows.loc[s.metadata["episode_id"]]
            assert s.id.startswith("s") and row["stimulus_id"] not in s.id and s.epoch == 1
            v = s.scores["countgym_audit"].value
            assert v["on_target"] == row["on_target"] and v["phantom"] == row["phantom"]
            assert v["correct"] == float(row["correct"]) and s.target == str(row["n_true"])
            # The first turn is rebuilt from the logged options: system prompt, first message.
            assert [m.role for m in s.messages][:3] == ["system", "user", "assistant"]
            assert s.messages[1].text == "Count the dots in this image." and isinstance(s.messages[1].content, str)
            seen += 1
        # One score entry, the audit's own metrics (names and units) for this cell.
        [score] = log.results.scores
        ref = summary.loc[log.eval.model]
        for k in ("em", "mae", "on_target_per100", "duplicate_per100", "phantom_per100", "omission_per100",
                  "cardinality_consistency"):
            assert score.metrics[k].value == pytest.approx(ref[k], nan_ok=True), k
    assert seen == len(records) == 6


def test_export_inspect_images_embeds_every_observation(run_dir, tmp_path) -> None:
    from countgym.envs.replay import replay_observation

    out = tmp_path / "with-images"
    assert main(["export", "--format", "inspect", "--images", str(run_dir), "--out", str(out)]) == 0
    assert main(["export", "--format", "parquet", "--images", str(run_dir)]) == 2
    log = read_eval_log(str(sorted(out.glob("*.eval"))[0]), resolve_attachments=True)
    s = log.samples[0]
    users = [m for m in s.messages if m.role == "user"]
    assert all(m.content[0].type == "image" for m in users)
    [rec] = [r for r in episode_records(log) if r.episode_id == s.metadata["episode_id"]]
    assert len(users) == len([st for st in rec.steps if st.message]) + 1
    # The last image is the final working image, tags drawn, as `countgym replay` renders it.
    import base64
    import io

    import numpy as np
    from PIL import Image

    from countgym.scenes import resolve_dataset

    last = users[-1].content[0].image.split(",", 1)[1]
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(last))))
    k = max(i + 1 for i, st in enumerate(rec.steps) if st.message)
    assert (pixels == replay_observation(rec, resolve_dataset(rec.dataset), k)).all()


def test_inspect_view_serves_the_exported_logs(run_dir, tmp_path) -> None:
    """`inspect view` (a web UI) lists the exported logs and serves each one through its API."""
    import shutil
    import socket
    import subprocess
    import time
    import urllib.parse
    import urllib.request

    inspect_cli = shutil.which("inspect", path=str(Path(__import__("sys").executable).parent))
    if inspect_cli is None:
        pytest.skip("the inspect command is not installed next to this Python")
    out = tmp_path / "inspect"
    assert main(["export", "--format", "inspect", str(run_dir), "--out", str(out)]) == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([inspect_cli, "view", "--log-dir", str(out), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        listing = None
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/logs", timeout=2) as r:
                    listing = json.load(r)
                break
            except OSError:
                time.sleep(0.25)
        assert listing is not None, "inspect view did not start"
        names = [f["name"] for f in listing["files"]]
        assert len(names) == 2
        for name in names:
            url = f"http://127.0.0.1:{port}/api/logs/{urllib.parse.quote(name, safe='')}"
            with urllib.request.urlopen(url, timeout=10) as r:
                log = json.load(r)
            assert log["status"] == "success" and len(log["samples"]) == 3
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_export_parquet_is_one_typed_table_with_a_stable_schema(run_dir, tmp_path) -> None:
    import pyarrow.parquet as pq

    assert main(["export", "--format", "parquet", str(run_dir), "--out", str(tmp_path / "all.parquet")]) == 0
    table = pq.read_table(tmp_path / "all.parquet")
    assert table.schema == export.episode_schema() and table.num_rows == 6
    # One arm alone (another cell, other options) gives the very same schema.
    one = next(p for p in find_logs([run_dir]) if "blob-counter" in p.name)
    assert main(["export", "--format", "parquet", str(one), "--out", str(tmp_path / "one.parquet")]) == 0
    assert pq.read_schema(tmp_path / "one.parquet") == table.schema
    rows = table.to_pylist()
    four = next(r for r in rows if r["stimulus_id"] == "four" and r["arm"] == "blob-counter")
    assert four["n_true"] == 4 and four["answer"] == 4 and four["correct"] is True and len(four["tags"]) == 4
    assert json.loads(four["env_options"])["tools"]


def test_export_hf_dataset_loads_with_counts_and_points(tiny_dataset, tmp_path) -> None:
    out = tmp_path / "hf"
    assert main(["export", "--format", "hf", str(tiny_dataset.root), "--out", str(out)]) == 0
    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf-cache"))
    by_id = {r["id"]: r for r in ds}
    assert set(by_id) == {"four", "two", "row"}
    assert by_id["two"]["n"] == 2 and by_id["two"]["points"] == [[50.0, 60.0], [400.0, 400.0]]
    assert by_id["row"]["image"].size == (768, 768)


def test_export_mistakes_exit_2_with_one_line(tmp_path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["export", "--format", "parquet", str(tmp_path / "empty")]) == 2
    assert main(["export", "--format", "hf", str(tmp_path / "empty")]) == 2
    assert main(["export", "--format", "hf", str(tmp_path / "empty"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("countgym: error: ") for line in err)


# --- the single-step tasks -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def video_dataset(tmp_path_factory):
    from countgym.scenes.video import make_countvideo
    from countgym.stimulus import Dataset

    out = make_countvideo(tmp_path_factory.mktemp("cv") / "cv", limit=2, size=(48, 27), progress=False, workers=1)
    return Dataset(out)


def test_inspect_task_on_countvideo_sends_the_frames(video_dataset, tmp_path) -> None:
    sid = video_dataset.ids()[0]
    n = video_dataset[sid].n
    task = countgym_task("countgym/CountVideo-v0", dataset=video_dataset, stimulus_ids=[sid])
    log = run_eval(task, scripted(f"There are {n}."), tmp_path)
    [sample] = log.samples
    [user] = [m for m in sample.messages if m.role == "user"]
    # Every sampled frame is sent (the tool loop's two-image context policy does not apply).
    assert sum(c.type == "image" for c in user.content) == len(video_dataset[sid].frames) > 2
    assert sample.scores["countgym_audit"].value["correct"] == 1.0
    assert episode_records(log)[0].arm.name == "video-p1"


def test_export_hf_video_dataset_has_frames(video_dataset, tmp_path) -> None:
    out = export.export_hf_dataset(video_dataset, tmp_path / "cv-hf")
    ds = datasets.load_dataset("parquet", data_files=str(out / "data" / "*.parquet"), split="train",
                               cache_dir=str(tmp_path / "cache"))
    row = ds[0]
    assert row["n"] == video_dataset[row["id"]].n and len(row["frames"]) == len(video_dataset[row["id"]].frames)


def test_missing_extra_names_the_extra(run_dir, tmp_path, monkeypatch, capsys) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)  # as if inspect-ai were not installed
    assert main(["export", "--format", "inspect", str(run_dir), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    from countgym.errors import install_command

    assert err == f"countgym: error: inspect-ai is not installed; install the 'inspect' extra: {install_command('inspect')}"


# --- as Inspect's users run it ---------------------------------------------------------------------
def test_sample_input_carries_the_stimulus_and_ids_carry_no_truth(tiny_dataset) -> None:
    task = countgym_task("countgym/DotArrays-v0", arm="tag", dataset=tiny_dataset)
    samples = list(task.dataset)
    assert len(samples) == 3 and len({s.id for s in samples}) == 3
    for s in samples:
        assert not any(sid in s.id for sid in tiny_dataset.ids()) and not s.metadata
        system, user = s.input
        assert system.role == "system" and "tag" in system.text
        [image, text] = user.content
        assert image.type == "image" and Path(image.image).is_file() and text.text == "Count the dots in this image."
    # Stable: the same stimulus has the same id in another build of the task.
    again = countgym_task("countgym/DotArrays-v0", arm="direct", dataset=tiny_dataset)
    assert sorted(s.id for s in again.dataset) == sorted(s.id for s in samples)


def test_any_inspect_solver_can_answer_and_is_scored_by_the_audit(tiny_dataset, tmp_path) -> None:
    """A plain `generate()` solver sees the image and the question (Sample.input); the scorer
    reads its final reply with countgym's extraction."""
    from inspect_ai import Task
    from inspect_ai.solver import generate

    base = countgym_task("countgym/DotArrays-v0", arm="direct", dataset=tiny_dataset)
    task = Task(dataset=base.dataset, solver=generate(), scorer=base.scorer, name=base.name)
    [log] = inspect_eval(task, model=scripted("ANSWER: 4", "ANSWER: 4", "ANSWER: 4"),
                         log_dir=str(tmp_path / "logs"), display="none", max_samples=1)
    assert log.status == "success", log.error
    by_truth = {s.target: s.scores["countgym_audit"].value for s in log.samples}
    assert by_truth["4"]["correct"] == 1.0 and by_truth["2"]["correct"] == 0.0 and by_truth["2"]["abs_error"] == 2.0
    first = log.samples[0].input
    assert any(c.type == "image" for c in first[-1].content)
    assert log.results.scores[0].metrics["em"].value == pytest.approx(1 / 3)


def test_native_and_exported_logs_agree_on_task_ids_epochs_and_metrics(tiny_dataset, tmp_path) -> None:
    from countgym.logs import LogWriter

    task = countgym_task("countgym/DotArrays-v0", arm="direct", dataset=tiny_dataset)
    [native] = inspect_eval(task, model=scripted(*["ANSWER: 4"] * 6), epochs=2,
                            log_dir=str(tmp_path / "logs"), display="none", max_samples=1)
    assert native.status == "success", native.error
    run = tmp_path / "run"
    run.mkdir()
    w = LogWriter(run / "episodes.jsonl")
    for rec in episode_records(native):
        w.append(rec)
    w.close()
    [path] = export.export_inspect([run], tmp_path / "exported")
    exported = read_eval_log(str(path))
    assert exported.eval.task == native.eval.task == "countgym/DotArrays-v0/direct"
    key = lambda log: sorted((s.id, s.epoch, s.target) for s in log.samples)  # noqa: E731
    assert key(exported) == key(native) and {s.epoch for s in native.samples} == {1, 2}
    [a], [b] = native.results.scores, exported.results.scores
    assert a.name == b.name == "countgym_audit"
    for k in ("em", "mae", "on_target_per100", "errors"):
        assert a.metrics[k].value == pytest.approx(b.metrics[k].value, nan_ok=True), k


def test_test_server_reads_the_developer_role_as_the_system_prompt() -> None:
    from countgym.envs import templates as T
    from countgym.testing.server import prompt_kind

    text = T.SYSTEM.format(**{k: "dots" if k.startswith("obj") else "6" for k in _fields(T.SYSTEM)})
    for role in ("system", "developer"):
        assert prompt_kind([{"role": role, "content": text}, {"role": "user", "content": "x"}]) == "tool"


def _fields(template: str) -> set[str]:
    import string

    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


INSPECT_CLI_TIMEOUT = 300


def test_inspect_cli_with_openai_provider_against_a_chat_only_server(tiny_dataset, tmp_path) -> None:
    """`inspect eval ... --model openai/<name> --model-base-url URL`, as Inspect's users run it: the
    test server has no /responses and reads the `developer` role; scores come out right."""
    import shutil
    import subprocess
    import sys
    from importlib.metadata import entry_points

    from countgym.testing.server import TestServer

    inspect_cli = shutil.which("inspect", path=str(Path(sys.executable).parent))
    if inspect_cli is None or not [e for e in entry_points(group="inspect_ai")
                                   if e.value == "countgym.integrations.inspect"]:
        pytest.skip("the inspect command or countgym's entry point is not installed")
    with TestServer() as srv:
        proc = subprocess.run(
            [inspect_cli, "eval", "countgym/countgym", "-T", "env=countgym/DotArrays-v0", "-T", "arm=tag",
             "-T", f"dataset={tiny_dataset.root}", "--model", "openai/blob", "--model-base-url", srv.base_url,
             "--log-dir", str(tmp_path / "logs"), "--display", "none"],
            cwd=tmp_path, capture_output=True, text=True, timeout=INSPECT_CLI_TIMEOUT,
            env={**__import__("os").environ, "OPENAI_API_KEY": "none"},
        )
        roles = {m["role"] for m in srv.last_request["messages"]}
    assert proc.returncode == 0, proc.stderr[-2000:]
    [log_file] = (tmp_path / "logs").glob("*.eval")
    log = read_eval_log(str(log_file))
    assert log.status == "success" and log.eval.task == "countgym/DotArrays-v0/tag"
    assert "developer" in roles  # what Inspect sends for this model name
    assert log.results.scores[0].metrics["em"].value == 1.0
    assert all(r.end == "answer" for r in episode_records(log))
