"""The episode log: one JSON record per finished episode, the contract between running and analysis.

Records are versioned pydantic models. Writing appends one whole line per episode with a single
``write`` on an ``O_APPEND`` descriptor followed by ``fsync``; a process killed mid-write can
leave at most a truncated last line, which readers skip (with a warning) and ``LogWriter``
cuts off before appending again, so a resumed run never duplicates or corrupts a record.

Everything a model writes reaches the log, so both directions treat it as untrusted:

- writing never fails on text: a lone surrogate (``"\\ud800"``, which UTF-8 cannot encode) is
  stored as its JSON escape and reads back as the same string; a record that still cannot be
  serialised is logged as an ``end="error"`` record instead of being lost;
- reading never fails on a line: invalid JSON, numbers beyond Python's digit limit, nesting
  beyond the parser's depth, non-finite coordinates and integers outside the 64-bit range make
  that one line invalid (reported with file and line, then skipped); an ``answer`` outside the
  64-bit range (old logs kept whatever a model wrote) reads as an invalid answer.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError, model_validator
from pydantic_core import PydanticSerializationError, SchemaValidator

from countgym.secrets import (
    is_secret_name,
    known_secrets,
    may_hold_secret,
    redact_url,
    register_secret,
    register_url_secrets,
    scrub_data,
)

SCHEMA_VERSION: Literal[3] = 3

INT_MIN, INT_MAX = -(2**63), 2**63 - 1
"""Every integer in a record fits a signed 64-bit column (the audit's tables use int64)."""

LogInt = Annotated[int, Field(ge=INT_MIN, le=INT_MAX)]
Point = tuple[FiniteFloat, FiniteFloat]
EndReason = Literal["answer", "budget", "invalid", "error", "truncated"]
ExtractedBy = Literal["rule", "parser", "judge", "typed", "none"]


def utcnow() -> str:
    """Current UTC time as an ISO-8601 string."""
    return iso_time(datetime.now(UTC))


def iso_time(moment: datetime) -> str:
    """``moment`` as the ISO-8601 string records carry (milliseconds, with its offset)."""
    return moment.isoformat(timespec="milliseconds")


def redact(options: dict[str, Any]) -> dict[str, Any]:
    """A copy of an option dict with credentials replaced by ``"<redacted>"`` (recursively).

    Values under a credential's name are replaced (and remembered, so the same value is
    scrubbed wherever else it appears); every other string has its URL userinfo and any known
    secret masked (``api_base="http://user:KEY@host/v1"`` becomes ``http://***@host/v1``).
    """
    register_option_secrets(options)
    return scrub_data(_redact_names(options))


def register_option_secrets(options: Any) -> None:
    """Remember every credential-named value and every URL userinfo in an option dict."""
    if isinstance(options, dict):
        for k, v in options.items():
            if is_secret_name(k):
                register_secret(v)
            else:
                register_option_secrets(v)
    elif isinstance(options, list | tuple):
        for v in options:
            register_option_secrets(v)
    elif isinstance(options, str):
        register_url_secrets(options)


def identity_options(options: dict[str, Any]) -> dict[str, Any]:
    """Options as they identify a cell: credentials reduced to ``"<redacted>"`` and URL userinfo
    to ``***``, so that changing a key neither starts a cell afresh nor is written in its name.

    Deterministic (no environment lookup), so a cell's identity is the same in every process.
    """
    return _map_strings(_redact_names(options), redact_url)


def _map_strings(obj: Any, fn: Any) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_strings(v, fn) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(_map_strings(v, fn) for v in obj)
    return obj


def _redact_names(options: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in options.items():
        if is_secret_name(k):
            out[k] = "<redacted>"
        elif isinstance(v, dict):
            out[k] = _redact_names(v)
        else:
            out[k] = v
    return out


class Usage(BaseModel):
    """Token usage of one model call; any field may be unknown (null)."""

    prompt_tokens: LogInt | None = None
    completion_tokens: LogInt | None = None
    reasoning_tokens: LogInt | None = None


class StepRecord(BaseModel):
    """One environment step: the reply, what the parser made of it and the resulting state change.

    The state deltas (``tags_added``, ``tags_cleared``, ``erased_added``, ``grid``,
    ``perturbation``) are enough to rebuild the episode state after any step, so any
    working image can be re-rendered exactly (``countgym replay``).
    """

    model_config = ConfigDict(extra="forbid")

    index: LogInt
    """0-based step number within the episode."""
    reply: str | None = None
    """The raw reply text (null for typed actions)."""
    tool_calls: list[dict[str, Any]] | None = None
    """The reply's native tool calls (``protocol="native"``, OpenAI form), else null."""
    action: dict[str, Any] | None = None
    """The parsed action as a JSON object, or null when the reply did not parse."""
    parse_error: str | None = None
    """Why the reply was rejected (invalid reply), else null."""
    reply_chars: int | None = None
    """Length of the whole reply when it was longer than the stored part (``reply`` then holds
    its last ``REPLY_LIMIT`` characters, the part the environment parsed); null otherwise."""
    reply_sha256: str | None = None
    """SHA-256 of the whole reply (UTF-8) when it was cut, else null."""
    message: str = ""
    """The environment's message returned to the policy after this step."""
    tags_added: list[Point] = Field(default_factory=list)
    """Tags drawn by this step, pixel coordinates of the working image, in order."""
    tags_dropped: LogInt = 0
    """Points of this step not drawn (out of range, per-call or per-trajectory cap, tag-1)."""
    tags_cleared: bool = False
    """True when this step cleared all earlier tags (``mode: replace``)."""
    erased_added: list[dict[str, Any]] = Field(default_factory=list)
    """Erased regions added: ``{"kind": "disc", "xy": [x, y], "r": r}`` or ``{"kind": "box", "xyxy": [...]}``."""
    grid: bool | None = None
    """New grid flag when this step changed it."""
    crop_box: tuple[float, float, float, float] | None = None
    """Pixel box of the crop view returned by this step, when the observation is a crop."""
    perturbation: dict[str, Any] | None = None
    """Harness perturbation applied after this step: ``{"kind": "remove", "index": i}`` or ``{"kind": "add", "xy": [x, y]}``."""
    calls_left: LogInt = 0
    """Tool calls left after this step."""
    usage: Usage | None = None
    """Token usage of the model call that produced the reply."""
    cost: float | None = None
    """Cost in USD of that call, null when unknown."""
    latency_s: float | None = None
    """Wall time of that call in seconds."""


class ArmSpec(BaseModel):
    """The arm that produced an episode: its name and its full option dictionary."""

    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    defaults: dict[str, Any] | None = None
    """The environment options of the arm's reference cell, as logged: a built-in arm's own
    defaults (no ablation, its own tools and budget), a plug-in's environment defaults. Labels
    name every cell against it. Optional: null in logs written before it was recorded."""


class Truth(BaseModel):
    """Ground truth, written after the episode ended."""

    n: LogInt


class EpisodeRecord(BaseModel):
    """One finished episode (schema version 3).

    Version history: 3 added the ``end`` value ``truncated`` (an episode a wrapper cut short,
    such as Gymnasium's ``TimeLimit``); 2 added the optional fields ``env``, ``extracted_by``,
    ``arm.defaults`` and, per step, ``reply_chars``, ``reply_sha256`` and ``tool_calls``. Older
    records read unchanged (every added field defaults to null, every old ``end`` value is still
    one) and are migrated to 3 on read; a countgym that reads only version 2 skips a version-3
    line with a message to upgrade instead of misreading it."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[3] = SCHEMA_VERSION
    """Log format version; older versions are migrated on read."""
    episode_id: str
    """Unique id: ``{cell}/{stimulus_id}/r{repeat}``."""
    stimulus_id: str
    stimulus_hash: str | None = None
    """SHA-256 of the stimulus media the episode saw."""
    dataset: str
    """Dataset folder or battery name."""
    env: str | None = None
    """Registered environment id the episode ran in (``countgym/CounterCount-v0``); None in
    logs written before cells named their environment."""
    arm: ArmSpec
    env_options: dict[str, Any] = Field(default_factory=dict)
    """The environment options (tools, budget, verify, numbered, order, perturb, ...)."""
    model: str
    """Model id, or the scripted policy's name."""
    seed: LogInt
    repeat: LogInt = 0
    image_size: tuple[LogInt, LogInt] | None = None
    """(width, height) of the image the policy saw at the start (after resizing)."""
    stimulus_size: tuple[LogInt, LogInt] | None = None
    """(width, height) of the stored stimulus image (ground-truth point frame)."""
    steps: list[StepRecord] = Field(default_factory=list)
    tags: list[Point] = Field(default_factory=list)
    """Final ordered tags, pixel coordinates of the working image."""
    answer: LogInt | None = None
    """The announced count (null when none)."""
    end: EndReason
    """How the episode ended: ``answer``, ``budget`` (the tag count announced), ``invalid``
    (no count), ``error`` (a failed model call), ``truncated`` (cut short by a wrapper such as
    ``TimeLimit`` before the environment ended it; no count)."""
    error: str | None = None
    extracted_by: ExtractedBy | None = None
    """How the answer was read from a free-text reply (single-step tasks): ``rule`` (the
    environment's rules), ``parser`` (the audit's model parser), ``judge`` (the CounterCount
    judge), ``typed`` (a typed action), ``none`` (no count); null when not applicable."""
    truth: Truth | None = None
    simulated: dict[str, Any] | None = None
    """Set when a simulated model answered (``--simulate``): ``{"profile": {...}, "source": ...}``
    with the profile keys in force for this model and the profile file name (or ``built-in``)."""
    countgym_version: str
    template_hash: str
    started_at: str
    finished_at: str

    @model_validator(mode="before")
    @classmethod
    def _migrate(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if data.get("schema_version") in (1, 2):
                # Versions 2 and 3 only added optional fields and an ``end`` value: an older
                # record is a version-3 one.
                data = {**data, "schema_version": SCHEMA_VERSION}
            data = _answer_in_range(data)
        return data


def _answer_in_range(data: dict[str, Any]) -> dict[str, Any]:
    """An ``answer`` outside the 64-bit range (old logs kept any number a model wrote) is read
    as no answer: the episode counts as an invalid reply, and ``error`` says why."""
    answer = data.get("answer")
    if not isinstance(answer, int) or isinstance(answer, bool) or INT_MIN <= answer <= INT_MAX:
        return data
    data = dict(data)
    data["answer"] = None
    if data.get("end") == "answer":
        data["end"] = "invalid"
    if not data.get("error"):
        data["error"] = "answer outside the 64-bit integer range: not a count"
    return data


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogates(text: str) -> str:
    """JSON text with every surrogate code point written as its ``\\uXXXX`` escape.

    Surrogates can only occur inside JSON strings, where the escape is valid and decodes back
    to the same code point, so the log stays valid UTF-8 and the text is kept losslessly.
    (A high surrogate directly followed by a low one reads back as the character they encode.)
    """
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def dump_record(record: EpisodeRecord) -> str:
    """One record as one line of JSON that UTF-8 can always encode; never raises on content.

    A record whose content cannot be serialised (a plug-in's typed action nested deeper than the
    serialiser allows, say) is written as an ``end="error"`` record of the same episode, with
    the replies kept and the structured step fields dropped, so the episode is not lost.
    """
    try:
        return record.model_dump_json()
    except PydanticSerializationError:
        pass  # a surrogate UTF-8 cannot encode, or content the serialiser refuses: slow path
    try:
        text = json.dumps(_finite(record.model_dump(mode="json")), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError, PydanticSerializationError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        steps = [StepRecord(index=s.index, reply=s.reply, parse_error=s.parse_error, message=s.message,
                            calls_left=s.calls_left, usage=s.usage, cost=s.cost, latency_s=s.latency_s)
                 for s in record.steps]
        fallback = record.model_copy(update={
            "steps": steps, "env_options": {}, "arm": ArmSpec(name=record.arm.name), "answer": None,
            "end": "error", "error": f"log: the record could not be serialised ({detail[:200]})",
        })
        text = json.dumps(_finite(fallback.model_dump(mode="json")), ensure_ascii=False, separators=(",", ":"))
    return _escape_surrogates(text)


def _finite(obj: Any) -> Any:
    """``obj`` with non-finite floats as None, as ``model_dump_json`` writes them (valid JSON)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


class LogWriter:
    """Appends records to one JSONL log file; safe against kills mid-write.

    A record is one ``write`` on an ``O_APPEND`` descriptor, so a killed process leaves whole
    lines (plus at most one truncated last line, cut by the next writer). Data written before a
    SIGKILL is in the kernel and survives; ``fsync`` only guards against an OS crash, so it runs
    at most every ``fsync_interval`` seconds (and on ``close``) instead of per record.
    """

    def __init__(self, path: str | Path, *, fsync_interval: float = 1.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync_interval = fsync_interval
        self._last_sync = 0.0
        _repair_tail(self.path)

    def append(self, record: EpisodeRecord) -> None:
        """Write one record as one line with a single ``write`` call, every known secret
        (a key echoed in a reply, a URL's userinfo) masked."""
        line = (scrubbed_json(record) + "\n").encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            now = time.monotonic()
            if now - self._last_sync >= self.fsync_interval:
                os.fsync(fd)
                self._last_sync = now
        finally:
            os.close(fd)

    def close(self) -> None:
        """Flush the log to disk."""
        if self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def scrubbed_json(record: EpisodeRecord) -> str:
    """The record's JSON line with every known secret masked in every string."""
    text = dump_record(record)
    secrets = known_secrets()
    if not may_hold_secret(text, secrets):
        return text
    clean = scrub_data(record.model_dump(mode="json"), secrets)
    return dump_record(EpisodeRecord.model_validate(clean))


def _repair_tail(path: Path) -> None:
    """Cut a truncated last line (left by a killed writer) so appends start on a fresh line.

    A last line that only lacks its newline (a complete, valid record, or one of a newer schema)
    is kept: the newline is added, and its episode is neither lost nor paid for again."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return
        # Find the last newline: the line after it is the one to keep or cut.
        block = 65536
        pos = size
        cut = 0
        while pos > 0:
            start = max(0, pos - block)
            f.seek(start)
            chunk = f.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                cut = start + idx + 1
                break
            pos = start
        f.seek(cut)
        if _complete_line(f.read(size - cut)):
            f.seek(size)
            f.write(b"\n")
        else:
            f.truncate(cut)


def _complete_line(raw: bytes) -> bool:
    """True when ``raw`` (a last line without its newline) is a whole record worth keeping."""
    if not raw.strip():
        return False
    rec, _msg, newer = _read_line(raw.decode("utf-8", errors="replace"), True, known_secrets())
    return rec is not None or newer


class LogLineError(BaseModel):
    """A log line that could not be read."""

    file: str
    line: int
    error: str


def iter_records(
    paths: Iterable[str | Path],
    errors: list[LogLineError] | None = None,
    *,
    exact_text: bool = False,
    newer: Literal["skip", "raise"] = "skip",
) -> Iterator[EpisodeRecord]:
    """Yield valid records from log files, known secrets masked; bad lines are reported (file and
    line) and skipped.

    Args:
        errors: collects the skipped lines (each is also a one-line warning).
        exact_text: keep strings exactly as logged. By default a lone surrogate in a string
            (which no UTF-8 file, table or page can hold) reads as its visible ``\\udXXX``
            escape, so every consumer can write the record out.
        newer: a line written by a newer schema version than this countgym reads is skipped
            with a warning naming both versions (``"skip"``) or raises a ``UserError``
            (``"raise"``, for resume: never re-run an episode a newer version logged).
    """
    secrets = known_secrets()
    for p in paths:
        p = Path(p)
        with p.open(encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                rec, msg, is_newer = _read_line(line, exact_text, secrets)
                if rec is not None:
                    yield rec
                    continue
                if is_newer and newer == "raise":
                    from countgym.errors import UserError

                    raise UserError(f"{p}:{lineno}: {msg}")
                err = LogLineError(file=str(p), line=lineno, error=msg)
                if errors is not None:
                    errors.append(err)
                warnings.warn(f"{p}:{lineno}: skipped invalid log line: {msg}", stacklevel=2)


@functools.cache
def _current_json_validator(cls: type[EpisodeRecord]) -> Callable[[str], EpisodeRecord]:
    """``EpisodeRecord.model_validate_json`` for lines of the current schema version: the same
    field validation without the ``_migrate`` step, which makes pydantic build every value of
    a line as a Python object before validating it (a fifth of the time of a line).

    A line the full validation would migrate (``schema_version`` 1 or 2, or an ``answer`` outside
    the 64-bit range) fails this one, since ``schema_version`` must be 3 and ``answer`` in
    range, and the caller reads it again through the full validation. A line this one accepts
    is one on which the migration changes nothing, so the record is the same; the record is
    made as ``model_construct`` makes one. Where pydantic lays out the model's schema
    differently, or the result differs from the full validation's on a probe record, the full
    validation is used, as it is for a model with an ``__init__`` or ``model_post_init`` of its
    own."""
    full = cls.model_validate_json
    schema = cls.__pydantic_core_schema__
    if schema.get("custom_init") or getattr(cls, "__pydantic_post_init__", None):
        return full
    inner = schema.get("schema") if schema.get("type") == "model" else None
    fields = inner.get("schema") if isinstance(inner, dict) and inner.get("type") == "function-before" else None
    if not isinstance(fields, dict) or fields.get("type") != "model-fields":
        return full
    try:
        validate = SchemaValidator(fields, schema.get("config")).validate_json
    except (TypeError, ValueError, KeyError):
        return full
    new = object.__new__
    setattr_ = object.__setattr__

    def read(line: str) -> EpisodeRecord:
        values, extra, fields_set = validate(line)
        rec = new(cls)
        setattr_(rec, "__dict__", values)
        setattr_(rec, "__pydantic_extra__", extra)
        setattr_(rec, "__pydantic_fields_set__", fields_set)
        setattr_(rec, "__pydantic_private__", None)
        return rec

    probe = dump_record(
        cls(
            episode_id="c/s/r0", stimulus_id="s", dataset="d", arm=ArmSpec(name="a"), model="m",
            seed=0, steps=[StepRecord(index=0, tags_added=[(1.5, 2.0)])], tags=[(1.5, 2.0)],
            end="budget", countgym_version="0", template_hash="0", started_at="t", finished_at="t",
        )  # fmt: skip
    )
    try:
        got, want = read(probe), full(probe)
        same = got == want and got.model_fields_set == want.model_fields_set
    except (TypeError, ValueError, AttributeError):
        same = False
    return read if same else full


def _read_line(line: str, exact_text: bool, secrets: Any) -> tuple[EpisodeRecord | None, str, bool]:
    """(record, "", False) for a valid line, else (None, why, whether it is a newer schema)."""
    if "\\ud" not in line and "\\uD" not in line and not may_hold_secret(line, secrets, quick=True):
        # Fast path: pydantic parses and validates the line in one go. Its JSON reader gives
        # the same values as ``json.loads`` followed by ``model_validate`` (last duplicate key
        # wins, NaN and the digit limit alike); whatever it refuses (bad JSON, deep nesting, a
        # newer schema, a failed field) is read again below, so a refused line's reason and
        # the records read are what they always were. Escaped surrogates and lines that may
        # hold a secret always take the path below.
        try:
            return _current_json_validator(EpisodeRecord)(line), "", False
        except (ValueError, RecursionError):
            pass
    try:
        data = json.loads(line)
        newer_msg = _newer_schema(data)
        if newer_msg is not None:
            return None, newer_msg, True
        # Logs written before scrubbing (or under other keys) may hold a secret that this
        # process knows: it must not travel on into tables and reports.
        if may_hold_secret(line, secrets):
            data = scrub_data(data, secrets)
        if not exact_text and "\\ud" in line.lower():
            data = _visible_surrogates(data)
        return EpisodeRecord.model_validate(data), "", False
    except (ValueError, RecursionError) as e:
        # ValueError covers bad JSON, a number past the digit limit and pydantic's
        # ValidationError; RecursionError is a line nested past the parser's depth.
        return None, _one_line(e), False


def _newer_schema(data: Any) -> str | None:
    """Why a decoded line is from a newer log schema than this countgym reads, else None."""
    v = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(v, int) and not isinstance(v, bool) and v > SCHEMA_VERSION:
        from countgym import __version__

        return (
            f"written with log schema version {v}, but countgym {__version__} reads schema "
            f"version {SCHEMA_VERSION} and older: upgrade countgym to read or resume this log"
        )
    return None


def _visible_surrogates(obj: Any) -> Any:
    """``obj`` with every surrogate code point in its strings (and keys) shown as ``\\udXXX``."""
    if isinstance(obj, str):
        return _escape_surrogates(obj)
    if isinstance(obj, dict):
        return {_visible_surrogates(k): _visible_surrogates(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_visible_surrogates(v) for v in obj]
    return obj


def _one_line(e: BaseException) -> str:
    """An exception as one short line (pydantic errors are multi-line; depth errors are long)."""
    if isinstance(e, RecursionError):
        return "nested too deeply to read"
    if isinstance(e, ValidationError):
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"]) or "(record)"
        return f"{e.error_count()} validation error(s), first: {loc}: {err['msg']}"[:300]
    lines = str(e).splitlines()
    return (lines[0] if lines else type(e).__name__)[:300]


def find_logs(paths: Iterable[str | Path]) -> list[Path]:
    """Expand run folders into their ``*.jsonl`` log files (recursively); files pass through."""
    out: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out.extend(sorted(q for q in p.rglob("*.jsonl") if q.name != "manifest.jsonl"))
        elif p.is_file():
            out.append(p)
        else:
            from countgym.errors import UserError

            raise UserError(f"no such log file or run folder: {p}")
    return out


def read_records(paths: Iterable[str | Path]) -> list[EpisodeRecord]:
    """All valid records from files or run folders."""
    return list(iter_records(find_logs(paths)))
