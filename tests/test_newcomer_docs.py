"""A newcomer copies the README's and docs' snippets as written: they run, and the messages the
docs quote are the ones the command line prints."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import pytest

from countgym.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _blocks(doc: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", (ROOT / doc).read_text(), re.S | re.M)


def test_readme_ten_lines_run_as_written(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (code,) = [b for b in _blocks("README.md", "python") if "gym.make(" in b]
    script = tmp_path / "ten_lines.py"
    script.write_text(code)
    runpy.run_path(str(script), run_name="__main__")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.endswith("answer") and "'n':" in last  # reward, truth, end


@pytest.mark.parametrize("doc,lang", [("README.md", "toml"), ("docs/sweeps.md", "toml"), ("docs/sweeps.md", "yaml")])
def test_sweep_configs_of_the_docs_dry_run(doc: str, lang: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture) -> None:
    monkeypatch.chdir(tmp_path)  # their `out` is relative
    for var in ("OPENAI_API_KEY", "GEMINI_API_KEY"):  # their hosted models need keys
        monkeypatch.setenv(var, "sk-test-not-a-real-key")
    cfg = tmp_path / f"sweep.{lang}"
    cfg.write_text(_blocks(doc, lang)[0])
    assert main(["sweep", str(cfg), "--dry-run"]) == 0, capsys.readouterr().err
    assert re.search(r"^\d+ cells", capsys.readouterr().out, re.M)


def test_the_typo_message_quoted_in_cli_doc_is_the_one_printed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    quoted = re.search(r"\(`(unknown dataset 'countvide'.*?)`\)", (ROOT / "docs/cli.md").read_text(), re.S)
    assert quoted, "docs/cli.md quotes the message for a mistyped battery"
    head, tail = [" ".join(part.split()) for part in quoted.group(1).split("...")]
    assert main(["run", "--data", "countvide", "--agent", "video-p1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and head in err and err.endswith(tail)


def test_a_template_placeholder_model_says_so(capsys: pytest.CaptureFixture) -> None:
    # docs/reproduce.md: "A placeholder left in place stops the sweep with one line".
    assert main(["sweep", str(ROOT / "configs" / "finger-order.toml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "placeholder" in err and "'REPLACE:" in err
    assert "cannot tell which backend" not in err


def test_the_placeholder_check_keeps_real_ids() -> None:
    from countgym.agents.backends.factory import check_model_id
    from countgym.errors import UserError

    assert check_model_id("openai/gpt-4o-mini") == "litellm"
    assert check_model_id("hf:/models/x") == "local"
    with pytest.raises(UserError, match="placeholder"):
        check_model_id("REPLACE:gemini-3.1-flash-lite")
    with pytest.raises(UserError, match="cannot tell which backend"):
        check_model_id("gpt4o")


def test_a_missing_api_key_ends_the_episode_at_once_naming_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # litellm reports a missing key as an InternalServerError, which used to be retried as
    # transient for ~28 s per episode and run again on every resume.
    from countgym.agents.backends.litellm_backend import LiteLLMBackend

    class InternalServerError(Exception):
        status_code = 500

    calls = []

    def no_key(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        raise InternalServerError("litellm.InternalServerError: OpenAIException - Missing credentials. Please pass an api_key")

    be = LiteLLMBackend("openai/gpt-4o-mini", max_attempts=4)
    monkeypatch.setattr(be, "_call", no_key)
    monkeypatch.setattr(be, "_sleep", lambda s: pytest.fail("a missing key is not retried"))
    reply = be.complete([{"role": "user", "content": "Count."}])
    assert calls == [1] and reply.error is not None
    assert not reply.error.startswith("[transient]") and "set OPENAI_API_KEY" in reply.error


def test_other_server_errors_stay_transient() -> None:
    from countgym.agents.backends.litellm_backend import missing_key_message

    assert missing_key_message("openai/x", RuntimeError("upstream timed out")) is None
    assert "GEMINI_API_KEY" in (missing_key_message("gemini/g", RuntimeError("No API key was given")) or "")


def test_readme_command_block_names_every_command() -> None:
    import argparse

    from countgym.cli import build_parser

    block = re.search(r"## The command line\n\n```\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    named = set(re.findall(r"^countgym (\w+)", block.group(1), re.M))
    assert set(sub.choices) <= named, f"README's command block misses {set(sub.choices) - named}"
