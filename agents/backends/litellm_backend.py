"""Hosted and OpenAI-compatible models through litellm, with our own retry loop.

litellm is imported lazily when the first backend is built (it takes seconds and, unless told
otherwise, fetches a cost map over the network at import). Retries are ours (litellm and the OpenAI SDK
are called with zero retries) so that the policy is explicit, bounded and testable: rate limits
(honouring ``Retry-After``), 5xx, timeouts, dropped connections, malformed bodies and empty
choices are retried with exponential backoff and jitter; auth errors, bad requests, context
overflows and content filters end the call at once with ``Reply.error`` set. API keys are
scrubbed from every error text this module produces.

Deadlines, not read timeouts: ``timeout_s`` is the total time one attempt may take, from the
request to the last byte of the reply, enforced even when a server sends one byte every second
(a read timeout alone never fires then). Calls run as ``litellm.acompletion`` on one background
event loop under ``asyncio.wait_for``, so a late attempt is cancelled and its connection closed,
not left running; the direct transport sends and reads in the calling thread, every socket
operation bounded by what is left of the attempt's deadline, and closes a late attempt's
connection the same way. Inside an ``episode_scope`` (the runner opens one per episode) the calls of an
episode also share ``episode_timeout_s``. A call that fails for a passing reason returns an error
marked ``[transient]``: resume re-runs such episodes and analysis does not score them. A 429 that
asks to wait longer than ``max_total_wait_s`` (or says the quota is spent) raises
``ProviderQuotaError``: the cell stops with one line instead of failing every episode at once.

Hostile answers: any ``Retry-After`` / ``retry-after-ms`` value is clamped (``RETRY_AFTER_CAP_S``;
``inf``, ``1e20`` or a date in the year 9999 mean "longer than this run waits" and stop the cell,
negative, NaN or unreadable values are ignored for the exponential backoff). An authentication
error (401, 403, or no API key at all) ends the call at once, naming the key to set. Bodies are
bounded: the direct transport reads them within ``max_body_bytes`` (raw and decompressed); the
litellm transport gets the same bound for OpenAI-compatible and Azure providers through
``litellm.aclient_session`` (when the user set none); other litellm providers read bodies with
litellm's own clients, bounded in time by the attempt deadline but not in size. Native tool
calls are capped (``MAX_TOOL_CALLS`` calls sharing ``REPLY_LIMIT`` characters of arguments).
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import importlib.util
import json
import math
import os
import random
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from countgym.agents.backends.base import BaseChatModel, Message, png_data_url
from countgym.agents.backends.litellm_import import load_litellm as _litellm
from countgym.agents.backends.openai_direct import (
    BODY_LIMIT,
    MAX_BODY_BYTES,
    DirectTransport,
    bounded_transport,
    check_params,
    proxy_routing_transport,
    request_body,
)
from countgym.agents.backends.providers import (
    HOSTED_KEY_VARS,
    PROVIDERS,
    SELF_HOSTED,
    direct_endpoint,
    provider_key,
    provider_of,
)
from countgym.agents.backends.reasoning import ReasoningRequest, reasoning_request
from countgym.deadlines import episode_elapsed
from countgym.envs.actions import Reply
from countgym.envs.common import REPLY_LIMIT
from countgym.errors import TRANSIENT_MARK, MissingExtraError, ProviderQuotaError
from countgym.logs import Usage
from countgym.secrets import (
    redact_url,
    register_secret,
    register_url_secrets,
    scrub_text,
    strip_userinfo,
)
from countgym.simulate_context import simulation_headers

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_PID = 0
_LOOP_LOCK = threading.Lock()
# Extra wait for a cancelled attempt to unwind before the caller stops waiting for it anyway.
_CANCEL_GRACE_S = 5.0
_MAX_ERROR_CHARS = 600
# Status codes worth another attempt; everything else in 4xx is the request's own fault.
_RETRY_STATUS = frozenset({408, 409, 425, 429})
RETRY_AFTER_CAP_S = 365 * 86400.0
"""Longest wait a ``Retry-After`` may ask for, as read: larger, infinite or far-future values are
clamped to it (and, being beyond any run's budget, stop the cell)."""
MAX_TOOL_CALLS = 64
"""Native tool calls kept from one reply (the rest are dropped, like text past ``REPLY_LIMIT``).
Their arguments share one ``REPLY_LIMIT`` of characters: a reply's calls weigh no more in the log
than its text may."""
MAX_TOOL_NAME_CHARS = 256
# Errors that say no key was given at all (providers word it in many ways).
_MISSING_KEY_RE = re.compile(
    r"(?i)(missing\s+(?:[\w-]+\s+){0,3}(?:api[\s_-]?key|credentials)|api_key client option must be set"
    r"|no api[\s_-]?key|api[\s_-]?key (?:is )?(?:missing|required|not (?:set|provided|found))"
    r"|please (?:pass|set|provide) (?:an? |the )?`?api[_\s-]?key)"
)
# Provider prefixes and the variable that holds their key (litellm knows more; this names the usual ones).
_KEY_VARS = {
    "openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY", "groq": "GROQ_API_KEY", "xai": "XAI_API_KEY",
    "together_ai": "TOGETHERAI_API_KEY", "mistral": "MISTRAL_API_KEY", "deepseek": "DEEPSEEK_API_KEY",
    "fireworks_ai": "FIREWORKS_AI_API_KEY", "azure": "AZURE_API_KEY", "hosted_vllm": "HOSTED_VLLM_API_KEY",
}


class _Paid:
    """The cost of the replies one call's retry loop received and discarded (an empty reply, a
    content filter): the provider billed them, so the call's cost includes them. Unknown when
    any of them had no known cost."""

    def __init__(self) -> None:
        self.calls = 0
        self.known: float = 0.0
        self.unknown = False

    def add(self, cost: float | None) -> None:
        self.calls += 1
        if cost is None:
            self.unknown = True
        else:
            self.known += cost

    @property
    def total(self) -> float | None:
        """What the discarded replies cost (None: none were received, or one cost is unknown)."""
        return None if self.unknown or not self.calls else self.known

    def plus(self, cost: float | None) -> float | None:
        """A final reply's cost with the discarded ones added (unknown stays unknown)."""
        return None if cost is None or self.unknown else cost + self.known


class _RetryableResponse(Exception):
    """A 200 response that carries no usable answer (empty choices, no message)."""


class _AttemptDeadline(Exception):
    """An attempt that did not deliver a whole reply within its total deadline."""


def _event_loop() -> asyncio.AbstractEventLoop:
    """The background event loop litellm's calls and the httpx lanes run on (one per process,
    started on first use)."""
    global _LOOP, _LOOP_PID
    with _LOOP_LOCK:
        if _LOOP is None or _LOOP.is_closed() or _LOOP_PID != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="countgym-litellm-io", daemon=True).start()
            _LOOP, _LOOP_PID = loop, os.getpid()
        return _LOOP


