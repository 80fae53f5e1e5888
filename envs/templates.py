"""Every protocol text of *Give the Model a Finger* (Appendix B), verbatim, in one place.

Arms and the environment select among these; nothing else in countgym writes prompt text for
the image study. Placeholders use ``str.format`` names from the paper: ``{obj}``, ``{obj_sing}``,
``{tool_lines}``, ``{T}``, ``{a}``, ``{b}``, ``{left}``.

Transcription notes: the paper typesets the quotes around ``ANSWER: <integer>`` as typographic
quotes and hyphenates two words across line breaks ("full- image", "bottom- right"); the prompts
here use plain ASCII quotes and the unbroken words. Harness notices that the paper describes but
does not quote (dropped points, tag-1 extras) are marked ``HARNESS_*`` below.
"""

from __future__ import annotations

import hashlib

# --- single-call arms -------------------------------------------------------------------------
DIRECT = "How many {obj} are in this image? Reply with only one line of the form 'ANSWER: <integer>'."

COT = (
    "Count the {obj} in this image carefully. Think step by step (for example, describe where each "
    "one is or count region by region), then finish with a final line of the form 'ANSWER: <integer>'."
)

LIST = (
    "Locate every {obj_sing} in this image. Coordinates use a normalized frame: x and y are integers "
    "in [0,1000], where (0,0) is the top-left and (1000,1000) the bottom-right corner. Output a JSON "
    'object on one line: {{"points": [[x,y], [x,y], ...]}} with exactly one point per {obj_sing}, '
    "placed at its center. Then finish with a final line of the form 'ANSWER: <integer>' giving the "
    "number of {obj}."
)

# --- the tool loop ----------------------------------------------------------------------------
SYSTEM = (
    "You are counting {obj} in an image. Coordinates use a NORMALIZED frame: x and y are integers in "
    "[0,1000]; (0,0) is the top-left corner and (1000,1000) the bottom-right corner of the ORIGINAL "
    "image; enlarged crops keep this same frame. In every reply, think briefly and then output "
    "EXACTLY ONE JSON action as the last line (no code fences). Available actions:\n{tool_lines}\n"
    "Procedure: tag the {obj} you see; inspect the returned image; if a tag is off any {obj_sing} or "
    "two tags share one {obj_sing}, say so and do not count those; tag ONLY the {obj} that are still "
    "untagged; then answer. You have at most {T} tool calls before you must answer."
)

TOOL_LINES: dict[str, str] = {
    "tag": (
        '{{"tool":"tag","points":[[x,y],...]}} draw numbered tags (numbering continues from the last '
        "tag) at these points on the working image; you will see the result. Tag each {obj_sing} "
        "exactly once, at its center. Never re-tag an object that already has a tag. To start over, "
        'add "mode":"replace" (all previous tags are removed and numbering restarts at 1).'
    ),
    "crop": (
        '{{"tool":"crop","box":[x1,y1,x2,y2]}} see an enlarged view of this region of the working '
        "image (existing tags stay visible; coordinates stay in the full-image frame)."
    ),
    "erase": (
        '{{"tool":"erase","points":[[x,y],...]}} grey out already-counted objects at these points so '
        "they cannot be counted twice."
    ),
    "grid": (
        '{{"tool":"grid","on":true}} overlay a light coordinate grid with 0-1000 tick labels to help '
        "you place tags precisely."
    ),
    "answer": (
        '{{"tool":"answer","count":N}} final answer: N = number of distinct {obj} in the image '
        "(normally the number of correctly placed tags)."
    ),
}

FIRST_USER = "Count the {obj} in this image."

ORDER: dict[str, str] = {
    "reading": (
        "Tag the {obj} strictly in reading order: start at the top-left, sweep left to right, then "
        "move down and sweep the next band left to right, until you reach the bottom-right."
    ),
    "reverse": (
        "Tag the {obj} strictly in reverse reading order: start at the bottom-right, sweep right to "
        "left, then move up and sweep the next band right to left, until you reach the top-left."
    ),
}

ONE_POINT = (
    "Tag exactly ONE {obj_sing} per tag call: output a single [x,y] point, look at the returned "
    "image, then tag the next untagged {obj_sing} with the next call, until every {obj_sing} is "
    "tagged; then answer."
)

