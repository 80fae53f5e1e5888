"""The native tool-calling protocol: the image tool set as OpenAI-style function definitions.

*Give the Model a Finger* (Appendix B) specifies a JSON-in-text protocol: the model ends every
reply with one JSON action line. That protocol stays the default and stays verbatim
(``countgym.envs.templates``). Many serving stacks and RL trainers instead pass tools as
``tools=[{"type": "function", ...}]`` and receive ``tool_calls``; ``protocol="native"`` offers
the same tools that way. Everything the paper's text says about a tool is kept: each function's
description is the tool line of Appendix B without its JSON example, and the system prompt is
the paper's with its one JSON-output sentence and the tool lines replaced (the functions carry
them). The replies map onto the same actions, so the episode log and the audit are the same.

These texts are harness text, not the paper's; ``NATIVE_TEMPLATE_HASH`` covers them together
with the paper's templates.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from countgym.envs import templates as T

JSON_SENTENCE = (
    "In every reply, think briefly and then output EXACTLY ONE JSON action as the last line (no "
    "code fences). Available actions:\n{tool_lines}\n"
)
NATIVE_SENTENCE = (
    "In every reply, think briefly and then call EXACTLY ONE of the provided tools (a native tool "
    "call, not JSON in the text). Available tools: {tool_names}.\n"
)
if JSON_SENTENCE not in T.SYSTEM:  # pragma: no cover - guards the derivation below
    raise RuntimeError("templates.SYSTEM changed: update JSON_SENTENCE")
NATIVE_SYSTEM = T.SYSTEM.replace(JSON_SENTENCE, NATIVE_SENTENCE)

NATIVE_INVALID = (
    "Your reply did not contain a valid tool call. Call exactly one tool as described. "
    "Tool calls left: {left}."
)
NATIVE_BUDGET_EXHAUSTED = "You have used all tool calls. Call answer with the count N now, and nothing else."
NATIVE_EXTRA_CALL = "Not executed: only one tool call per reply is carried out."
NATIVE_IMAGE_NOTE = "The working image returned by the tool call above."

_POINTS = {
    "type": "array",
    "items": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2},
    "description": "[x, y] points in the normalized [0,1000] frame of the original image",
}
_BOX = {
    "type": "array",
    "items": {"type": "integer"},
    "minItems": 4,
    "maxItems": 4,
    "description": "[x1, y1, x2, y2] in the normalized [0,1000] frame of the original image",
}
PARAMETERS: dict[str, dict[str, Any]] = {
    "tag": {
        "type": "object",
        "properties": {"points": _POINTS, "mode": {"type": "string", "enum": ["append", "replace"]}},
        "required": ["points"],
    },
    "crop": {"type": "object", "properties": {"box": _BOX}, "required": ["box"]},
    "erase": {"type": "object", "properties": {"points": _POINTS, "box": _BOX}},
    "grid": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]},
    "answer": {"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]},
}


def _description(tool: str, obj: str, obj_sing: str) -> str:
    """The paper's tool line without its leading JSON example."""
    line = T.TOOL_LINES[tool].format(obj=obj, obj_sing=obj_sing)
    head, sep, rest = line.partition("} ")
    return rest if sep else line


def enabled(tools: tuple[str, ...] | list[str]) -> list[str]:
    """Enabled tools in the paper's order, ``answer`` always last."""
    return [t for t in ("tag", "crop", "erase", "grid") if t in tools] + ["answer"]


def tool_schema(tools: tuple[str, ...] | list[str], obj: str, obj_sing: str) -> list[dict[str, Any]]:
    """The ``tools=[...]`` list (OpenAI function definitions) for the enabled tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": t,
                "description": _description(t, obj, obj_sing),
                "parameters": PARAMETERS[t],
            },
        }
        for t in enabled(tools)
    ]


def system_prompt(obj: str, obj_sing: str, tools: tuple[str, ...], budget: int) -> str:
    """The tool-loop system prompt of the native protocol."""
    text = NATIVE_SYSTEM.replace("{tool_names}", ", ".join(enabled(tools)))
    return text.format(obj=obj, obj_sing=obj_sing, T=budget)


def call_to_action(call: Any) -> dict[str, Any] | str:
    """One native tool call (OpenAI form) as the JSON-protocol action object, or a string saying
    why it cannot be one. Never raises on model output.

    ``arguments`` is read as the JSON text the API specifies, or as the JSON object some
    providers send instead (also as attribute objects), or as JSON text that encodes that text
    once more; a flat call (``{"name", "arguments"}`` without ``function``) is read too."""
    try:
        call = _plain(call)
        fn = call.get("function") if isinstance(call, dict) else None
        if fn is None and isinstance(call, dict) and "name" in call:
            fn = call
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            return "tool call without a function name"
        args = fn.get("arguments") if isinstance(fn, dict) else None
        for _ in range(2):  # JSON text, or JSON text of JSON text
            if isinstance(args, str | bytes):
                args = json.loads(args) if args.strip() else {}
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return f"arguments of {name!r} are not a JSON object"
        return {**args, "tool": name}
    except (ValueError, TypeError, AttributeError, RecursionError) as e:
        return f"arguments are not valid JSON ({type(e).__name__})"


def _plain(obj: Any, depth: int = 0) -> Any:
    """A tool call given as attribute objects (pydantic models, namespaces) as plain data."""
    if depth > 8 or isinstance(obj, str | bytes | int | float | bool | type(None)):
        return obj
    if isinstance(obj, list | tuple):
        return [_plain(v, depth + 1) for v in obj]
    if isinstance(obj, dict):
        return {k: _plain(v, depth + 1) for k, v in obj.items()}
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return _plain(dump(), depth + 1)
    fields = getattr(obj, "__dict__", None)
    if isinstance(fields, dict):
        return {k: _plain(v, depth + 1) for k, v in fields.items() if not k.startswith("_")}
    return obj


def _hash() -> str:
    texts = [T.TEMPLATE_HASH, NATIVE_SYSTEM, NATIVE_INVALID, NATIVE_BUDGET_EXHAUSTED, NATIVE_EXTRA_CALL,
             NATIVE_IMAGE_NOTE, json.dumps(PARAMETERS, sort_keys=True)]
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]


NATIVE_TEMPLATE_HASH: str = _hash()
"""Hash of the native protocol's texts and schemas (and the paper's templates)."""
