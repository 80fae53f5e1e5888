"""A newcomer's first hour, second pass: a missing API key is refused before the first episode,
kept error episodes are named on resume, and the messages a first run meets say what to do."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest

from countgym.cli import main
from countgym.errors import UserError

KEY_VARS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_API_BASE", "GROQ_API_KEY", "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_IDENTITY_TOKEN", "ANTHROPIC_IDENTITY_TOKEN_FILE",
            "ANTHROPIC_FEDERATION_RULE_ID", "GEMINI_API_KEY", "GOOGLE_API_KEY")


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in KEY_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


# --- a hosted model without a key: refused before anything runs ---------------------------------


@pytest.mark.parametrize(("model", "var"), [
    ("openai/gpt-4o-mini", "OPENAI_API_KEY"),
    ("groq/llama-3.3-70b-versatile", "GROQ_API_KEY"),
    ("anthropic/claude-sonnet-4-5", "ANTHROPIC_API_KEY"),
    ("gemini/gemini-2.5-flash", "GEMINI_API_KEY"),
])
def test_a_hosted_model_without_a_key_is_named(no_keys, model: str, var: str) -> None:
    from countgym.agents.backends.providers import missing_key

    msg = missing_key(model)
    assert msg is not None and var in msg and repr(model) in msg and "\n" not in msg
    no_keys.setenv(var, "sk-test")
    assert missing_key(model) is None


@pytest.mark.parametrize(("model", "options", "env"), [
    ("openai/m", {"api_base": "http://127.0.0.1:1/v1"}, {}),  # a local OpenAI-compatible server
    ("openai/m", {"api_key": "sk-test"}, {}),
    ("openai/m", {"extra_params": {"api_base": "http://127.0.0.1:1/v1"}}, {}),
    ("openai/m", {"extra_params": {"extra_headers": {"api-key": "x"}}}, {}),
    ("openai/m", {}, {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}),
    ("openai/m", {}, {"OPENAI_API_BASE": "http://127.0.0.1:1/v1"}),
    ("hosted_vllm/m", {}, {}),  # self-hosted: no key needed
    ("lm_studio/m", {}, {}),
    ("ollama/llava", {}, {}),  # a provider countgym does not know: the call itself reports it
    ("gemini/gemini-2.5-flash", {}, {"GOOGLE_API_KEY": "k"}),  # litellm reads either
    ("anthropic/claude-sonnet-4-5", {}, {"ANTHROPIC_AUTH_TOKEN": "t"}),
    ("anthropic/claude-sonnet-4-5", {}, {"ANTHROPIC_IDENTITY_TOKEN_FILE": "/dev/null"}),
])
def test_a_key_from_elsewhere_or_a_local_server_is_not_refused(no_keys, model: str, options: dict,
                                                                env: dict[str, str]) -> None:
    from countgym.agents.backends.providers import missing_key
    from countgym.agents.registry import check_backend_options

    for k, v in env.items():
        no_keys.setenv(k, v)
    assert missing_key(model, options) is None
    check_backend_options("direct", model, options)  # no UserError


def test_scripted_agents_and_local_models_need_no_key(no_keys) -> None:
    from countgym.agents.registry import check_backend_options

    check_backend_options("oracle", "", {})
    check_backend_options("noisy-pointer", "", {"sigma": 3})
    check_backend_options("direct", "hf:/nonexistent/tiny-vlm", {})  # the transformers backend


def test_check_backend_options_refuses_a_hosted_model_without_a_key(no_keys) -> None:
    from countgym.agents.registry import check_backend_options

    with pytest.raises(UserError, match="no API key for 'openai/gpt-4o-mini': set OPENAI_API_KEY"):
        check_backend_options("direct", "openai/gpt-4o-mini", {"max_tokens": 64})


def test_run_without_a_key_is_one_line_before_any_episode(no_keys, tiny_dataset, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "runs"
    rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "openai/gpt-4o-mini",
               "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.startswith("countgym: error: no API key for 'openai/gpt-4o-mini'") and "OPENAI_API_KEY" in err
    assert len(err.splitlines()) == 1
    assert not list(out.glob("*.jsonl")) if out.exists() else True  # no episode was logged


def test_simulate_needs_no_key(no_keys, tiny_dataset, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = main(["run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "openai/gpt-4o-mini",
               "--simulate", "--limit", "1", "--out", str(tmp_path / "runs"), "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert "1 episodes run" in captured.out


def _sweep(tmp_path: Path, tiny_dataset, extra: str = "") -> Path:
    cfg = tmp_path / "sweep.toml"
    cfg.write_text(f'out = "{tmp_path / "runs"}"\ndatasets = ["{tiny_dataset.root}"]\narms = ["direct"]\n'
                   f'models = ["openai/gpt-4o-mini"]\n{extra}')
    return cfg


def test_sweep_dry_run_reports_the_missing_key(no_keys, tiny_dataset, tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    assert main(["sweep", str(_sweep(tmp_path, tiny_dataset)), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no API key for 'openai/gpt-4o-mini'" in err and len(err.splitlines()) == 1


def test_sweep_whose_model_options_name_a_server_needs_no_key(no_keys, tiny_dataset, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture) -> None:
    cfg = _sweep(tmp_path, tiny_dataset, '[model_options."openai/gpt-4o-mini"]\napi_base = "http://127.0.0.1:1/v1"\n')
    assert main(["sweep", str(cfg), "--dry-run"]) == 0, capsys.readouterr().err
    assert main(["sweep", str(_sweep(tmp_path, tiny_dataset)), "--dry-run", "--simulate"]) == 0


# --- resume: kept error episodes are named -------------------------------------------------------


def test_resume_names_the_kept_error_episodes(tiny_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "broken_policy.py").write_text(
        "class Broken:\n"
        "    def reset(self, obs, task): pass\n"
        "    def act(self, obs): raise ValueError('this policy always fails')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["run", "--data", str(tiny_dataset.root), "--agent", "broken_policy:Broken", "--out",
            str(tmp_path / "runs"), "--no-progress"]
    main(argv)
    first = capsys.readouterr().out
    n = int(first.split(" episodes run")[0].split()[-1])
    assert n > 0 and "are kept" not in first
    main(argv)
    again = capsys.readouterr().out
    assert f"0 episodes run, {n} already done ({n} of them ended in an error and are kept; --force runs the " \
           "cell afresh)" in again
    main([*argv, "--force"])
    assert "are kept" not in capsys.readouterr().out


def test_resume_of_a_clean_cell_says_nothing_of_errors(tiny_dataset, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    argv = ["run", "--data", str(tiny_dataset.root), "--agent", "oracle", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0 and main(argv) == 0
    assert "are kept" not in capsys.readouterr().out


def test_kept_errors_count_only_this_runs_episodes(tiny_dataset, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from countgym.runner import CellSpec, run_cell

    class Broken:
        def reset(self, obs, task):  # noqa: ANN001, ANN201
            pass

        def act(self, obs):  # noqa: ANN001, ANN201
            raise ValueError("always fails")

    spec = CellSpec(dataset=str(tiny_dataset.root), agent="oracle")
    first = run_cell(spec, tmp_path, policy_factory=Broken, progress=False)
    assert first.errors == first.ran > 1 and first.kept_errors == 0
    again = run_cell(spec, tmp_path, policy_factory=Broken, progress=False)
    assert again.ran == 0 and again.kept_errors == first.errors
    fewer = CellSpec(dataset=str(tiny_dataset.root), agent="oracle", limit=1)  # same log, one stimulus
    assert run_cell(fewer, tmp_path, policy_factory=Broken, progress=False).kept_errors == 1


# --- install commands, the test server's port, litellm's warnings ---------------------------------


def test_missing_extra_names_this_installs_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    from importlib import metadata

    from countgym.errors import MissingExtraError, install_command

    class Dist:
        def __init__(self, info: dict | None) -> None:
            self.info = info

        def read_text(self, name: str) -> str | None:
            return json.dumps(self.info) if self.info is not None and name == "direct_url.json" else None

    def dists(info: dict | None):  # noqa: ANN202
        return lambda **kw: [Dist(info)]

    monkeypatch.setattr(metadata, "distributions", dists(None))  # from a package index
    assert install_command("api") == "pip install 'countgym[api]'"
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    monkeypatch.setattr(metadata, "distributions", dists({"url": f"file://{Path.cwd()}", "dir_info": {"editable": True}}))
    cmd = install_command("api")
    assert cmd.endswith(" -m pip install -e '.[api]'"), cmd
    assert str(MissingExtraError("litellm", "api")).endswith(cmd)
    monkeypatch.setattr(metadata, "distributions", dists({"url": "file:///src/count%20gym", "dir_info": {}}))
    assert install_command("ray").endswith(" -m pip install '/src/count gym[ray]'")


def test_testserver_port_in_use_is_one_line_exit_2(capsys: pytest.CaptureFixture) -> None:
    from countgym.testing.server import main as server_main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert server_main(["--port", str(port)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"port {port} on 127.0.0.1 is already in use" in err and "--port 0" in err
    assert len(err.splitlines()) == 1 and "Errno" not in err


def test_litellm_repeats_each_warning_once() -> None:
    from countgym.agents.backends.litellm_import import _OncePerMessage, load_litellm

    pytest.importorskip("litellm")
    load_litellm()
    logger = logging.getLogger("LiteLLM")
    assert any(isinstance(f, _OncePerMessage) for f in logger.filters)
    f = _OncePerMessage()

    def rec(level: int, msg: str) -> logging.LogRecord:
        return logging.LogRecord("LiteLLM", level, __file__, 1, msg, None, None)

    assert f.filter(rec(logging.WARNING, "dropping reasoning_effort")) is True
    assert f.filter(rec(logging.WARNING, "dropping reasoning_effort")) is False
    assert f.filter(rec(logging.WARNING, "another warning")) is True
    assert f.filter(rec(logging.ERROR, "a failure")) is True and f.filter(rec(logging.ERROR, "a failure")) is True


# --- what `countgym list` says of scripted policies and the video build ---------------------------


def test_noisy_pointer_runs_on_images_only_and_list_says_so() -> None:
    from countgym.agents.registry import agent_tasks, check_agent_task
    from countgym.catalog import arm_rows

    assert agent_tasks("noisy-pointer") == ("image",)
    with pytest.raises(UserError):
        check_agent_task("noisy-pointer", "video", "countgym/CountVideo-v0")
    tasks = {name: task for name, task, _ in arm_rows()}
    assert tasks["noisy-pointer"] == "image" and tasks["blob-counter"] == "image"
    assert tasks["oracle"] == "any" and tasks["noisy-counter"] == "any"


def test_list_estimates_the_video_build_on_this_machines_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    import countgym.scenes.video.dataset as vd
    from countgym.catalog import batteries

    def video_rows(n_cores: int) -> dict[str, float]:
        monkeypatch.setattr(vd, "cores", lambda: n_cores)
        return {r.name: r.build_s for r in batteries() if r.name.startswith("countvideo")}

    one, four = video_rows(1), video_rows(4)
    assert one["countvideo"] == pytest.approx(4 * four["countvideo"])
    assert one["countvideo"] == pytest.approx(2600 * vd.BUILD_SECONDS_PER_VIDEO * 2)
    assert vd.build_seconds_per_video((960, 540), 2) == pytest.approx(vd.BUILD_SECONDS_PER_VIDEO / 4)


@pytest.mark.parametrize(("model", "var"), [("openai/m", "OPENAI_API_KEY"), ("groq/m", "GROQ_API_KEY"),
                                            ("gemini/m", "GEMINI_API_KEY"), ("anthropic/m", "ANTHROPIC_API_KEY")])
def test_an_episodes_missing_key_error_names_the_variable_as_the_run_check_does(model: str, var: str) -> None:
    # The same words before the run and in a logged episode: a sweep sets api_key in
    # model_options, so the line names the option, not the command-line flag.
    from countgym.agents.backends.litellm_backend import missing_key_message

    msg = missing_key_message(model, RuntimeError("Missing credentials. Please pass an api_key"))
    assert msg == f"AuthenticationError: no API key for {model!r}: set {var} (or give the key as the agent option api_key)"
