"""Hostile providers against both transports: the direct httpx transport and litellm classify
the same answers the same way (one table), any ``Retry-After`` is clamped (a wait beyond the run's
budget stops the cell with one line and leaves its episodes to resume), bodies are bounded raw and
decompressed, native tool-call arguments are capped, and an authentication error (401, 403, no
key) ends the call at once naming the key."""

from __future__ import annotations

import gzip
import json
import struct
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest

pytest.importorskip("litellm")

from countgym.agents.backends.base import message, text_part  # noqa: E402
from countgym.agents.backends.litellm_backend import (  # noqa: E402
    MAX_TOOL_CALLS,
    RETRY_AFTER_CAP_S,
    LiteLLMBackend,
    _retry_after,
)
from countgym.cli import main  # noqa: E402
from countgym.envs.common import REPLY_LIMIT  # noqa: E402
from countgym.errors import ProviderQuotaError, is_transient_error  # noqa: E402
from countgym.logs import read_records  # noqa: E402
from tests.hostile_server import HostileServer, chat  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*ReadOnly.*:UserWarning", "ignore:.*user.password.*:UserWarning")
TRANSPORTS = ("direct", "litellm")
KEY = "sk-hostile-MARKER-0123456789abcdef"

# (case, status, headers, body, expected outcome): "ok", "transient", "permanent" or "stop".
TABLE: list[tuple[str, int, dict[str, str], bytes, str]] = [
    ("ok", 200, {}, chat(), "ok"),
    ("err200", 200, {}, json.dumps({"error": {"message": "upstream overloaded", "code": 503}}).encode(), "transient"),
    ("err200str", 200, {}, json.dumps({"error": "upstream failed"}).encode(), "transient"),
    ("err200code400", 200, {}, json.dumps({"error": {"message": "bad", "code": 400}}).encode(), "transient"),
    ("emptychoices", 200, {}, json.dumps({"choices": []}).encode(), "transient"),
    ("nochoices", 200, {}, json.dumps({"id": "x"}).encode(), "transient"),
    ("notjson", 200, {}, b"<html>proxy error</html>", "transient"),
    ("truncated", 200, {}, chat()[:40], "transient"),
    ("jsonlist", 200, {}, b"[1, 2]", "transient"),
    ("nullcontent", 200, {}, json.dumps({"choices": [{"message": {"role": "assistant", "content": None},
                                                       "finish_reason": "stop"}]}).encode(), "transient"),
    ("badgzip", 200, {"Content-Encoding": "gzip"}, b"\x1f\x8bnot gzip at all", "transient"),
    ("gzipok", 200, {"Content-Encoding": "gzip"}, gzip.compress(chat()), "ok"),
    ("deflateok", 200, {"Content-Encoding": "deflate"}, zlib.compress(chat()), "ok"),
    ("brotli", 200, {"Content-Encoding": "br"}, b"\x8b\x02\x80", "transient"),
    ("500", 500, {}, b'{"error": {"message": "boom"}}', "transient"),
    ("502html", 502, {}, b"<html>bad gateway</html>", "transient"),
    ("429", 429, {"Retry-After": "0"}, b'{"error": {"message": "slow down"}}', "transient"),
    ("429neg", 429, {"Retry-After": "-7"}, b"{}", "transient"),
    ("429nan", 429, {"Retry-After": "nan"}, b"{}", "transient"),
    ("429junk", 429, {"Retry-After": "soon, maybe"}, b"{}", "transient"),
    ("429inf", 429, {"Retry-After": "inf"}, b"{}", "stop"),
    ("429e20", 429, {"Retry-After": "1e20"}, b"{}", "stop"),
    ("429e400", 429, {"Retry-After": "1e400"}, b"{}", "stop"),
    ("429msinf", 429, {"retry-after-ms": "inf"}, b"{}", "stop"),
    ("429date", 429, {"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, b"{}", "stop"),
    ("503inf", 503, {"Retry-After": "Infinity"}, b"{}", "stop"),
    ("quota", 429, {}, b'{"error": {"message": "You exceeded your quota", "code": "insufficient_quota"}}', "stop"),
    ("401", 401, {}, b'{"error": {"message": "invalid key"}}', "permanent"),
    ("403", 403, {}, b'{"error": {"message": "forbidden"}}', "permanent"),
    ("400ctx", 400, {}, b'{"error": {"message": "maximum context length exceeded", "code": "context_length_exceeded"}}',
     "permanent"),
]


def _backend(url: str, transport: str, **kw: object) -> LiteLLMBackend:
    opts: dict[str, object] = dict(api_key=KEY, transport=transport, max_attempts=2, backoff_base_s=0.01,
                                   sleep=lambda s: None, timeout_s=20.0)
    opts.update(kw)
    return LiteLLMBackend("openai/blob", api_base=url, **opts)  # type: ignore[arg-type]


def _outcome(be: LiteLLMBackend) -> tuple[str, str]:
    try:
        reply = be.complete([message("user", text_part("How many?"))])
    except ProviderQuotaError as e:
        return "stop", str(e)
    if reply.error is None:
        return "ok", reply.text
    return ("transient" if is_transient_error(reply.error) else "permanent"), reply.error


@pytest.fixture(scope="module")
def hostile() -> HostileServer:
    with HostileServer({case: (status, headers, body) for case, status, headers, body, _ in TABLE}) as srv:
        yield srv


@pytest.mark.parametrize("case,expected", [(t[0], t[4]) for t in TABLE])
def test_both_transports_classify_each_hostile_answer_alike(hostile: HostileServer, case: str, expected: str) -> None:
    seen = {}
    for transport in TRANSPORTS:
        start = time.monotonic()
        seen[transport] = _outcome(_backend(hostile.url(case), transport))
        assert time.monotonic() - start < 15, (transport, case)
    assert {t: o for t, (o, _) in seen.items()} == {t: expected for t in TRANSPORTS}, seen
    for _outcome_kind, detail in seen.values():
        assert KEY not in detail and "Traceback" not in detail and "\n" not in detail
    if expected == "ok":
        assert seen["direct"][1] == seen["litellm"][1] == "ANSWER: 3"
    if expected == "stop":
        assert all("re-run the same command later" in d for _, d in seen.values())


@pytest.mark.parametrize("headers,expected", [
    ({"Retry-After": "inf"}, RETRY_AFTER_CAP_S), ({"Retry-After": "1e20"}, RETRY_AFTER_CAP_S),
    ({"retry-after-ms": "inf"}, RETRY_AFTER_CAP_S), ({"Retry-After": "-1"}, None), ({"Retry-After": "nan"}, None),
    ({"Retry-After": "x" * 10_000}, None), ({"Retry-After": "Fri, 31 Dec 9999 23:59:59 GMT"}, RETRY_AFTER_CAP_S),
    ({"Retry-After": "Thu, 01 Jan 1970 00:00:00 GMT"}, 0.0), ({"Retry-After": "2.5"}, 2.5),
    ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5), ({"retry-after-ms": "junk", "Retry-After": "9"}, 9.0),
    ({"Retry-After": "Sat, 99 Foo 99999999999999 99:99:99 GMT"}, None),
])
def test_retry_after_is_clamped_never_raises(headers: dict[str, str], expected: float | None) -> None:
    class E(Exception):
        status_code = 429

    e = E()
    e.headers = headers  # type: ignore[attr-defined]
    assert _retry_after(e) == expected


def _run_argv(data: Path, out: Path, url: str, *extra: str) -> list[str]:
    return ["run", "--data", str(data), "--agent", "direct", "--model", "openai/blob", "--out", str(out),
            "--no-progress", "--agent-option", f"api_base={url}", *extra]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_endless_retry_after_stops_the_run_and_a_resume_runs_everything(
    tiny_dataset, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with HostileServer({"inf": (429, {"Retry-After": "inf"}, b"{}"),
                        "ms": (429, {"retry-after-ms": "1e20"}, b"{}")}) as srv:
        for case in ("inf", "ms"):
            argv = _run_argv(tiny_dataset.root, tmp_path, srv.url(case), "--concurrency", "2",
                             "--agent-option", f"transport={transport}")
            start = time.monotonic()
            assert main(argv) == 2
            assert time.monotonic() - start < 30
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and "429" in err[0] and "resume" in err[0] and "Overflow" not in err[0], err
            assert read_records([tmp_path]) == []  # nothing logged as a failure
        assert srv.request_count <= 4
        # The provider is healthy again: the same command (a healthy endpoint) runs every episode.
        assert main(_run_argv(tiny_dataset.root, tmp_path, srv.url("ok"), "--agent-option", f"transport={transport}")) == 0
    recs = read_records([tmp_path])
    assert len(recs) == 3 and all(r.end == "answer" and r.error is None for r in recs)


def gzip_of_zeros(mib: int) -> bytes:
    """A valid gzip stream of ``mib`` MiB of zeros, built without compressing them all: after a
    full flush the compressor starts afresh, so every further 1 MiB block is the same bytes."""
    zeros = b"\0" * (1 << 20)
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    first = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    block = packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    assert block == packer.compress(zeros) + packer.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(mib):
        crc = zlib.crc32(zeros, crc)
    # b"\x03\x00": an empty final block (fixed Huffman); then the gzip trailer (CRC-32, size mod 2**32)
    return first + block * (mib - 1) + b"\x03\x00" + struct.pack("<II", crc, (mib << 20) & 0xFFFFFFFF)


def test_the_cheap_gzip_stream_is_the_real_one() -> None:
    for mib in (1, 3):
        assert gzip.decompress(gzip_of_zeros(mib)) == b"\0" * (mib << 20)


def test_a_gzip_bomb_is_refused_within_bounded_memory() -> None:
    bomb = gzip_of_zeros(1024)
    assert len(bomb) < 2 << 20  # about 1 MB on the wire, 1 GiB decoded
    with HostileServer({"bomb": (200, {"Content-Encoding": "gzip"}, bomb)}) as srv:
        for transport in TRANSPORTS:
            be = _backend(srv.url("bomb"), transport, max_attempts=1)
            tracemalloc.start()
            try:
                kind, detail = _outcome(be)
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert kind == "transient" and "decompresses to more than" in detail, (transport, detail)
            assert peak < 200 << 20, (transport, peak)  # the default bound is 32 MiB


def test_a_body_over_the_bound_is_refused_before_it_is_parsed() -> None:
    big = chat("ANSWER: 3 " + "x" * (3 << 20))
    with HostileServer({"big": (200, {}, big)}) as srv:
        for transport in TRANSPORTS:
            kind, detail = _outcome(_backend(srv.url("big"), transport, max_body_bytes=1 << 20))
            assert kind == "transient" and "larger than 1048576 bytes" in detail, (transport, detail)
            kind, text = _outcome(_backend(srv.url("big"), transport))  # within the default bound
            assert kind == "ok" and text.startswith("ANSWER: 3"), transport


def test_native_tool_call_arguments_are_capped_like_text() -> None:
    calls = [{"id": f"c{i}", "type": "function",
              "function": {"name": "mark" + "n" * 1000, "arguments": json.dumps({"x": 1, "pad": "p" * (REPLY_LIMIT * 3)})}}
             for i in range(MAX_TOOL_CALLS + 20)]
    with HostileServer({"tools": (200, {}, chat("", tool_calls=calls))}) as srv:
        for transport in TRANSPORTS:
            be = _backend(srv.url("tools"), transport)
            reply = be.complete([message("user", text_part("tag"))], tools=[{"type": "function", "function": {
                "name": "mark", "parameters": {"type": "object", "properties": {}}}}])
            assert reply.error is None and reply.tool_calls is not None, transport
            assert [len(c["function"]["arguments"]) for c in reply.tool_calls] == [REPLY_LIMIT]
            assert all(len(c["function"]["name"]) <= 256 for c in reply.tool_calls)
    small = [{"id": f"c{i}", "type": "function", "function": {"name": "mark", "arguments": '{"x": 1, "y": 2}'}}
             for i in range(MAX_TOOL_CALLS + 20)]
    with HostileServer({"many": (200, {}, chat("", tool_calls=small))}) as srv:
        for transport in TRANSPORTS:
            reply = _backend(srv.url("many"), transport).complete([message("user", text_part("tag"))])
            assert reply.tool_calls is not None and len(reply.tool_calls) == MAX_TOOL_CALLS, transport
            assert all(json.loads(c["function"]["arguments"]) == {"x": 1, "y": 2} for c in reply.tool_calls)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("status", [401, 403])
def test_an_auth_error_ends_the_call_at_once(monkeypatch: pytest.MonkeyPatch, transport: str, status: int) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with HostileServer({"auth": (status, {}, b'{"error": {"message": "no"}}')}) as srv:
        be = _backend(srv.url("auth"), transport, api_key=None, max_attempts=6, sleep=time.sleep)
        start = time.monotonic()
        kind, detail = _outcome(be)
        assert time.monotonic() - start < 5
        assert srv.request_count == 1  # not retried
    assert kind == "permanent" and "OPENAI_API_KEY" in detail and "\n" not in detail, detail


@pytest.mark.parametrize("model,var", [("openai/gpt-4o-mini", "OPENAI_API_KEY"),
                                       ("anthropic/claude-3-5-haiku-latest", "ANTHROPIC_API_KEY"),
                                       ("gemini/gemini-2.0-flash", "GEMINI_API_KEY")])
def test_a_missing_key_is_a_permanent_error_naming_it(monkeypatch: pytest.MonkeyPatch, model: str, var: str) -> None:
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    be = LiteLLMBackend(model, max_attempts=6, sleep=time.sleep, timeout_s=10.0)
    start = time.monotonic()
    reply = be.complete([message("user", text_part("How many?"))])
    assert time.monotonic() - start < 8  # no ~24 s of retries
    assert reply.error is not None and not is_transient_error(reply.error), reply.error
    assert var in reply.error and "\n" not in reply.error, reply.error


def test_a_missing_key_episode_is_not_rerun_on_resume(tiny_dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with HostileServer({"auth": (401, {}, b'{"error": {"message": "Incorrect API key provided"}}')}) as srv:
        argv = _run_argv(tiny_dataset.root, tmp_path, srv.url("auth"), "--limit", "1")
        main(argv)
        err = capsys.readouterr().err
        assert "OPENAI_API_KEY" in err and "Traceback" not in err
        assert srv.request_count == 1
        main(argv)
        assert srv.request_count == 1  # a permanent error: the resume does not call again
    (rec,) = read_records([tmp_path])
    assert rec.end == "error" and not is_transient_error(rec.error) and "OPENAI_API_KEY" in rec.error


@pytest.mark.parametrize("transport", ["direct", "litellm"])
def test_a_billed_reply_the_retry_discards_keeps_its_cost(transport: str) -> None:
    # An empty 200 (with usage) is billed by the provider; the call's retry asks again. The reply
    # that comes back carries both calls' cost, so the spend cap counts what was paid.
    answers = iter([(200, {}, chat("")), (200, {}, chat("ANSWER: 4"))])
    with HostileServer({"flaky": lambda: next(answers)}) as srv:
        be = _backend(srv.url("flaky"), transport, input_cost_per_token=0.01, output_cost_per_token=0.1)
        reply = be.complete([message("user", text_part("how many?"))])
        assert srv.request_count == 2 and reply.error is None and reply.text == "ANSWER: 4"
        one_call = 5 * 0.01 + 3 * 0.1
        assert reply.cost == pytest.approx(2 * one_call)
    gone = iter([(200, {}, chat(""))] * 3)
    with HostileServer({"empty": lambda: next(gone)}) as srv:
        be = _backend(srv.url("empty"), transport, input_cost_per_token=0.01, output_cost_per_token=0.1)
        reply = be.complete([message("user", text_part("how many?"))])
        assert reply.error is not None and srv.request_count == 2  # max_attempts=2
        assert reply.cost == pytest.approx(2 * (5 * 0.01 + 3 * 0.1))  # an error that was paid for
