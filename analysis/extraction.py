"""Model-assisted answer extraction at audit time: the CountVideoBench parser and the
CounterCount judge, both cached on disk.

- **Parser** (*CountVideoBench*, Section 5.1): video replies the environment's rules left
  without a count (``extracted_by == "none"``) go to a model parser (the paper uses Qwen2.5-7B)
  with ``video_templates.PARSER``; it answers one integer or NaN. ``countgym audit --parser MODEL``.
- **Judge** (*CounterCount*, Section 3 and Appendix B.2): replies with several incompatible
  numbers go to a judge with the paper's prompt. By default the judge is **the same model** that
  produced the reply, in its baseline configuration (the run's model id and endpoint with the
  backend's default decoding); ``--judge MODEL`` overrides it.

Video episodes logged before ``extracted_by`` existed, and left without a count, are read again
with today's rules first (``extracted_by = rule`` when they now give one). Resolved episodes get
``answer``, ``end="answer"`` and ``extracted_by`` = ``parser`` or ``judge``, so every table (``episodes.csv``, ``summary.csv``, the task sections) scores them.
A failed model call leaves its reply unresolved and is not cached (a later audit retries);
after the first failure a backend is not called again in that audit (one note says so), so an
unreachable endpoint cannot stall the audit.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countgym.envs import cf_templates
from countgym.envs import video_templates as vt
from countgym.logs import EpisodeRecord
from countgym.secrets import scrub_data

SAME_MODEL = "same"
"""``judge=SAME_MODEL``: judge each reply with the model that wrote it (the paper's setting)."""


@dataclass
class Resolution:
    """The records after the parser and judge ran, and what happened (for the report)."""

    records: list[EpisodeRecord]
    parsed: int = 0
    judged: int = 0
    unresolved: int = 0
    notes: list[str] = field(default_factory=list)
    parser_model: str | None = None
    judge_models: list[str] = field(default_factory=list)
    judge_mode: str = "off"
    """``off`` (no judge), ``same`` (each reply's own model, the paper's setting) or a model id."""
    cf_replies: int = 0
    """CounterCount replies seen."""
    judge_needed: int = 0
    """CounterCount replies with several incompatible numbers (the rules give no count)."""
    judge_unresolved: int = 0
    """Of those, replies no judge resolved: they count as no answer."""
    judge_endpoint_named: bool = False
    """Some unresolved reply's log names an endpoint (``--judge-option api_base=URL`` needed)."""

    def judge_summary(self, command: Sequence[str] | None = None) -> str | None:
        """Whether the judge ran, how many replies needed it and how they were counted; with
        replies left unjudged, the exact command that judges them. None without CounterCount."""
        if not self.cf_replies:
            return None
        judged = self.judge_needed - self.judge_unresolved
        if self.judge_mode == "off":
            head = "off (--no-judge)"
        else:
            who = self.judge_mode
            if who == SAME_MODEL:
                built = [m for m in self.judge_models if m not in ("none", "each run's own model")]
                who = ("each run's own model in its baseline configuration (the paper's setting, CounterCount "
                       f"Section 3){': ' + ', '.join(built) if built else ''}")
            head = f"{'ran' if judged or not self.judge_needed else 'could not run (see the notes)'}: {who}"
        text = (f"{head}; {self.judge_needed} of {self.cf_replies} CounterCount replies named several numbers "
                f"and needed it: {judged} judged (scored as the number the judge read), "
                f"{self.judge_unresolved} counted as no answer")
        if self.judge_unresolved:
            text += " for want of a judge" if self.judge_mode == "off" else " (the judge could not read them)"
            cmd = judge_command(command, endpoint=self.judge_endpoint_named)
            text += f"; judge them with: {cmd}"
        return text

    def provenance(self, command: Sequence[str] | None = None) -> dict[str, str]:
        """Report provenance lines (the judge's whenever there are CounterCount replies)."""
        out: dict[str, str] = {}
        if self.parser_model:
            out["answer parser"] = f"{self.parser_model} ({self.parsed} replies resolved)"
        judge = self.judge_summary(command)
        if judge:
            out["judge"] = judge
        if self.notes:
            out["extraction notes"] = "; ".join(self.notes)
        return out


def judge_command(command: Sequence[str] | None, *, endpoint: bool = False) -> str:
    """The ``countgym audit`` command that judges the CounterCount replies: ``command`` (the
    audit's own command line, or a placeholder) with ``--no-judge`` / ``--judge ...`` replaced
    by ``--judge same`` (plus ``--judge-option api_base=URL`` when a log names an endpoint)."""
    import shlex

    args = list(command) if command else ["countgym", "audit", "RUNS", "--out", "OUT"]
    kept: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("--judge", "--judge-option"):
            skip = True
            continue
        if a == "--no-judge" or a.startswith(("--judge=", "--judge-option=")):
            continue
        kept.append(a)
    kept += ["--judge", SAME_MODEL]
    text = shlex.join(kept)
    return text + (" --judge-option api_base=URL" if endpoint else "")


def resolve_answers(
    records: Sequence[EpisodeRecord],
    *,
    parser: Any = None,
    judge: Any = None,
    cache_dir: str | Path,
    make_backend: Callable[[str, str | None], Any] | None = None,
    warn: Callable[[str], None] | None = None,
) -> Resolution:
    """Run the parser (video) and the judge (CounterCount) over the replies the rules left open.

    ``parser``/``judge`` are ``ChatModel``-like objects (``complete(messages) -> Reply``);
    ``judge=SAME_MODEL`` builds each record's own model with ``make_backend(model_id,
    api_base)`` (the command line passes the CounterCount baseline backend; analysis never
    builds backends itself). ``warn`` receives one line per problem."""
    resolver = AnswerResolver(parser=parser, judge=judge, cache_dir=cache_dir, make_backend=make_backend, warn=warn)
    out = [resolver.step(i, rec) for i, rec in enumerate(records)]
    return resolver.finish(out)


class AnswerResolver:
    """``resolve_answers`` one record at a time: ``step`` each record in order (it returns the
    record the audit uses), then ``finish``. The full audit runs it as its records stream by."""

    def __init__(
        self,
        *,
        parser: Any = None,
        judge: Any = None,
        cache_dir: str | Path,
        make_backend: Callable[[str, str | None], Any] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.res = Resolution([])
        self.parser = parser
        self.judge = judge
        self.cache = Path(cache_dir)
        if parser is not None:
            self.res.parser_model = _model_id(parser)
        self.ds_cache: dict[str, Any] = {}
        self.backends = _Backends(make_backend, self.res, warn)
        self.any_countercount = False
        if judge is not None:
            self.res.judge_mode = SAME_MODEL if judge == SAME_MODEL else _model_id(judge)

    def step(self, i: int, rec: EpisodeRecord) -> EpisodeRecord:
        """The record with its reply resolved (or itself)."""
        res, parser, judge, cache, ds_cache, backends = (
            self.res, self.parser, self.judge, self.cache, self.ds_cache, self.backends
        )
        task = rec.env_options.get("task")
        if task == "video" and rec.extracted_by is None and _parser_candidate(rec):
            # A log from before these rules: read its reply again with today's rules.
            rec = _reread_video(rec, ds_cache)
        if parser is not None and task == "video" and _parser_candidate(rec):
            question = _video_question(rec, ds_cache)
            prompt = vt.PARSER.format(question=question, response=rec.steps[0].reply)
            key = [res.parser_model, vt.PARSER_HASH, question, rec.steps[0].reply]
            value, ok = _ask(backends, parser, res.parser_model or "", prompt, key, cache / "countvideo" / "parser-cache")
            if ok and value is not None:
                rec = _resolved(rec, value, "parser")
                res.parsed += 1
            else:
                res.unresolved += 1
        elif task == "countercount" and _judge_candidate(rec):
            res.judge_needed += 1
            if judge is not None:
                rec = self._judge(rec)
            if rec.answer is None:
                res.judge_unresolved += 1
                res.judge_endpoint_named |= _log_endpoint(rec) is not None
        elif task == "countercount" and rec.extracted_by == "judge":
            res.judge_needed += 1  # judged when it ran (``countgym run`` logs the rules' reading)
        if rec.env_options.get("task") == "countercount":
            self.any_countercount = True
            res.cf_replies += 1
        return rec

    def _judge(self, rec: EpisodeRecord) -> EpisodeRecord:
        res, judge, backends = self.res, self.judge, self.backends
        model = judge
        if judge == SAME_MODEL:
            model = backends.same_model(rec)
            if model is None:
                res.unresolved += 1
                return rec
        model_id = _model_id(model)
        if model_id not in res.judge_models:
            res.judge_models.append(model_id)
        try:
            question = _cf_question(rec, self.ds_cache)
        except Exception as e:  # noqa: BLE001 - a missing dataset leaves the reply unresolved
            backends.note(f"judge: no question for {rec.episode_id} ({type(e).__name__}: {e})")
            res.unresolved += 1
            return rec
        n_true = rec.truth.n if rec.truth else 0
        prompt = cf_templates.JUDGE.format(question=question, response=rec.steps[0].reply or "", correct_answer=n_true)
        key = [model_id, question, rec.steps[0].reply, n_true]  # the key analysis.cf uses
        value, ok = _ask(backends, model, model_id, prompt, key, self.cache / "countercount" / "judge-cache", judge=True)
        if ok and value is not None:
            res.judged += 1
            return _resolved(rec, value, "judge")
        res.unresolved += 1
        return rec

    def finish(self, records: list[EpisodeRecord] | None = None) -> Resolution:
        """What happened; ``records`` (when the caller kept them) become ``Resolution.records``."""
        res = self.res
        if records is not None:
            res.records = records
        if not res.judge_models and self.any_countercount:
            # Say which judge applies even when no reply needed one.
            judge = self.judge
            label = "none" if judge is None else "each run's own model" if judge == SAME_MODEL else _model_id(judge)
            res.judge_models.append(label)
        return res


# --------------------------------------------------------------------------- candidates
def _parser_candidate(rec: EpisodeRecord) -> bool:
    return (
        rec.answer is None
        and rec.end == "invalid"
        and bool(rec.steps)
        and isinstance(rec.steps[0].reply, str)
        and bool(rec.steps[0].reply.strip())
    )


def _judge_candidate(rec: EpisodeRecord) -> bool:
    return (
        rec.answer is None
        and bool(rec.steps)
        and (rec.steps[0].parse_error or "").startswith("ambiguous")
        and isinstance(rec.steps[0].reply, str)
    )


def _resolved(rec: EpisodeRecord, value: int, by: str) -> EpisodeRecord:
    steps = list(rec.steps)
    steps[0] = steps[0].model_copy(update={"action": {"tool": "answer", "count": value, "method": by}})
    return rec.model_copy(update={"answer": value, "end": "answer", "extracted_by": by, "steps": steps})


def _reread_video(rec: EpisodeRecord, cache: dict[str, Any]) -> EpisodeRecord:
    from countgym.envs.extract import Target, extract_count

    stim = _stimulus(rec, cache)
    target = None
    if stim is not None and stim.meta.get("shape"):
        color = stim.meta.get("color")
        target = Target(str(stim.meta["shape"]), str(color) if color else None)
    found = extract_count(rec.steps[0].reply, question=_video_question(rec, cache), target=target)
    if found.value is None:
        return rec
    return _resolved(rec, found.value, "rule")


# --------------------------------------------------------------------------- questions
def _stimulus(rec: EpisodeRecord, cache: dict[str, Any]) -> Any:
    """The episode's stimulus, or None when its dataset cannot be found."""
    try:
        from countgym.scenes import resolve_dataset

        if rec.dataset not in cache:
            cache[rec.dataset] = resolve_dataset(rec.dataset)
        return cache[rec.dataset][rec.stimulus_id]
    except Exception:  # noqa: BLE001 - the dataset moved
        return None


def _video_question(rec: EpisodeRecord, cache: dict[str, Any]) -> str:
    """The question the episode asked (from the stimulus metadata and the prompt option)."""
    prompt = vt.PROMPTS.get(str(rec.env_options.get("prompt", "P1")), vt.PROMPTS["P1"])
    stim = _stimulus(rec, cache)
    if stim is None:  # the dataset moved: ask about "objects"
        return prompt.replace("{color} {shape}s", "objects")
    shape, color = stim.meta.get("shape"), stim.meta.get("color")
    if shape and color:
        return prompt.format(color=color, shape=shape)
    return prompt.replace("{color} {shape}s", stim.obj)


def _cf_question(rec: EpisodeRecord, cache: dict[str, Any]) -> str:
    from countgym.envs.cf_env import build_question
    from countgym.scenes.counterfactual import resolve_countercount

    if rec.dataset not in cache:
        cache[rec.dataset] = resolve_countercount(rec.dataset)
    stim = cache[rec.dataset][rec.stimulus_id]
    opts = rec.env_options
    return build_question(
        stim, format=opts.get("question", "mcq"), cue=bool(opts.get("cue")), generic=bool(opts.get("generic"))
    ).text


# --------------------------------------------------------------------------- model calls
def _model_id(model: Any) -> str:
    return str(getattr(model, "model", type(model).__name__))


class _Backends:
    """Builds same-model judges once per (model, endpoint) and remembers failed ones."""

    def __init__(self, make: Callable[..., Any] | None, res: Resolution, warn: Callable[[str], None] | None):
        self._make = make
        self._res = res
        self._warn = warn
        self._built: dict[tuple[str, str | None], Any] = {}
        self.failed: set[str] = set()

    def note(self, line: str) -> None:
        if line not in self._res.notes:
            self._res.notes.append(line)
            if self._warn is not None:
                self._warn(line)

    def same_model(self, rec: EpisodeRecord) -> Any:
        api_base = _log_endpoint(rec)
        if isinstance(api_base, str) and ("<redacted>" in api_base or "@" in api_base):
            api_base = None  # credentials were redacted from the log; litellm's own config applies
        key = (rec.model, api_base)
        if key not in self._built:
            if self._make is None:
                self._built[key] = None
                self.note("judge: no model backend given for the same-model judge; replies with several numbers left unresolved")
                return None
            try:
                # The baseline configuration: the arm's baseline decoding; only the endpoint is kept.
                self._built[key] = self._make(rec.model, api_base)
            except Exception as e:  # noqa: BLE001 - a scripted policy or a missing extra: no judge
                self._built[key] = None
                self.note(f"judge: model {rec.model!r} cannot judge its replies ({type(e).__name__}: {e}); left unresolved")
        return self._built[key]


def _log_endpoint(rec: EpisodeRecord) -> str | None:
    """The endpoint (``api_base``) a record's log names for its model, or None."""
    provider = rec.arm.options.get("provider") or {}
    api_base = provider.get("api_base") if isinstance(provider, dict) else None
    return api_base if isinstance(api_base, str) and api_base else None


def _ask(
    backends: _Backends, model: Any, model_id: str, prompt: str, key: list[Any], cache: Path, *, judge: bool = False
) -> tuple[int | None, bool]:
    """(value, decided): from the cache, or one model call (cached when it succeeded)."""
    digest = hashlib.sha256(json.dumps(key).encode("utf-8", "surrogatepass")).hexdigest()
    path = cache / f"{digest}.json"
    if path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(stored.get("reply"), str):
                # Read again with today's count grammar: a cached "3 or 4" is no answer now.
                return _read_value(stored["reply"], judge=judge), True
            value = stored.get("value")
            return (value if isinstance(value, int) and not isinstance(value, bool) else None), True
        except (OSError, ValueError, AttributeError):
            pass  # a damaged cache entry is asked again
    if model_id in backends.failed:
        return None, False
    try:
        reply = model.complete([{"role": "user", "content": [{"type": "text", "text": prompt}]}])
        error = getattr(reply, "error", None)
    except Exception as e:  # noqa: BLE001 - a plug-in model may raise
        reply, error = None, f"{type(e).__name__}: {e}"
    role = "judge" if judge else "parser"
    if error is not None or reply is None:
        backends.failed.add(model_id)
        backends.note(f"{role} {model_id} failed ({str(error)[:200]}); its remaining replies are left unresolved")
        return None, False
    value = _read_value(reply.text, judge=judge)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    entry = scrub_data({"model": model_id, "key": key, "reply": reply.text, "value": value})  # a model can echo a key
    tmp.write_text(json.dumps(entry), encoding="utf-8")
    tmp.replace(path)
    return value, True


def _read_value(text: Any, *, judge: bool) -> int | None:
    """The count a parser/judge reply states under the count grammar (``countgym.envs.numbers``;
    NaN, a range, a bound, a negative, several numbers or none: None)."""
    if judge:
        from countgym.envs.cf_env import extract_count as cf_extract

        return cf_extract(text).value
    from countgym.envs.extract import extract_count

    return extract_count(text).value
