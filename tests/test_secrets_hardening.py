"""Keys never leave their owner: error bodies are masked before they are cut, URL userinfo is not
sent as Basic auth unless asked (and its base64 never written), keys in query strings, in
scheme-less ``user:pw@host`` and in credential headers are masked in every file a run or an
audit writes and on stderr, and ``countgym audit`` sends no key to an endpoint a log names."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest

pytest.importorskip("litellm")

from countgym.cli import main  # noqa: E402
from countgym.logs import read_records, redact  # noqa: E402
from countgym.runner import CellSpec, run_cell  # noqa: E402
from countgym.secrets import (  # noqa: E402
    is_secret_name,
    may_hold_secret,
    redact_url,
    register_url_secrets,
    scrub_text,
)
from tests.hostile_server import HostileServer, chat  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning", "ignore:.*user.password.*:UserWarning")

ENV_KEY = "sk-envMARKER-aaaaaaaaaaaaaaaaaaaa"
OPT_KEY = "optMARKER-bbbbbbbbbbbbbbbbbbbbbbbb"  # 34 characters, not sk- shaped
URL_PW = "urlpwMARKER-cccccccccc"
QUERY_KEY = "queryMARKER-dddddddddd"
HDR_KEYS = {"api-key": "hdrMARKER-api-key-eeeeeeee", "Ocp-Apim-Subscription-Key": "hdrMARKER-ocp-ffffffff",
            "x-api-key": "hdrMARKER-x-api-gggggggg", "Authorization": "Bearer hdrMARKER-auth-hhhhhhhh"}
BARE_PW = "barepwMARKER-iiiiiiii"


def written(*folders: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for f in folders for p in f.rglob("*") if p.is_file())


def markers_in(text: str) -> list[str]:
    return [m for m in text.split() if "MARKER" in m]


def test_shapes_are_masked_without_being_registered() -> None:
    cases = {
        "https://h/v1?key=abc123&x=1": "https://h/v1?key=***&x=1",
        "https://h/v1?api-key=abc&token=def&sig=ghi": "https://h/v1?api-key=***&token=***&sig=***",
        "proxy at alice:s3cret@proxy.local:8080": "proxy at ***@proxy.local:8080",
        "https://alice:s3cret@h/v1": "https://***@h/v1",
        '{"Ocp-Apim-Subscription-Key": "abc123"}': '{"Ocp-Apim-Subscription-Key": "***"}',
        "api-key: abc123 rest": "api-key: *** rest",
        "Authorization: Basic YWxpY2U6czNjcmV0": "Authorization: ***",
        "a basic approach; the bearer of news; ANSWER: 4": "a basic approach; the bearer of news; ANSWER: 4",
        "ratio 3:4 and bob@example.com": "ratio 3:4 and bob@example.com",
    }
    for text, want in cases.items():
        assert scrub_text(text, []) == want, text
    assert redact_url("https://u:p@h/v1?key=K1&x=2") == "https://***@h/v1?key=***&x=2"
    for name in ("api-key", "Ocp-Apim-Subscription-Key", "x-api-key", "Authorization", "X-Goog-Api-Key", "token"):
        assert is_secret_name(name), name
    for name in ("max_tokens", "temperature", "budget_tokens", "reasoning_effort", "api_base", "input_cost_per_token",
                 "output_cost_per_token", "pad_token"):
        assert not is_secret_name(name), name


def test_masking_comes_before_the_cut() -> None:
    key = "zz" + "Q" * 22  # 24 characters, registered
    register_url_secrets(f"https://h/v1?key={key}")
    text = "x" * 290 + key + " tail" + "y" * 50
    assert scrub_text(text, limit=300) == "x" * 290 + "*** tailyy"
    assert "QQ" not in scrub_text(text, limit=300)


def test_option_and_header_credentials_are_redacted_by_name() -> None:
    opts = {"api_base": f"https://h/v1?api-key={QUERY_KEY}", "extra_params": {"extra_headers": dict(HDR_KEYS)},
            "proxy": f"u:{BARE_PW}@proxy.local"}
    text = json.dumps(redact(opts))
    assert markers_in(text) == [] and "<redacted>" in text


def test_a_non_json_error_body_is_masked_whole(tiny_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    # The key starts at byte 290: a 300-byte cut before masking used to write 10 of its characters.
    bodies = {"echo": (500, {}, ("e" * 290 + OPT_KEY + " " + ENV_KEY).encode()),
              "echo401": (401, {}, ("e" * 295 + OPT_KEY).encode())}
    with HostileServer(bodies) as srv:
        for case in bodies:
            out = tmp_path / case
            main(["run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "openai/blob",
                  "--out", str(out), "--no-progress", "--limit", "1", "--agent-option", f"api_base={srv.url(case)}",
                  "--agent-option", f"api_key={OPT_KEY}", "--agent-option", "max_attempts=1"])
            main(["audit", str(out), "--out", str(tmp_path / f"{case}-audit"), "--viewer-episodes", "5"])
    text = written(tmp_path) + capsys.readouterr().err
    rec = read_records([tmp_path / "echo"])[0]
    assert rec.error is not None and "eeee" in rec.error
    for key in (OPT_KEY, ENV_KEY):
        for k in range(8, len(key) + 1):  # not even a head of the key
            assert key[:k] not in text, (key, k)


def _cell(tiny_dataset, url: str, **extra: object) -> CellSpec:
    return CellSpec(dataset=str(tiny_dataset.root), agent="direct", model="openai/blob",
                    agent_options={"api_base": url, "max_attempts": 1, **extra})


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_url_userinfo_is_not_sent_as_basic_auth_unless_asked(tiny_dataset, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, transport: str) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    basic = base64.b64encode(f"alice:{URL_PW}".encode()).decode()
    # A hostile server echoes every request header it got in its error body.
    with HostileServer({}) as srv:
        base = srv.url("ok").replace("http://", f"http://alice:{URL_PW}@")
        res = run_cell(_cell(tiny_dataset, base, transport=transport), tmp_path / "a", progress=False)
        assert res.errors == 0
        got = srv.received()
        assert URL_PW not in got and basic not in got and "Basic" not in got
        assert f"Bearer {ENV_KEY}" in got  # the key meant for the server still goes there
        n = srv.request_count
        res = run_cell(_cell(tiny_dataset, base, transport=transport, url_basic_auth=True), tmp_path / "b", progress=False)
        sent = [h for _, h, _ in srv.requests[n:]]
        assert res.errors == 0 and all(h.get("Authorization") == f"Basic {basic}" for h in sent), sent
    text = written(tmp_path)
    assert URL_PW not in text and basic not in text


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_credentials_in_query_strings_headers_and_bare_userinfo_are_never_written(
    tiny_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], transport: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)

    def echo() -> tuple[int, dict[str, str], bytes]:  # a server that repeats what it was sent
        path, headers, _ = srv.requests[-1]
        return 500, {}, f"upstream said no to {path} with {json.dumps(headers)}".encode()

    with HostileServer({"echo": echo, "ok": (200, {}, chat(f"ANSWER: 3 (proxy u:{BARE_PW}@p.local)"))}) as srv:
        for case in ("ok", "echo"):
            url = srv.url(case) + f"?api-key={QUERY_KEY}"
            argv = ["run", "--data", str(tiny_dataset.root), "--agent", "direct", "--model", "openai/blob",
                    "--out", str(tmp_path / case), "--no-progress", "--limit", "1",
                    "--agent-option", f"api_base={url}", "--agent-option", "max_attempts=1",
                    "--agent-option", f"transport={transport}",
                    "--agent-option", "extra_params=" + json.dumps({"extra_headers": HDR_KEYS,
                                                                    "user": f"u:{BARE_PW}@mirror.local"})]
            main(argv)
            main(["audit", str(tmp_path / case), "--out", str(tmp_path / f"{case}-audit")])
        received = srv.received()
    # The server named by the user gets what the user configured ...
    assert QUERY_KEY in received and all(v in received for v in HDR_KEYS.values())
    # ... and nothing written or printed holds any of it.
    text = written(tmp_path) + capsys.readouterr().err
    assert markers_in(text) == [], markers_in(text)[:5]
    for cell in tmp_path.rglob("*.cell.json"):
        assert "<redacted>" in cell.read_text()
    assert read_records([tmp_path / "ok"])[0].end == "answer"


def _judge_log(tiny_countercount: Path, runs: Path, api_base: str) -> None:
    from countgym.envs.actions import Reply

    class Replier:
        def reset(self, obs: object, task: object) -> None:
            pass

        def act(self, obs: object) -> Reply:
            return Reply(text="It could be 3 or maybe 5.")

    def factory() -> Replier:
        return Replier()

    factory.provider = {"model": "openai/blob", "api_base": api_base}  # type: ignore[attr-defined]
    spec = CellSpec(dataset=str(tiny_countercount), agent="cf-oe", model="openai/blob")
    run_cell(spec, runs, policy_factory=factory, progress=False)


@pytest.mark.slow  # three whole CounterCount audits with their reports (about 7 s of CPU)
def test_the_audit_sends_no_key_to_an_endpoint_a_log_names(
    tiny_countercount: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    with HostileServer({}) as thief, HostileServer({}) as mine:
        _judge_log(tiny_countercount, tmp_path / "runs", thief.url("ok"))
        # By default the audit calls no model at all.
        assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "a"), "--viewer-episodes", "0"]) == 0
        # The run's own model, asked for explicitly but with no endpoint named: still nothing sent.
        assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "b"), "--viewer-episodes", "0",
                     "--judge", "same"]) == 0
        assert "--judge-option api_base" in capsys.readouterr().err
        assert thief.request_count == 0 and ENV_KEY not in thief.received()
        # With an endpoint the auditor names, the judge calls go there and only there.
        assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "c"), "--viewer-episodes", "0",
                     "--judge", "same", "--judge-option", f"api_base={mine.url('ok')}"]) == 0
        assert thief.request_count == 0 and mine.request_count > 0
        assert all(json.loads(b)["model"] == "blob" for _, _, b in mine.requests)
    for args in (["--judge", "same", "--judge-option", "api_key=x"], ["--judge", "same", "--judge-option", "api_base="]):
        assert main(["audit", str(tmp_path / "runs"), "--out", str(tmp_path / "d"), *args]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["a." * 40_000, "~" * 80_000, "a:" * 40_000, "x:" + "b" * 80_000, "api-key:" + " " * 80_000,
                                  "bearer " * 12_000, "?key=" * 16_000, "http://" * 12_000 + "@", "a:b@" * 20_000])
def test_masking_takes_linear_time_on_long_hostile_text(text: str) -> None:
    start = time.perf_counter()
    scrub_text(text, [])
    may_hold_secret(text, [])
    may_hold_secret(text, [], quick=True)
    assert time.perf_counter() - start < 1.0
