"""Typed actions of the image tool protocol and the ``Reply`` wrapper a model policy returns.

The environment accepts three forms in ``step``: the model's raw reply text, a JSON string, or
one of these typed actions (a pydantic discriminated union on ``tool``). A ``Reply`` carries a
model's raw text plus the call's usage, cost and latency, so the environment can log them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from countgym.logs import Usage

TOOLS: tuple[str, ...] = ("tag", "crop", "erase", "grid", "answer")


def canonical_tools(tools: Any) -> list[str]:
    """A tool list as the environment enables and logs it: ``TOOLS`` order, ``answer`` always
    on (``["grid", "tag"]`` -> ``["tag", "grid", "answer"]``). Unknown names are kept, last."""
    names = tools.replace(",", " ").split() if isinstance(tools, str) else list(tools)
    known = [t for t in TOOLS if t in names or t == "answer"]
    return known + [t for t in names if t not in TOOLS]
NormPoint = tuple[float, float]


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Tag(_Action):
    """Draw numbered tags at normalised points; ``mode="replace"`` clears earlier tags first."""

    tool: Literal["tag"] = "tag"
    points: list[NormPoint]
    mode: Literal["append", "replace"] = "append"


class Crop(_Action):
    """Return an enlarged view of a normalised box of the working image."""

    tool: Literal["crop"] = "crop"
    box: tuple[float, float, float, float]


class Erase(_Action):
    """Grey out discs at normalised points, or a normalised box."""

    tool: Literal["erase"] = "erase"
    points: list[NormPoint] | None = None
    box: tuple[float, float, float, float] | None = None


class Grid(_Action):
    """Switch the coordinate grid overlay on or off."""

    tool: Literal["grid"] = "grid"
    on: bool = True


class Answer(_Action):
    """The final answer: the announced count."""

    tool: Literal["answer"] = "answer"
    count: int


Action = Annotated[Tag | Crop | Erase | Grid | Answer, Field(discriminator="tool")]
ACTION_ADAPTER: TypeAdapter[Any] = TypeAdapter(Action)


class Reply(BaseModel):
    """A model's raw reply with the call's accounting; what model-backed policies return."""

    text: str
    usage: Usage | None = None
    cost: float | None = None
    latency_s: float | None = None
    error: str | None = None
    """Set when the model call failed unrecoverably; the episode then ends with ``end="error"``."""
    action: Tag | Crop | Erase | Grid | Answer | None = None
    """A typed action the policy derived from ``text`` itself (``list`` and ``tiles`` arms);
    when set, the environment applies it instead of parsing ``text`` and logs both."""
    tool_calls: list[dict[str, Any]] | None = None
    """Native tool calls of the reply, OpenAI form (``{"id", "type": "function", "function":
    {"name", "arguments"}}``); the environment's ``protocol="native"`` executes the first."""


def action_to_dict(action: Any) -> dict[str, Any]:
    """The JSON form of a typed action (as logged)."""
    return action.model_dump(mode="json", exclude_none=True)