class LiteLLMBackend(BaseChatModel):
    """A ``ChatModel`` over ``litellm.completion``.

    Args:
        model: litellm model id (``openai/gpt-4o-mini``, ``gemini/...``, ``openrouter/...``,
            ``hosted_vllm/...``).
        api_base: endpoint URL for OpenAI-compatible servers (vLLM, the local test server).
        api_key: the key; by default litellm reads the provider's variable from the environment.
        temperature: sampling temperature (0: the papers' greedy setting); None sends none, so
            the model samples with its provider's default parameters (CounterCount thinking mode).
        max_tokens: completion token cap.
        reasoning: the reasoning mode, one of ``agents.backends.reasoning.MODES``: "low" (the
            Finger setting), "off" (what disables reasoning on this provider), "default" (send
            nothing), "on". None derives it from ``thinking`` and ``reasoning_effort``.
        reasoning_effort: "low" (default) means mode "low"; None means mode "default"; any other
            value is sent as it is.
        thinking: False means mode "off" (the thinking-off control).
        thinking_off_effort: an explicit ``reasoning_effort`` for mode "off" instead of the
            provider rule (recorded as unverified).
        timeout_s: total deadline of one attempt (request sent to whole reply read), in seconds.
        max_attempts: attempts per call, first one included.
        max_total_wait_s: bound on the summed backoff sleeps of one call; a 429 asking for a
            longer wait stops the cell (``ProviderQuotaError``).
        episode_timeout_s: total deadline of all calls of one episode (inside an
            ``episode_scope``); None: no episode deadline.
        backoff_base_s / backoff_max_s: exponential backoff base and cap.
        input_cost_per_token / output_cost_per_token: prices (USD) when litellm does not know
            the model; when given they take precedence over litellm's cost map.
        extra_params: passed through to ``litellm.completion`` (e.g. ``{"top_p": 1}``).
        batch_concurrency: threads ``complete_batch`` uses.
        url_basic_auth: send the ``user:password@`` of ``api_base`` as HTTP Basic auth. Off by
            default: the userinfo is removed from the URL before any request (and masked in every
            log), so credentials in a URL never leave unless asked for.
        max_body_bytes: bound on one response body, raw and decompressed (see the module doc).
        transport: "direct" posts to ``{api_base}/chat/completions`` over pooled keep-alive
            connections (from the calling thread) and never imports litellm (``agents.backends.openai_direct``); "litellm" calls
            ``litellm.acompletion``; "auto" (default) is "direct" for an ``openai/`` model with an
            ``api_base`` (unless the name is one of OpenAI's own: ``gpt-...``, ``o3-...``) and
            "litellm" otherwise. "direct" also reaches the OpenAI-compatible providers of
            ``agents.backends.providers`` (``groq/``, ``openrouter/``, ``together_ai/``,
            ``deepseek/``, ``fireworks_ai/``, ``xai/``, ``mistral/``, ...) at their public
            endpoint with the key from their usual variable. Without prices the direct path's
            cost is None.
        seed: seed of the backoff jitter.
        sleep: the sleeping function (tests record the waits instead of sleeping).
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = 4096,
        reasoning: str | None = None,
        reasoning_effort: str | None = "low",
        thinking: bool = True,
        thinking_off_effort: str | None = None,
        timeout_s: float = 120.0,
        max_attempts: int = 6,
        max_total_wait_s: float = 300.0,
        episode_timeout_s: float | None = 3600.0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        input_cost_per_token: float | None = None,
        output_cost_per_token: float | None = None,
        extra_params: dict[str, Any] | None = None,
        batch_concurrency: int = 8,
        transport: str = "auto",
        seed: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        url_basic_auth: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.transport = _transport(transport, model, api_base)
        # httpx is a core dependency; only the litellm transport needs the 'api' extra.
        if self.transport == "litellm" and importlib.util.find_spec("litellm") is None:
            raise MissingExtraError("litellm", "api")
        _check_options(
            timeout_s=timeout_s, episode_timeout_s=episode_timeout_s, max_attempts=max_attempts,
            max_total_wait_s=max_total_wait_s, backoff_base_s=backoff_base_s, backoff_max_s=backoff_max_s,
            input_cost_per_token=input_cost_per_token, output_cost_per_token=output_cost_per_token,
            max_tokens=max_tokens, batch_concurrency=batch_concurrency,
            url_basic_auth=url_basic_auth, max_body_bytes=max_body_bytes,
        )
        register_secret(api_key)
        register_url_secrets(api_base)
        self._send_base = api_base
        if api_base and not url_basic_auth and strip_userinfo(api_base) != api_base.strip():
            self._send_base = strip_userinfo(api_base)
            _warn_once((model, "userinfo"), f"{model}: the user:password@ of api_base is not sent (it would go out "
                       "as HTTP Basic auth); pass url_basic_auth=true to send it")
        self.max_body_bytes = max_body_bytes
        if self.transport == "litellm":
            # Import now (seconds), so that the first episode's deadline does not pay for it.
            _litellm()
        self.model = model
        self.api_base = api_base
        self._api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.thinking = thinking
        self.reasoning = _reasoning_request(
            model, api_base, max_tokens, reasoning, reasoning_effort, thinking, thinking_off_effort
        )
        self.reasoning_effort = self.reasoning.params.get("reasoning_effort")
        _warn_if_not_disabled(model, self.reasoning)
        self.timeout_s = timeout_s
        self.max_attempts = max_attempts
        self.max_total_wait_s = max_total_wait_s
        self.episode_timeout_s = episode_timeout_s
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.input_cost_per_token = input_cost_per_token
        self.output_cost_per_token = output_cost_per_token
        self.extra_params = dict(extra_params or {})
        self.batch_concurrency = max(1, batch_concurrency)
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        self._sleep = sleep
        self._direct = None
        if self.transport == "direct":
            headers = self.extra_params.get("extra_headers")
            key = api_key or provider_key(model)
            if key is None and provider_of(model) not in SELF_HOSTED:
                key = "no-key"  # never another provider's key (OPENAI_API_KEY) to this one
            register_secret(key)
            self._direct = DirectTransport(direct_endpoint(model, self._send_base) or "", key,
                                           headers if isinstance(headers, dict) else None,
                                           url_basic_auth=url_basic_auth, max_body_bytes=max_body_bytes)
            check_params(self._direct_params())  # a NaN is a mistake to say now, not invalid JSON to send

    sends_data_urls = True
    """Images go out as PNG data URLs: policies may hold them encoded (``EncodedImage``)."""

    def __repr__(self) -> str:  # never show the key
        api_base = redact_url(self.api_base) if self.api_base else None
        return f"LiteLLMBackend(model={self.model!r}, api_base={api_base!r}, transport={self.transport!r})"

    def provider_params(self) -> dict[str, Any]:
        """The provider parameters worth logging (no key)."""
        return {
            "model": self.model,
            "api_base": redact_url(self.api_base) if self.api_base else None,
            "transport": self.transport,
            "temperature": "provider default" if self.temperature is None else self.temperature,
            "max_tokens": self.max_tokens,
            "reasoning_effort": self.reasoning_effort,
            **self.reasoning.loggable(),
            **({"extra_params": dict(self.extra_params)} if self.extra_params else {}),
        }

    # --- calls ----------------------------------------------------------------------------------
    def complete(self, messages: list[Message], *, tools: list[dict[str, Any]] | None = None) -> Reply:
        """One chat call with retries; never raises on provider faults. ``tools``: OpenAI-style
        function definitions (native tool calling); the reply's ``tool_calls`` come back on it."""
        start = time.perf_counter()
        try:
            wire = to_openai_messages(messages)
        except (TypeError, ValueError) as e:
            return Reply(text="", error=f"cannot encode request: {e}", latency_s=0.0)
        waited = 0.0
        last_error = ""
        attempt = 0
        paid = _Paid()  # replies the provider billed but this loop discarded (empty, filtered)
        while attempt < self.max_attempts:
            left = self._episode_left()
            if left is not None and left <= 0:
                last_error += f" (episode deadline of {self.episode_timeout_s:g} s reached)"
                break
            attempt += 1
            budget = self.timeout_s if left is None else min(self.timeout_s, left)
            response = None
            try:
                response = self._call(wire, budget, tools)
                reply = self._to_reply(response)
            except Exception as e:  # provider faults arrive as many exception types
                if response is not None:
                    paid.add(self._cost(response, _usage_of(response)))
                retryable, retry_after = self._classify(e)
                last_error = self.scrub(f"{type(e).__name__}: {_message_of(e)}")
                missing = missing_key_message(self.model, e)
                if missing is not None:  # no retry can help: one line naming the key
                    return Reply(text="", error=missing, latency_s=time.perf_counter() - start, cost=paid.total)
                if not retryable:
                    if _is_auth_error(e):
                        last_error = self.scrub(self._auth_line(e))
                    return Reply(text="", error=last_error, latency_s=time.perf_counter() - start,
                                 cost=paid.total)
                self._stop_on_quota(e, retry_after, last_error)
                if attempt == self.max_attempts:
                    break
                delay = self._delay(attempt, retry_after)
                if waited + delay > self.max_total_wait_s:
                    last_error += f" (next wait {delay:.1f} s would exceed max_total_wait_s)"
                    break
                left = self._episode_left()
                if left is not None and delay >= left:
                    last_error += f" (next wait {delay:.1f} s would pass the episode deadline)"
                    break
                self._sleep(delay)
                waited += delay
                continue
            reply.latency_s = time.perf_counter() - start
            if paid.calls:
                reply.cost = paid.plus(reply.cost)
            return reply
        error = f"{TRANSIENT_MARK} gave up after {attempt} attempt(s), {waited:.1f} s of backoff: {last_error}"
        return Reply(text="", error=error[:_MAX_ERROR_CHARS], latency_s=time.perf_counter() - start,
                     cost=paid.total)

    def _episode_left(self) -> float | None:
        """Seconds left of the current episode's deadline (None: no episode deadline applies)."""
        elapsed = episode_elapsed()
        if elapsed is None or self.episode_timeout_s is None:
            return None
        return self.episode_timeout_s - elapsed

    def _stop_on_quota(self, e: BaseException, retry_after: float | None, error: str) -> None:
        """Raise ``ProviderQuotaError`` for a 429 that says the quota is spent, or for any answer
        whose ``Retry-After`` asks for a wait beyond this call's budget (``max_total_wait_s``, and
        the whole episode deadline): the cell stops and its episodes stay unlogged, to resume."""
        status = getattr(e, "status_code", None)
        # litellm keeps the provider's error code in ``body``, the direct transport in the message.
        spent = status == 429 and "insufficient_quota" in f"{error} {str(getattr(e, 'body', ''))[:2000]}".lower()
        budget = self.max_total_wait_s
        if self.episode_timeout_s is not None:
            budget = min(budget, self.episode_timeout_s)
        if not spent and (retry_after is None or retry_after <= budget):
            return
        if spent:
            why = "says the quota is spent"
        else:
            assert retry_after is not None
            if retry_after < RETRY_AFTER_CAP_S:
                until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time.time() + retry_after))
                wait = f"{retry_after:.0f} s (until {until})"
            else:
                wait = f"{RETRY_AFTER_CAP_S:.0f} s or more"
            what = "max_total_wait_s" if budget == self.max_total_wait_s else "episode_timeout_s"
            why = f"asks to wait {wait}, more than {what}={budget:g}"
        kind = "rate limit (HTTP 429)" if status == 429 else f"answer (HTTP {status})" if isinstance(status, int) else "answer"
        raise ProviderQuotaError(
            f"{self.model}: the provider's {kind} {why}; stopped the cell, "
            "re-run the same command later to resume it"
        )

    def _auth_line(self, e: BaseException) -> str:
        """One line for an authentication error, naming the key to set when none was given."""
        detail = f"{type(e).__name__}: {_message_of(e)}"
        if self._api_key:
            return detail
        var = _key_var(self.model)
        if var is None or os.environ.get(var):
            return detail
        head = "no API key" if _MISSING_KEY_RE.search(detail) or self._direct is None else "rejected (no API key given)"
        return f"AuthenticationError: {self.model}: {head}: set {var} or pass api_key ({detail})"

    def complete_batch(self, batch: Sequence[list[Message]]) -> list[Reply]:
        """Independent requests in parallel threads (the calls are I/O bound)."""
        if len(batch) <= 1:
            return [self.complete(m) for m in batch]
        with ThreadPoolExecutor(max_workers=min(len(batch), self.batch_concurrency)) as pool:
            # Each worker runs in a copy of this thread's context: the episode clock goes along.
            futures = [pool.submit(contextvars.copy_context().run, self.complete, m) for m in batch]
            return [f.result() for f in futures]

    def _call(
        self, wire: list[dict[str, Any]], budget_s: float, tools: list[dict[str, Any]] | None = None
    ) -> Any:
        """One attempt: a direct POST from this thread, or ``litellm.acompletion`` on the
        background loop, abandoned (connection closed) when the whole reply has not arrived
        within ``budget_s``."""
        if self._direct is not None:
            # Sent and read in this thread, on blocking sockets: no hop to the event loop and back.
            headers = simulation_headers(self._direct.url)
            body = self._direct_body(wire, tools)
            try:
                return self._direct.complete_blocking(body, headers, budget_s)
            except TimeoutError:
                raise _AttemptDeadline(
                    f"no complete reply within {budget_s:.1f} s (total deadline of one attempt)"
                ) from None
        kwargs = self._kwargs(wire, budget_s)
        if tools:
            kwargs["tools"] = tools
        _bound_litellm_bodies()
        coro = asyncio.wait_for(_with_body_limit(_litellm().acompletion(**kwargs), self.max_body_bytes), budget_s)
        future = asyncio.run_coroutine_threadsafe(coro, _event_loop())
        try:
            return future.result(timeout=budget_s + _CANCEL_GRACE_S)
        except TimeoutError:
            future.cancel()
            raise _AttemptDeadline(
                f"no complete reply within {budget_s:.1f} s (total deadline of one attempt)"
            ) from None

    def _direct_body(self, wire: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> bytes:
        """The request body the direct transport sends: what litellm sends for this model."""
        return request_body(self.model, wire, self._direct_params(tools))

    def _direct_params(self, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        if tools:
            params["tools"] = tools
        params.update(self.reasoning.params)
        params.update(self.extra_params)
        return params

    def _kwargs(self, wire: list[dict[str, Any]], budget_s: float) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            "timeout": budget_s,
            "num_retries": 0,  # our loop retries; the SDK's own retries would hide faults
            "max_retries": 0,
            "drop_params": True,  # models without reasoning_effort just ignore it
        }
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_tokens is not None:
            kwargs["max_tokens"] = self.max_tokens
        kwargs.update(self.reasoning.params)
        if self._send_base is not None:
            kwargs["api_base"] = self._send_base
        key = self._api_key
        if key is None and self.api_base is not None and self.model.startswith("openai/"):
            # A local OpenAI-compatible server needs no key, but the SDK insists on one.
            key = os.environ.get("OPENAI_API_KEY") or "no-key"
        if key is not None:
            kwargs["api_key"] = key
        kwargs.update(self.extra_params)
        return kwargs

    def _to_reply(self, response: Any) -> Reply:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise _RetryableResponse("response has no choices")
        choice = choices[0]
        msg = getattr(choice, "message", None)
        if msg is None:
            raise _RetryableResponse("response choice has no message")
        finish = getattr(choice, "finish_reason", None)
        text = getattr(msg, "content", None) or ""
        tool_calls = _tool_calls_of(msg)
        if finish == "content_filter":
            raise _ContentFiltered("the provider's content filter stopped the reply")
        if not text.strip() and not tool_calls and finish not in ("length",):
            # "length" with no text is a model that spent its budget thinking: not a fault to
            # retry; the env treats the empty reply as invalid and asks again.
            raise _RetryableResponse(f"empty reply (finish_reason={finish!r})")
        usage = _usage_of(response)
        if self.reasoning.mode == "off" and usage is not None and (usage.reasoning_tokens or 0) > 0:
            _warn_once(
                (self.model, "observed"),
                f"{self.model}: reasoning was requested off but the provider reported "
                f"{usage.reasoning_tokens} reasoning tokens (recorded per step)",
            )
        cost = _known_cost(self.model, self._cost(response, usage))
        return Reply(text=text, usage=usage, cost=cost, tool_calls=tool_calls)

    def _cost(self, response: Any, usage: Usage | None) -> float | None:
        if self.input_cost_per_token is not None or self.output_cost_per_token is not None:
            if usage is None or usage.prompt_tokens is None or usage.completion_tokens is None:
                return None
            return usage.prompt_tokens * (
                self.input_cost_per_token or 0.0
            ) + usage.completion_tokens * (self.output_cost_per_token or 0.0)
        if self._direct is not None:
            return None  # an endpoint of one's own has no price list: unknown unless given
        # litellm prices every response it returns; reuse that instead of pricing it twice.
        hidden = getattr(response, "_hidden_params", None) or {}
        if "response_cost" in hidden:
            cost = hidden["response_cost"]
            return float(cost) if cost is not None else None
        try:
            return float(_litellm().completion_cost(completion_response=response))
        except Exception:  # unknown model (ModelNotMappedError and friends): cost unknown
            return None

    # --- retry policy ---------------------------------------------------------------------------
    def _classify(self, e: BaseException) -> tuple[bool, float | None]:
        """(retryable, Retry-After seconds or None) for an exception raised by a call."""
        if isinstance(e, _ContentFiltered):
            return False, None
        if isinstance(e, _RetryableResponse):
            return True, None
        if _is_auth_error(e):
            return False, None
        name = type(e).__name__
        if name in ("ContextWindowExceededError", "ContentPolicyViolationError"):
            return False, None
        if "Error in response object" in _message_of(e):
            # litellm's words for an error object inside a 200 body: the direct transport hands
            # the same body over as a 502 (``openai_direct.error_in_body``), so both retry it.
            return True, None
        status = getattr(e, "status_code", None)
        if isinstance(status, int):
            if status in _RETRY_STATUS or status >= 500:
                return True, _retry_after(e)
            return False, None
        # No status: connection drops, timeouts, undecodable bodies. Programming errors on our
        # side would also land here; they are bounded by max_attempts and reported, not hidden.
        return True, None

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        with self._rng_lock:
            u = self._rng.random()
        if retry_after is not None:
            # Honour the server's wait, plus up to 10 % jitter so clients do not return in step.
            return retry_after * (1.0 + 0.1 * u)
        cap = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        return cap * (0.5 + 0.5 * u)  # "equal jitter": never below half the exponential step

    # --- secrets --------------------------------------------------------------------------------
    def scrub(self, text: str) -> str:
        """Remove the API key (and anything key-like) from a text meant for logs: the whole
        text is masked first, then cut to ``_MAX_ERROR_CHARS``."""
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return scrub_text(text, limit=_MAX_ERROR_CHARS)


_WARNED: set[tuple[str, str]] = set()
_WARNED_LOCK = threading.Lock()


def _warn_once(key: tuple[str, str], message: str) -> None:
    with _WARNED_LOCK:
        if key in _WARNED:
            return
        _WARNED.add(key)
    warnings.warn(message, UserWarning, stacklevel=3)


def _reasoning_request(
    model: str,
    api_base: str | None,
    max_tokens: int | None,
    reasoning: str | None,
    reasoning_effort: str | None,
    thinking: bool,
    thinking_off_effort: str | None,
) -> ReasoningRequest:
    """The reasoning parameters the constructor arguments ask for."""
    if reasoning is None:
        if not thinking:
            reasoning = "off"
        elif reasoning_effort is None:
            reasoning = "default"
        elif reasoning_effort == "low":
            reasoning = "low"
        else:  # an explicit effort: sent as it is
            return ReasoningRequest("effort", {"reasoning_effort": reasoning_effort})
    if reasoning == "off" and thinking_off_effort is not None:
        return ReasoningRequest(
            "off", {"reasoning_effort": thinking_off_effort}, disabled=None,
            note=f"thinking_off_effort={thinking_off_effort!r} set by the user",
        )
    return reasoning_request(model, reasoning, api_base=api_base, max_tokens=max_tokens)


TRANSPORTS = ("auto", "direct", "litellm")
_OPENAI_NAMES = re.compile(r"(?i)(gpt-|o\d|chatgpt-|text-|davinci|babbage|codex|computer-use)")


def _transport(transport: str, model: str, api_base: str | None) -> str:
    """The transport ``transport`` resolves to for this model ("direct" or "litellm")."""
    from countgym.errors import UserError

    if transport not in TRANSPORTS:
        raise UserError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
    direct_ok = model.startswith("openai/") and len(model) > len("openai/") and bool(api_base)
    if transport == "direct" and direct_endpoint(model, api_base) is None:
        others = ", ".join(f"{p}/" for p in PROVIDERS if p not in SELF_HOSTED)
        raise UserError(f"transport 'direct' needs an openai/<name> model and an api_base, or a model of an "
                        f"OpenAI-compatible provider ({others}), got {model!r}" + ("" if api_base else " without api_base"))
    if transport == "auto":
        # OpenAI's own model names behind an api_base (a proxy of OpenAI) keep litellm, which
        # knows their parameter rules (no temperature for o-series, max_completion_tokens) and prices.
        return "direct" if direct_ok and not _OPENAI_NAMES.match(model.split("/", 1)[1]) else "litellm"
    return transport


def _warn_if_not_disabled(model: str, req: ReasoningRequest) -> None:
    """Warn once per model when reasoning was asked off and is not known to be."""
    if req.mode == "off" and req.disabled is not True:
        what = "cannot be disabled" if req.disabled is False else "may not be disabled"
        _warn_once((model, "request"), f"{model}: reasoning {what}: {req.note} (recorded in the "
                   "episode's provider parameters)")


class _ContentFiltered(Exception):
    """The provider refused to answer (finish_reason content_filter)."""


_MISSING_KEY_PHRASES = ("missing credentials", "api_key client option must be set", "no api key",
                        "api key not found", "api_key is not set")


def missing_key_message(model: str, e: BaseException) -> str | None:
    """One line naming the API key to set, when ``e`` says the call had no key (else None).

    The client libraries report a missing key as a generic error (litellm: an
    ``InternalServerError``), which a retry policy would otherwise take as transient.
    """
    if not any(p in _message_of(e).lower() for p in _MISSING_KEY_PHRASES):
        return None
    env = HOSTED_KEY_VARS.get(provider_of(model), (None,))[0]
    where = f"set {env}" if env else "set the provider's API key variable"
    return f"AuthenticationError: no API key for {model!r}: {where} (or give the key as the agent option api_key)"


def _message_of(e: BaseException) -> str:
    msg = getattr(e, "message", None) or str(e) or type(e).__name__
    return " ".join(str(msg).split())


def _retry_after(e: BaseException) -> float | None:
    """Seconds from a ``retry-after-ms`` or ``Retry-After`` header on the error, if any."""
    headers: Any = None
    for attr in ("litellm_response_headers", "headers"):
        headers = getattr(e, attr, None)
        if headers:
            break
    if not headers:
        headers = getattr(getattr(e, "response", None), "headers", None)
    if not headers:
        return None
    try:
        lower = {str(k).lower(): str(v) for k, v in dict(headers).items()}
    except (TypeError, ValueError):
        return None
    if "retry-after-ms" in lower:
        ms = _seconds(lower["retry-after-ms"])
        if ms is not None:
            return min(ms / 1000.0, RETRY_AFTER_CAP_S)
    value = lower.get("retry-after")
    if value is None:
        return None
    seconds = _seconds(value)
    if seconds is None and len(value) <= 64:
        try:
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                seconds = max(0.0, float(email.utils.mktime_tz(parsed)) - time.time())
        except (ValueError, OverflowError, TypeError):
            seconds = None
    return None if seconds is None else min(seconds, RETRY_AFTER_CAP_S)


def _seconds(value: str) -> float | None:
    """A non-negative number of seconds from a header value (``inf`` and huge values kept, to be
    clamped by the caller); None for NaN, negatives and anything that is not a number."""
    try:
        x = float(value.strip()[:64])
    except (ValueError, OverflowError):
        return None
    return x if x >= 0 and not math.isnan(x) else None


def _is_auth_error(e: BaseException) -> bool:
    """An authentication or permission failure (401, 403, or no key given): never retried."""
    if type(e).__name__ in ("AuthenticationError", "PermissionDeniedError"):
        return True
    if getattr(e, "status_code", None) in (401, 403):
        return True
    return bool(_MISSING_KEY_RE.search(_message_of(e)[:2000]))


def _key_var(model: str) -> str | None:
    """The environment variable that holds the key for a model's provider (when known)."""
    return _KEY_VARS.get(model.split("/", 1)[0]) if "/" in model else None


_SESSION: dict[str, Any] = {}


def _bound_litellm_bodies() -> None:
    """Give litellm's OpenAI-compatible clients a bounded body reader (``litellm.aclient_session``)
    unless the user set a session of their own; one per process (a forked child makes its own).
    Each call's bound travels with its task (``BODY_LIMIT``, set by ``_with_body_limit``)."""
    litellm = _litellm()
    current = getattr(litellm, "aclient_session", None)
    mine = _SESSION.get("client")
    if current is not None and current is not mine:
        return  # the user's own session: left alone
    if mine is not None and _SESSION.get("pid") == os.getpid():
        return
    import httpx

    try:  # litellm's own certificate settings (SSL_VERIFY, SSL_CERT_FILE, litellm.ssl_verify)
        from litellm.llms.custom_httpx.http_handler import get_ssl_configuration

        verify: Any = get_ssl_configuration()
    except Exception:  # noqa: BLE001 - another litellm version: httpx's defaults
        verify = True
    inner = proxy_routing_transport(verify=verify)  # the environment's proxies, as litellm's own client
    client = httpx.AsyncClient(transport=bounded_transport(inner), timeout=httpx.Timeout(None))
    _SESSION.update(client=client, pid=os.getpid())
    litellm.aclient_session = client


async def _with_body_limit(coro: Any, limit: int) -> Any:
    """Await ``coro`` with ``BODY_LIMIT`` set for the HTTP reads it makes (its own task's context)."""
    BODY_LIMIT.set(limit)
    return await coro


def _as_data(obj: Any) -> Any:
    """A parsed JSON object given as an attribute object, as its fields (for ``json.dumps``)."""
    fields = getattr(obj, "__dict__", None)
    if not isinstance(fields, dict):
        raise TypeError(f"{type(obj).__name__} is not JSON data")
    return {k: v for k, v in fields.items() if not k.startswith("_")}


def _tool_calls_of(msg: Any) -> list[dict[str, Any]] | None:
    """The message's native tool calls in OpenAI form (plain dicts), or None."""
    calls = getattr(msg, "tool_calls", None) or []
    if not isinstance(calls, list | tuple):
        return None
    out: list[dict[str, Any]] = []
    room = REPLY_LIMIT
    for c in calls[:MAX_TOOL_CALLS]:
        if room <= 0:
            break
        fn = getattr(c, "function", None)
        if fn is None and isinstance(c, dict):
            fn = c.get("function")
        get = (lambda o, k: o.get(k)) if isinstance(fn, dict) else getattr
        args = get(fn, "arguments") if fn is not None else None
        try:
            # Some providers send the arguments as a JSON object (attribute objects once parsed).
            text = args if isinstance(args, str) else json.dumps(args or {}, default=_as_data)
        except (TypeError, ValueError, RecursionError):
            text = ""
        out.append({
            "id": str((c.get("id") if isinstance(c, dict) else getattr(c, "id", None)) or f"call_{len(out)}")[:MAX_TOOL_NAME_CHARS],
            "type": "function",
            "function": {
                "name": (str(get(fn, "name") or "") if fn is not None else "")[:MAX_TOOL_NAME_CHARS],
                # Capped like a text reply; cut arguments are no longer JSON, so the call is invalid.
                "arguments": text[:room],
            },
        })
        room -= len(text)
    return out or None


def _usage_of(response: Any) -> Usage | None:
    """The reply's token usage; a count that is not a whole number from 0 to 2**63 - 1 is
    unknown (null), with one warning per model: the paid reply is kept either way."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return None
    details = getattr(usage, "completion_tokens_details", None)
    reasoning = getattr(details, "reasoning_tokens", None) if details is not None else None
    counts = {
        "prompt_tokens": getattr(usage, "prompt_tokens", None),
        "completion_tokens": getattr(usage, "completion_tokens", None),
        "reasoning_tokens": reasoning,
    }
    bad = {k: v for k, v in counts.items() if v is not None and not _is_count(v)}
    if bad:
        model = str(getattr(response, "model", "") or "the provider")
        shown = ", ".join(f"{k}={str(v)[:30]}" for k, v in bad.items())
        _warn_once((model, "usage"), f"{model}: refused the token usage the provider reported ({shown}): "
                   "not a count from 0 to 2**63 - 1; recorded as unknown (the call's cost is then unknown)")
    return Usage(**{k: (None if k in bad else v) for k, v in counts.items()})


def _is_count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 2**63 - 1


def _known_cost(model: str, cost: Any) -> float | None:
    """A call's cost in USD, or None (unknown) where it is not a finite number >= 0 (one warning
    per model: a negative or NaN cost would otherwise lower the spend the cap counts)."""
    if cost is None:
        return None
    try:
        value = float(cost)
    except (TypeError, ValueError, OverflowError):
        value = math.nan
    if math.isfinite(value) and value >= 0:
        return value
    _warn_once((model, "cost"), f"{model}: refused a call cost of {str(cost)[:30]} (not a finite amount "
               ">= 0); recorded as unknown")
    return None


CHECKED_OPTIONS = (
    "timeout_s", "episode_timeout_s", "max_total_wait_s", "backoff_base_s", "backoff_max_s",
    "input_cost_per_token", "output_cost_per_token", "max_attempts", "max_tokens", "batch_concurrency",
)
"""Backend options whose values ``_check_options`` checks."""


def _check_options(**options: Any) -> None:
    """A ``UserError`` (one line, before any call) for a backend option outside its range:
    durations and prices must be finite numbers (durations > 0 or >= 0), counts whole numbers >= 1."""
    from countgym.errors import UserError

    def number(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)

    rules = {
        "timeout_s": (False, lambda v: number(v) and v > 0, "a number of seconds > 0"),
        "episode_timeout_s": (True, lambda v: number(v) and v > 0, "a number of seconds > 0 (or null)"),
        "max_total_wait_s": (False, lambda v: number(v) and v >= 0, "a number of seconds >= 0"),
        "backoff_base_s": (False, lambda v: number(v) and v >= 0, "a number of seconds >= 0"),
        "backoff_max_s": (False, lambda v: number(v) and v >= 0, "a number of seconds >= 0"),
        "input_cost_per_token": (True, lambda v: number(v) and v >= 0, "a price in USD >= 0 (or null)"),
        "output_cost_per_token": (True, lambda v: number(v) and v >= 0, "a price in USD >= 0 (or null)"),
        "max_attempts": (False, lambda v: _is_count(v) and 1 <= v <= 1000, "a whole number from 1 to 1000"),
        "max_tokens": (True, lambda v: _is_count(v) and v >= 1, "a whole number >= 1 (or null)"),
        "batch_concurrency": (False, lambda v: _is_count(v) and 1 <= v <= 1024, "a whole number from 1 to 1024"),
        "url_basic_auth": (False, lambda v: isinstance(v, bool), "true or false"),
        "max_body_bytes": (False, lambda v: _is_count(v) and v >= 1024, "a whole number of bytes >= 1024"),
    }
    for name, value in options.items():
        nullable, ok, what = rules[name]
        if (value is None and not nullable) or (value is not None and not ok(value)):
            raise UserError(f"backend option {name} must be {what}, got {value!r}")


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages in OpenAI wire format: images as base64 PNG data URLs.

    System and assistant turns are sent as plain strings (some providers reject part lists
    there); user turns keep their parts in order. Native tool calling: an assistant turn keeps
    its ``tool_calls``; a ``tool`` turn is sent as its text, and its images follow in a user
    turn (OpenAI accepts only text in tool results).
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m["role"]
        content = m.get("content")
        if role == "tool":
            tool_parts: list[dict[str, Any]] = (
                content if isinstance(content, list) else [{"type": "text", "text": str(content or "")}]
            )
            text = "\n".join(p["text"] for p in tool_parts if p.get("type") == "text")
            out.append({"role": "tool", "tool_call_id": m.get("tool_call_id", ""), "content": text})
            images = [
                {"type": "image_url", "image_url": {"url": png_data_url(p["image"])}}
                for p in tool_parts
                if p.get("type") == "image"
            ]
            if images:
                out.append({"role": "user", "content": images})
            continue
        if role == "assistant" and m.get("tool_calls"):
            text = content if isinstance(content, str) else "\n".join(
                p["text"] for p in content or [] if p.get("type") == "text"
            )
            out.append({"role": "assistant", "content": text or None, "tool_calls": m["tool_calls"]})
            continue
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        if role in ("system", "assistant"):
            text = "\n".join(p["text"] for p in content or [] if p.get("type") == "text")
            out.append({"role": role, "content": text})
            continue
        parts: list[dict[str, Any]] = []
        for p in content or []:
            kind = p.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": p["text"]})
            elif kind == "image":
                parts.append({"type": "image_url", "image_url": {"url": png_data_url(p["image"])}})
            else:
                raise ValueError(f"unknown content part type {kind!r}")
        out.append({"role": role, "content": parts})
    return out