VERIFY = (
    "Tags {a}..{b} are now drawn (red dot = exact point, numbered box beside it). Check the image: "
    "(a) is each tag on a distinct {obj_sing}? (b) is any {obj_sing} still untagged? (c) do two tags "
    "share one {obj_sing}? Then tag ONLY the missing ones, use another tool, or answer with the "
    "number of distinct correctly tagged {obj}. Tool calls left: {left}."
)

NO_VERIFY = "Tags {a}..{b} are now drawn. Continue. Tool calls left: {left}."

CROP_DONE = (
    "Enlarged view of the requested region (coordinates still refer to the full image). Continue. "
    "Tool calls left: {left}."
)
ERASE_DONE = "The requested points are greyed out on the working image. Continue. Tool calls left: {left}."
GRID_DONE = "Grid overlay enabled on the working image. Continue. Tool calls left: {left}."

INVALID = (
    "Your last line was not a valid JSON action. Reply with exactly one JSON action as described. "
    "Tool calls left: {left}."
)

BUDGET_EXHAUSTED = 'You have used all tool calls. Reply now with {{"tool":"answer","count":N}} only.'

TILE = (
    "This is an enlarged crop of a larger image; it may contain zero {obj}. First state how many "
    "{obj} have their center inside THIS crop (it is common for a crop to contain none). Then output "
    'one line {{"points": [[x,y], ...]}} with exactly one point per {obj_sing} at its center, using a '
    "normalized frame of THIS crop (x and y integers in [0,1000], (0,0) top-left, (1000,1000) "
    'bottom-right); output {{"points": []}} if there are none. Finish with a final line '
    "'ANSWER: <integer>'."
)

OMITTED_IMAGE = "[image shown earlier omitted]"

# --- harness notices (described in Appendix C, not quoted there) -------------------------------
HARNESS_GRID_OFF = "Grid overlay disabled on the working image. Continue. Tool calls left: {left}."
HARNESS_NO_TAGS = "No tags were drawn. Continue. Tool calls left: {left}."
HARNESS_DROPPED_RANGE = "{k} point(s) outside the [0,1000] frame were not drawn."
HARNESS_DROPPED_CALL_CAP = "Only the first {cap} points of a tag call are drawn; {k} point(s) were not drawn."
HARNESS_DROPPED_TRAJ_CAP = "At most {cap} tags are drawn per trajectory; {k} point(s) were not drawn."
HARNESS_DROPPED_ONE_POINT = "Only ONE point per tag call is allowed; {k} extra point(s) were discarded."


def tool_lines(tools: tuple[str, ...] | list[str]) -> str:
    """The tool lines of the enabled tools, in the paper's order, ``answer`` always last."""
    order = [t for t in ("tag", "crop", "erase", "grid") if t in tools] + ["answer"]
    return "\n".join(TOOL_LINES[t] for t in order)


def system_prompt(obj: str, obj_sing: str, tools: tuple[str, ...], budget: int) -> str:
    """The tool-loop system prompt with its tool lines filled in."""
    lines = tool_lines(tools).format(obj=obj, obj_sing=obj_sing)
    return SYSTEM.format(obj=obj, obj_sing=obj_sing, tool_lines=lines, T=budget)


def first_user_message(
    obj: str, obj_sing: str, *, order: str | None = None, one_point_per_call: bool = False
) -> str:
    """First user message of the tool loop, with the order or tag-1 sentence appended."""
    parts = [FIRST_USER.format(obj=obj)]
    if order is not None:
        parts.append(ORDER[order].format(obj=obj))
    if one_point_per_call:
        parts.append(ONE_POINT.format(obj_sing=obj_sing))
    return " ".join(parts)


def _all_texts() -> list[str]:
    names = sorted(k for k, v in globals().items() if k.isupper() and isinstance(v, (str, dict)))
    out: list[str] = []
    for k in names:
        v = globals()[k]
        out.append(k + "=" + (repr(sorted(v.items())) if isinstance(v, dict) else v))
    return out


TEMPLATE_HASH: str = hashlib.sha256("\n".join(_all_texts()).encode()).hexdigest()[:16]
"""Hash of every template here; written into each episode log for provenance."""
