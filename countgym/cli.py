"""The ``countgym`` command line. Exit codes: 0 ok, 2 user mistake, 1 internal error."""

from __future__ import annotations

import argparse
import errno
import os
import select
import sys
import warnings
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from countgym.errors import UserError
from countgym.limits import (
    MAX_BUDGET,
    MAX_CONCURRENCY,
    MAX_REPEATS,
    config_depth_problem,
    nesting_message,
)


def _int_at_least(low: int, what: str) -> Any:
    """An argparse type for integers >= ``low``."""

    def parse(v: str) -> int:
        try:
            i = int(v)
        except ValueError:
            i = low - 1
        if i < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v!r}")
        return i

    return parse


_positive_int = _int_at_least(1, "a positive integer")
_non_negative_int = _int_at_least(0, "an integer >= 0")


def _int_between(low: int, high: int) -> Any:
    """An argparse type for integers in ``[low, high]``."""
    what = f"a positive integer up to {high}" if low == 1 else f"an integer from {low} to {high}"
    at_least = _int_at_least(low, what)

    def parse(v: str) -> int:
        i = at_least(v)
        if i > high:
            raise argparse.ArgumentTypeError(f"expected {what}, got {v!r}")
        return i

    return parse


def _folder(v: str) -> str:
    """``--out``: a folder name; an empty one is a mistake (it would write into the current folder)."""
    if not v.strip():
        raise argparse.ArgumentTypeError("expected a folder name, got an empty one")
    if "\x00" in v:
        raise argparse.ArgumentTypeError("a folder name cannot hold a NUL character")
    return v


def _spend_cap(v: str) -> float:
    """``--max-cost``: a finite amount of USD >= 0 (``-1``, ``nan`` and ``inf`` are mistakes)."""
    import math

    try:
        x = float(v)
    except ValueError:
        x = math.nan
    if not (math.isfinite(x) and x >= 0):
        raise argparse.ArgumentTypeError(f"expected a spend cap in USD >= 0 (omit it for no cap), got {v!r}")
    return x


def _frame_size(v: str) -> Any:
    if v in ("full", "half", "quarter"):
        return v
    w, sep, h = v.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) < 16 or int(h) < 16:
        raise argparse.ArgumentTypeError(f"expected WxH (e.g. 960x540), full, half or quarter, got {v!r}")
    return (int(w), int(h))


class _Parser(argparse.ArgumentParser):
    """argparse that reports mistakes as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"countgym: error: {message} (see '{self.prog} --help')\n")
        sys.exit(2)


def _example_env() -> str:
    from countgym.registration import TASKS

    return next(iter(TASKS.values())).default_env


def _downloadable() -> list[str]:
    from countgym.scenes.make import DOWNLOADABLE

    return list(DOWNLOADABLE)


_NO_PROGRESS = "no progress bar"
_LIMIT_HELP = (
    "run K stimuli stratified by true count (every count level gets its share, spread over the "
    "manifest; deterministic); a large battery built on first use builds only the balanced subset "
    "that holds them"
)


_SIMULATE_HELP = (
    "answer every model with a simulated model on a local server (no keys, cost 0), through the real "
    "path; PROFILE.toml sets its behaviour per model (default: built-in per-model behaviour; see "
    "docs/rehearse.md)"
)


def _makeable() -> str:
    from countgym.scenes.batteries import dataset_names

    return dataset_names(subsets=False)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="countgym", description="Measure and improve how vision-language models count.")
    from countgym import __version__

    p.add_argument("--version", action="version", version=f"countgym {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    from countgym.registration import DEMO_DATASET

    d = sub.add_parser("demo", help="generate a battery subset, run two model-free policies, audit")
    d.add_argument("--out", type=_folder, default="countgym-demo", help="output folder (default: countgym-demo)")
    d.add_argument("--subset", default=DEMO_DATASET, help=f"battery[:subset] to run on (default: {DEMO_DATASET})")
    d.add_argument("--no-progress", action="store_true", help=_NO_PROGRESS)

    sc = sub.add_parser("scenes", help="stimulus batteries")
    scs = sc.add_subparsers(dest="scenes_command", required=True, parser_class=_Parser)
    mk = scs.add_parser("make", help="write a battery as a dataset folder (manifest.jsonl + media)")
    mk.add_argument("battery", help=f"what to write: {_makeable()}")
    mk.add_argument("--out", type=_folder, required=True, help="dataset folder to write (manifest.jsonl + media)")
    mk.add_argument("--seed", type=_non_negative_int, default=0,
                    help="offset of every stimulus seed (default 0: the paper's stimuli)")
    mk.add_argument("--per-level", type=_positive_int, default=None, metavar="K",
                    help="stimuli per count level of a generated battery")
    mk.add_argument("--limit", type=_positive_int, default=None, metavar="K",
                    help="write only K stimuli, spread evenly over the design so they span the counts "
                         "(a paired battery: K pairs)")
    mk.add_argument("--renderer", default=None, help="video battery: fast (default), blender/cycles, eevee, workbench")
    mk.add_argument("--size", type=_frame_size, default=None, help="video battery frame size: WxH, full, half or quarter")
    mk.add_argument("--video", action="store_true", help="video battery: also write an MP4 of each clip")
    mk.add_argument("--workers", type=_positive_int, default=None, metavar="N",
                    help="video battery: render processes (default: every core); a stopped build resumes")
    mk.add_argument("--data", default=None, help="photo sets: the release folder")
    mk.add_argument("--no-progress", action="store_true", help=_NO_PROGRESS)
    dl = scs.add_parser("download", help="fetch the listed images of a photo release")
    dl.add_argument("name", choices=_downloadable(), help=f"photo set: {', '.join(_downloadable())}")
    dl.add_argument("--data", required=True, help="the release folder; images go to DATA/images")
    dl.add_argument("--no-progress", action="store_true", help=_NO_PROGRESS)

    r = sub.add_parser("run", help="run one cell: environment (or dataset) x agent x model")
    r.add_argument("--env", default=None, metavar="ID",
                   help=f"registered environment id, e.g. {_example_env()} (default: the dataset's)")
    r.add_argument("--data", default=None,
                   help="dataset folder or battery name (battery[:subset]); default: the environment's")
    r.add_argument("--agent", required=True, help="built-in arm/policy or package.module:ClassName")
    r.add_argument("--model", default="", help="model id for model-backed arms")
    r.add_argument("--tools", nargs="+", default=None, help="enabled tools (tag crop erase grid)")
    r.add_argument("--budget", type=_int_between(0, MAX_BUDGET), default=None, help="tool-call budget T")
    r.add_argument("--no-verify", action="store_true", help="ablation: no verification prompt")
    r.add_argument("--plain-marks", action="store_true", help="ablation: tags without numbers")
    r.add_argument("--order", choices=["reading", "reverse"], default=None,
                   help="ablation: ask for tags in reading order or its reverse")
    r.add_argument("--no-thinking", action="store_true", help="control: reasoning disabled (the lowest effort where a provider cannot disable it)")
    r.add_argument("--perturb", choices=["remove", "add"], default=None,
                   help="probe: after the first tag call the harness silently removes an on-target tag "
                        "or adds one on an untagged object")
    r.add_argument("--protocol", choices=["json", "native"], default=None,
                   help="tool-loop arms: the paper's JSON action line (default) or native tool calls")
    r.add_argument("--agent-option", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="policy or backend options, one or more per flag (repeatable), e.g. "
                        "sigma=3 omission=0.1")
    r.add_argument("--out", type=_folder, default="runs", help="run folder (default: runs)")
    r.add_argument("--concurrency", type=_int_between(1, MAX_CONCURRENCY), default=1,
                   help=f"episodes in flight at once (1 to {MAX_CONCURRENCY}; default 1)")
    r.add_argument("--limit", type=_positive_int, default=None, metavar="K", help=_LIMIT_HELP)
    r.add_argument("--repeats", type=_int_between(1, MAX_REPEATS), default=1,
                   help=f"episodes per stimulus (1 to {MAX_REPEATS}; default 1)")
    r.add_argument("--seed", type=_non_negative_int, default=0,
                   help="base seed of the episodes (each episode's seed derives from it; default 0)")
    r.add_argument("--max-cost", type=_spend_cap, default=None, help="stop starting episodes at this spend (USD)")
    r.add_argument("--force", action="store_true", help="discard this cell's log and run again")
    r.add_argument("--wait", action="store_true",
                   help="if another process is running this cell, wait for it, then resume")
    r.add_argument("--no-retry-errors", action="store_true",
                   help="on resume, keep episodes that ended in a transient error (429, 5xx, timeout) "
                        "instead of running them again")
    r.add_argument("--no-progress", action="store_true", help=_NO_PROGRESS)
    r.add_argument("--simulate", nargs="?", const="", default=None, metavar="PROFILE.toml", help=_SIMULATE_HELP)

    sw = sub.add_parser("sweep", help="run a grid of cells from a TOML/YAML config (resumable)")
    sw.add_argument("config", help="sweep config, .toml or .yaml (keys: see docs/sweeps.md)")
    sw.add_argument("--executor", choices=["local", "ray"], default="local",
                    help="ray: shard episodes into Ray tasks (local instance, or the cluster at RAY_ADDRESS)")
    sw.add_argument("--force", action="store_true", help="discard the logs of the sweep's cells and rerun")
    sw.add_argument("--dry-run", action="store_true", help="list the cells and exit")
    sw.add_argument("--no-retry-errors", action="store_true",
                    help="on resume, keep episodes that ended in a transient error instead of re-running them")
    sw.add_argument("--no-progress", action="store_true", help=_NO_PROGRESS)
    sw.add_argument("--out", default=None, metavar="DIR", help="run folder, in place of the config's 'out'")
    sw.add_argument("--limit", type=_positive_int, default=None, metavar="K",
                    help="K stimuli per cell, in place of the config's 'limit' (a quick rehearsal)")
    sw.add_argument("--simulate", nargs="?", const="", default=None, metavar="PROFILE.toml", help=_SIMULATE_HELP)

    rh = sub.add_parser("rehearse", help="run every paper config against a simulated model, audit, "
                        "compare injected and recovered behaviour")
    rh.add_argument("--scale", choices=["quick", "full"], default="quick",
                    help="quick: a few stimuli per cell (minutes); full: every config at its paper size")
    rh.add_argument("--out", required=True, help="folder for the runs (runs/finger, ...) and their audits")
    rh.add_argument("--profile", default=None, metavar="PROFILE.toml",
                    help="simulation profile (default: the built-in per-model behaviour)")
    rh.add_argument("--configs", default=None, help="folder of sweep configs (default: the checkout's configs/)")
    rh.add_argument("--no-progress", action="store_true", help=_NO_PROGRESS)

    sub.add_parser("testserver", help="a local OpenAI-compatible server that answers like a model",
                        add_help=False)  # handled in main()

    a = sub.add_parser("audit", help="audit episode logs: episodes.csv, summary.csv")
    a.add_argument("runs", nargs="+", help="run folders or log files (also vf-eval run folders of countgym)")
    a.add_argument("--out", type=_folder, required=True, help="audit folder: CSV tables, figures/, report.html")
    a.add_argument("--viewer-episodes", type=_non_negative_int, default=40,
                   help="episodes in the report's trajectory viewer (0: no viewer; default 40)")
    a.add_argument("--resamples", type=_positive_int, default=2000, help="bootstrap resamples (default 2000)")
    a.add_argument("--judge", default=None, metavar="MODEL",
                   help="judge single-step replies with several numbers with this model, or 'same' "
                        "(the default, the paper's setting): each run's own model in its baseline "
                        "configuration, at the endpoint you name with --judge-option api_base=URL when "
                        "its log names one (an endpoint named in a log never receives your key; such "
                        "replies count as no answer, and the report gives the command that judges them); "
                        "cached")
    a.add_argument("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option for the judge (repeatable), e.g. api_base=...")
    a.add_argument("--no-judge", action="store_true",
                   help="no judge calls: replies with several numbers count as no answer (the report "
                        "says how many)")
    a.add_argument("--parser", default=None, metavar="MODEL",
                   help="resolve video replies the rules leave without a count with this model "
                        "parser (the paper uses Qwen2.5-7B); cached")
    a.add_argument("--parser-option", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option for the parser (repeatable), e.g. api_base=...")

    ex = sub.add_parser("export", help="export runs (Inspect .eval logs, Parquet) or a dataset (Hugging Face)")
    ex.add_argument("source", nargs="+", help="run folders or log files; for --format hf: a dataset folder or battery")
    ex.add_argument("--format", required=True, choices=("inspect", "parquet", "hf"), dest="fmt",
                    help="inspect: Inspect AI .eval logs; parquet: one row per episode; hf: a Hugging "
                         "Face dataset of the stimuli")
    ex.add_argument("--out", type=_folder, default=None,
                    help="output: a folder (inspect, hf) or a .parquet file; default: inside the first "
                         "run folder (inspect/, episodes.parquet); required for hf")
    ex.add_argument("--images", action="store_true",
                    help="inspect: embed every observation image, re-rendered from the log (larger files)")

    ls = sub.add_parser("list", help="every env id, battery, arm and config, with sizes and build costs")
    ls.add_argument("--configs", default=None, help="folder of sweep configs (default: the checkout's configs/)")

    ca = sub.add_parser("cache", help="what the dataset cache holds (sizes, partial and stale builds); clean it")
    cas = ca.add_subparsers(dest="cache_command", required=False, parser_class=_Parser)
    cas.add_parser("list", help="list the cache's entries (the default)")
    cl = cas.add_parser("clean", help="remove stale temp builds (and more with the flags)")
    cl.add_argument("names", nargs="*", help="remove these entries (names as listed)")
    cl.add_argument("--partial", action="store_true", help="also remove interrupted (partial) builds")
    cl.add_argument("--all", action="store_true", dest="everything", help="remove every entry not being built")
    cl.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")

    rp = sub.add_parser("replay", help="re-render one observation of a logged episode, or print its transcript")
    rp.add_argument("runfile", help="the episode log (.jsonl) that holds the episode, or its run folder")
    rp.add_argument("--episode", default=None,
                    help="episode id, a unique suffix of it (STIMULUS/r0), or a stimulus id")
    rp.add_argument("--list", action="store_true", dest="list_ids",
                    help="list the episodes of the log (id, stimulus, truth, answer, end) and exit")
    rp.add_argument("--step", type=_non_negative_int, default=None,
                    help="observation index: 0 = first observation, k = after step k (default: last)")
    rp.add_argument("--out", type=_folder, default=None,
                    help="PNG file to write (video: a contact sheet of the sampled frames, or a folder with --frames)")
    rp.add_argument("--frames", action="store_true",
                    help="video episodes: write one PNG per sampled frame into the folder --out")
    rp.add_argument("--text", action="store_true",
                    help="also print the transcript (system prompt, question, replies) when writing --out; "
                         "without --out it is printed by default")
    rp.add_argument("--data", default=None, help="dataset folder, if it moved since the run")
    return p


def _parse_kv(items: Sequence[str]) -> dict[str, Any]:
    import json

    out: dict[str, Any] = {}
    for item in items:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise UserError(f"--agent-option expects KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(val)
        except json.JSONDecodeError:
            out[key] = val
        except RecursionError:
            raise UserError(f"--agent-option {key}: {nesting_message()}") from None
        if config_depth_problem(out[key]):
            raise UserError(f"--agent-option {key}: {config_depth_problem(out[key])}")
    return out


def cmd_scenes_make(args: argparse.Namespace) -> int:
    from countgym.scenes.make import download_photos, make_dataset

    if args.scenes_command == "download":
        print(download_photos(args.name, args.data, progress=not args.no_progress))
        return 0
    out = make_dataset(
        args.battery, Path(args.out), seed=args.seed, per_level=args.per_level, limit=args.limit,
        renderer=args.renderer, size=args.size, video=args.video, data=args.data,
        progress=not args.no_progress, workers=args.workers,
    )
    print(f"wrote {out}")
    return 0


def cell_from_args(args: argparse.Namespace) -> Any:
    from countgym.agents.registry import check_agent_name, is_model_arm
    from countgym.cells import make_cell

    check_agent_name(args.agent)
    ablations: dict[str, Any] = {}
    if args.no_verify:
        ablations["verify"] = False
    if args.plain_marks:
        ablations["numbered"] = False
    if args.order:
        ablations["order"] = args.order
    if args.perturb:
        ablations["perturb"] = args.perturb
    if args.protocol:
        from countgym.agents.backends.base import LOCAL_PREFIXES

        if args.protocol == "native" and str(args.model).startswith(LOCAL_PREFIXES):
            raise UserError("--protocol native needs a backend with tool calling (litellm); "
                            "local transformers models run the JSON protocol")
        ablations["protocol"] = args.protocol
    if args.no_thinking:
        if not is_model_arm(args.agent):
            raise UserError("--no-thinking applies to model arms only")
        ablations["thinking"] = False
    return make_cell(
        agent=args.agent,
        env=args.env,
        dataset=args.data,
        model=args.model,
        tools=args.tools,
        budget=args.budget,
        ablations=ablations,
        agent_options=_parse_kv(args.agent_option),
        repeats=args.repeats,
        limit=args.limit,
        seed=args.seed,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from countgym.runner import run_cell

    spec = cell_from_args(args)
    run_options: dict[str, Any] = dict(
        concurrency=args.concurrency,
        max_cost=args.max_cost,
        force=args.force,
        progress=not args.no_progress,
        wait_for_lock=args.wait,
        retry_errors=not args.no_retry_errors,
    )
    if args.simulate is not None:
        from countgym.simulate import run_cell_simulated, simulation

        with simulation(args.simulate) as sim:
            res = run_cell_simulated(spec, args.out, sim, **run_options)
    else:
        res = run_cell(spec, args.out, **run_options)
    retried = f" ({res.retried} re-run after a transient error)" if res.retried else ""
    kept = (f" ({res.kept_errors} of them ended in an error and are kept; --force runs the cell afresh)"
            if res.kept_errors else "")
    msg = f"{res.ran} episodes run{retried}, {res.skipped} already done{kept}, {res.errors} errors -> {res.log}"
    if res.selection:
        msg += f"\n{selection_line(res, spec.limit)}"
    if res.stopped_by_cost:
        msg += f" (stopped at the spend cap: ${res.cost:.4f})"
    if res.unknown_cost_calls:
        msg += f" ({res.unknown_cost_calls} model calls of unknown cost)"
    if res.replaced_cost:
        msg += f" (${res.cost:.4f} paid in all, ${res.replaced_cost:.4f} of it by replaced transient-error records)"
    print(msg)
    if all_failed(res):
        print(f"countgym: error: {failure_summary(res)}", file=sys.stderr)
        return 1
    for line in res.error_messages[:5]:
        print(f"  error: {_scrub(line)}", file=sys.stderr)
    from countgym.cells import log_files_of

    _print_glance(log_files_of(res.log), Path(args.out))
    return 0


def selection_line(res: Any, limit: int | None) -> str:
    """Which stimuli a cell holds after a run, and how that relates to what the run asked for."""
    line = f"the cell holds {res.selection}"
    if "not a prefix" in res.selection:
        return line + " (written under an older --limit rule; --force starts the cell afresh)"
    if res.held > res.asked:
        line += (f": more than this run's --limit {limit} (its first {res.asked}), from an earlier run;"
                 " the table shows all it holds")
    return line


def _print_glance(files: Sequence[Path], out: Path) -> None:
    """The results table of some cell logs, then where the full tables come from; a table
    that cannot be computed is a warning (the episodes are safe in their logs)."""
    from countgym.analysis.glance import glance_of_logs, render

    if not files:
        return
    try:
        g = glance_of_logs(files, cache_dir=out)
    except Exception as e:  # noqa: BLE001 - the run succeeded; only its summary is missing
        print(f"countgym: warning: no results table ({type(e).__name__}: {_scrub(str(e))})", file=sys.stderr)
        return
    if g is not None:
        where = f"full tables, CIs and report: countgym audit {out} --out {out}-audit"
        sys.stdout.write(render(g, where=where))


def all_failed(res: Any) -> bool:
    """Every episode this invocation ran ended in error (a cell that ran nothing has not failed)."""
    return res.ran > 0 and res.errors == res.ran


def failure_summary(res: Any) -> str:
    """One line for a cell whose episodes all failed: how many, the first error, the log."""
    first = (_scrub(res.error_messages[0]).splitlines() or [""])[0] if res.error_messages else "no message"
    if len(first) > 200:
        first = first[:197] + "..."
    return _scrub(f"all {res.ran} episodes ended in error (first: {first}); they are recorded in {res.log}")


def same_model_judge(make: Any, options: dict[str, Any]) -> Any:
    """``judge_backend`` for ``--judge same``: each run's own model, at the endpoint the auditor
    names (``--judge-option api_base=URL``), never at the one its log names. A record whose log
    names an endpoint is left unresolved (with a note) unless the auditor named one."""
    unknown = sorted(set(options) - {"api_base"})
    if unknown:
        raise UserError(f"--judge same takes only --judge-option api_base=URL, got {', '.join(unknown)}")
    api_base = options.get("api_base")
    if api_base is not None and (not isinstance(api_base, str) or not api_base.strip()):
        raise UserError(f"--judge-option api_base must be a URL, got {api_base!r}")

    def build(model: str, log_api_base: str | None) -> Any:
        if make is None:
            raise UserError("no backend builds the run's own model")
        if api_base is None and log_api_base:
            raise UserError("its log names an endpoint; name one yourself with --judge-option api_base=URL "
                            "(an endpoint from a log never receives your key)")
        return make(model, api_base)

    return build


def _write_audit(write: Any, logs: Any, args: argparse.Namespace, judge: Any, parser: Any, hooks: dict[str, Any]) -> Any:
    """``write_audit_files`` as ``countgym audit`` calls it."""
    from countgym.analysis.viewer import ViewerOptions

    return write(
        logs,
        Path(args.out),
        judge=judge,
        parser=parser,
        **hooks,
        warn=lambda line: print(f"warning: {_scrub(line)}", file=sys.stderr),
        n_resamples=args.resamples,
        report=True,
        viewer=ViewerOptions(max_episodes=args.viewer_episodes),
        command=["countgym", "audit", *args.runs, "--out", str(args.out)],
    )


def cmd_audit(args: argparse.Namespace) -> int:
    from countgym.analysis.tables import write_audit_files
    from countgym.logs import find_logs

    logs = find_logs(args.runs)
    if not logs:
        raise UserError(f"no episode logs (*.jsonl) found in {' '.join(args.runs)}")
    from countgym.integrations.vf_results import episode_logs

    logs = episode_logs(logs, Path(args.out) / "vf-eval")  # vf-eval traces.jsonl (0.4) / results.jsonl (0.3), read as episode logs
    from countgym.agents.backends import make_backend
    from countgym.agents.registry import audit_hooks
    from countgym.analysis.extraction import SAME_MODEL

    if args.no_judge and (args.judge or args.judge_option):
        raise UserError("--no-judge cannot be combined with --judge or --judge-option")
    if args.parser_option and not args.parser:
        raise UserError("--parser-option needs --parser MODEL")
    # The judge is the run's own model (the paper's setting), but never at an endpoint a log
    # names: a shared run folder must not be able to collect the auditor's key
    # (``same_model_judge``); such replies count as no answer and the report says how to judge them.
    judge: Any = None
    hooks = audit_hooks()
    if args.judge is None and not args.no_judge:
        args.judge = SAME_MODEL  # the paper's setting (CounterCount, Section 3)
    from countgym.simulate import SimulatedJudges

    simulated = SimulatedJudges()  # replies of a simulated model are judged by it (a local server)
    if args.judge == SAME_MODEL:
        judge = SAME_MODEL
        own = same_model_judge(hooks.get("judge_backend"), _parse_kv(args.judge_option))
        hooks = {**hooks, "judge_backend": simulated.judge_backend(own)}
    elif args.judge:
        judge = make_backend(args.judge, **_parse_kv(args.judge_option))
    parser = make_backend(args.parser, **_parse_kv(args.parser_option)) if args.parser else None
    with simulated:
        files = _write_audit(write_audit_files, logs, args, judge, parser, hooks)
    for name, path in files.tables.items():
        print(f"{name}: {path}")
    print(f"figures: {len(files.figures)} in {Path(args.out) / 'figures'}")
    if files.report is not None:
        shown = f" (viewer: {files.viewer_shown} of {files.viewer_total} episodes)" if files.viewer_total else ""
        print(f"report: {files.report}{shown}")
    from countgym.analysis.glance import glance_of_audit, render

    where = f"full tables (all columns, 95 % CIs): {files.tables['summary']}"
    if files.report is not None:
        where += f"; report: {files.report}"
    sys.stdout.write(render(glance_of_audit(args.out), where=where))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from countgym.integrations import export

    first = Path(args.source[0])
    base = first if first.is_dir() else first.parent
    if args.images and args.fmt != "inspect":
        raise UserError("--images applies to --format inspect only")
    if args.fmt == "hf":
        if args.out is None:
            raise UserError("--format hf needs --out DIR")
        if len(args.source) != 1:
            raise UserError("--format hf exports one dataset: give one folder or battery name")
        out = export.export_hf_dataset(args.source[0], args.out)
        print(f"wrote {out}: datasets.load_dataset('parquet', data_files='{out}/data/*.parquet')")
    elif args.fmt == "parquet":
        out = export.export_parquet(args.source, args.out or base / "episodes.parquet")
        print(f"wrote {out}")
    else:
        paths = export.export_inspect(args.source, args.out or base / "inspect", images=args.images)
        for p in paths:
            print(f"wrote {p}")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from countgym.scenes.cache import cache_root
    from countgym.scenes.cache_admin import (
        cache_entries,
        clean_cache,
        format_bytes,
        refuse_unmarked,
        unmarked_roots,
    )

    unmarked = unmarked_roots()  # adopts an old countgym cache; a folder of other files stays unmarked
    if getattr(args, "cache_command", None) == "clean":
        refuse_unmarked(unmarked)
        entries = cache_entries()
        if args.names and (args.partial or args.everything):
            raise UserError("cache clean: give entry names, or --partial/--all, not both")
        known = {e.name for e in entries}
        unknown = [n for n in args.names if n not in known]
        if unknown:
            raise UserError(f"cache clean: no entry {unknown[0]!r} in {cache_root()} (see: countgym cache)")
        gone = clean_cache(entries, partial=args.partial, everything=args.everything,
                           names=args.names, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        for e in gone:
            print(f"{verb} {e.path} ({e.state}, {format_bytes(e.bytes)})")
        busy = [e for e in entries if e.state == "building"]
        for e in busy:
            print(f"kept {e.path}: a build is in progress", file=sys.stderr)
        print(f"{verb} {len(gone)} entries, {format_bytes(sum(e.bytes for e in gone))}")
        return 0
    entries = cache_entries()
    print(f"cache: {cache_root()} (set COUNTGYM_CACHE to move it)")
    for root in unmarked:
        print(f"  {root} holds files countgym did not make (no countgym marker): `countgym cache clean` "
              "will not touch it")
    if not entries:
        print("  (empty)")
        return 0
    width = max(len(e.name) for e in entries)
    for e in entries:
        items = f"{e.items} items" if e.items is not None else ""
        where = "" if e.path.parent == cache_root() else f"  [{e.path.parent.name}]"
        print(f"  {e.name:<{width}}  {e.state:<8}  {format_bytes(e.bytes):>9}  {items}{where}")
    total = sum(e.bytes for e in entries)
    stale = [e for e in entries if e.state == "stale"]
    partial = [e for e in entries if e.state == "partial"]
    print(f"{len(entries)} entries, {format_bytes(total)}")
    if (stale or partial) and not unmarked:
        print(f"clean up: countgym cache clean (stale: {len(stale)})"
              + (f"; countgym cache clean --partial (interrupted builds: {len(partial)})" if partial else ""))
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from countgym.envs.replay import contact_sheet, replay_observation, write_png
    from countgym.logs import find_logs, iter_records
    from countgym.scenes import resolve_dataset

    path = Path(args.runfile)
    if not path.exists():
        raise UserError(f"no such log file or run folder: {path}")
    logs = find_logs([path])
    if args.list_ids:
        return _list_episodes(iter_records(logs))
    if not args.episode:
        raise UserError("replay needs --episode ID (and --out IMAGE.png for the image; without it, "
                        f"the transcript is printed); see the ids with: countgym replay {path} --list")
    rec = _find_episode(iter_records(logs), args.episode, path)
    ds = resolve_dataset(args.data or rec.dataset)
    if not args.out or args.text:
        _print_transcript(rec, ds)
        if not args.out:
            return 0
    img = replay_observation(rec, ds, args.step)
    if img.ndim == 4:
        if args.frames:
            out = Path(args.out)
            if out.exists() and not out.is_dir():
                raise UserError(f"--out {out} is a file; with --frames give a folder")
            indices = _frame_numbers(rec, ds, len(img))
            for number, frame in zip(indices, img, strict=True):
                write_png(frame, out / f"frame_{number:04d}.png")
            print(f"wrote {len(img)} frames to {out}")
            return 0
        img = contact_sheet(img)
    elif args.frames:
        raise UserError(f"--frames needs a video episode; {rec.episode_id} shows one image")
    print(f"wrote {write_png(img, args.out)}")
    return 0


def _print_transcript(rec: Any, ds: Any) -> None:
    """Print what the model was asked (the first observation's system prompt, tool schema and
    user message) and every step's reply and environment message, as Inspect's transcript
    does. Model-written text is scrubbed of credentials and terminal control characters."""
    from countgym.envs.replay import first_observation_text

    def block(title: str, text: str | None) -> None:
        if text:
            print(f"--- {title} ---")
            print(_scrub(text))

    truth = rec.truth.n if rec.truth is not None else "?"
    print(f"episode {_scrub(rec.episode_id)}: arm {_scrub(rec.arm.name)}, model "
          f"{_scrub(rec.model)}, truth {truth}, answer {rec.answer}, end {rec.end}")
    try:
        asked = first_observation_text(rec, ds)
    except (UserError, KeyError, ValueError, OSError) as e:
        print(f"(the first observation's text cannot be rebuilt: {_scrub(str(e))})")
        asked = {}
    block("system prompt", asked.get("system"))
    block("tools (native protocol)", asked.get("tools"))
    block("user (first observation)", asked.get("user"))
    for st in rec.steps:
        block(f"step {st.index + 1}: model", st.reply)
        if st.parse_error:
            block(f"step {st.index + 1}: parse error", st.parse_error)
        block(f"step {st.index + 1}: environment", st.message)
    if rec.error:
        block("error", rec.error)


def _list_episodes(records: Any) -> int:
    """Print one line per logged episode: the id to give --episode, and what happened."""
    n = 0
    print("episode_id\tstimulus_id\ttruth\tanswer\tend")
    for r in records:
        truth = r.truth.n if r.truth is not None else ""
        answer = "" if r.answer is None else r.answer
        print(f"{_scrub(r.episode_id)}\t{_scrub(r.stimulus_id)}\t{truth}\t{answer}\t{r.end}")
        n += 1
    print(f"{n} episodes", file=sys.stderr)
    return 0


def _find_episode(records: Any, wanted: str, path: Path) -> Any:
    """The one episode named by its id, a unique suffix of the id (``STIMULUS/r0``), or its
    stimulus id (when that stimulus ran once)."""
    by_id: list[Any] = []
    by_stimulus: list[Any] = []
    for r in records:
        if r.episode_id == wanted or r.episode_id.endswith("/" + wanted.lstrip("/")):
            by_id.append(r)
        elif r.stimulus_id == wanted:
            by_stimulus.append(r)
    matches = by_id or by_stimulus
    if not matches:
        raise UserError(f"no episode {wanted!r} in {path} (list them: countgym replay {path} --list)")
    if len(matches) > 1:
        ids = ", ".join(sorted(_scrub(r.episode_id) for r in matches)[:4])
        more = ", ..." if len(matches) > 4 else ""
        raise UserError(f"{len(matches)} episodes match {wanted!r} in {path}: {ids}{more}; give one of them")
    return matches[0]


def _frame_numbers(rec: Any, ds: Any, n: int) -> list[int]:
    """The sampled frame numbers of a video stimulus (its position when not recorded)."""
    nums = ds[rec.stimulus_id].meta.get("frame_indices")
    if isinstance(nums, list) and len(nums) == n and all(isinstance(v, int) for v in nums):
        return nums
    return list(range(n))


def cmd_sweep(args: argparse.Namespace) -> int:
    from countgym.sweep import (
        describe_cells,
        expand,
        load_config,
        run_sweep,
        validate_cells,
        with_overrides,
    )

    cfg = with_overrides(load_config(args.config), out=args.out, limit=args.limit)
    if args.dry_run:
        skipped: list[Any] = []
        notes: list[str] = []
        cells = expand(cfg, skipped=skipped, notes=notes)
        labels, common = describe_cells(cells)
        for cell, label in zip(cells, labels, strict=True):
            print(f"{cell.log_name()}  {label}")
        for sk in skipped:
            print(f"skipped: {sk.agent} on {sk.env} {sk.dataset} ({sk.reason})")
        for line in notes:
            print(line)
        print(f"{len(cells)} cell{'s' if len(cells) != 1 else ''}" + (f"; common options: {common}" if common else ""))
        sys.stdout.flush()
        # Then what the run checks before its first call (model ids, options, folders): a config
        # the dry run accepts is one the run accepts.
        validate_cells(cfg, cells, build=False, check_policy=args.simulate is None)
        return 0
    if args.simulate is not None:
        if args.executor == "ray":
            raise UserError("--simulate runs on the local executor: drop --executor ray")
        from countgym.simulate import simulation

        with simulation(args.simulate) as sim:
            results = run_sweep(cfg, progress=not args.no_progress, force=args.force,
                                retry_errors=not args.no_retry_errors, prepare=sim.prepare)
    elif args.executor == "ray":
        from countgym.executors.ray_executor import run_sweep_ray

        results = run_sweep_ray(cfg, progress=not args.no_progress, force=args.force,
                                retry_errors=not args.no_retry_errors)
    else:
        results = run_sweep(cfg, progress=not args.no_progress, force=args.force,
                            retry_errors=not args.no_retry_errors)
    ran = sum(r.ran for r in results)
    errors = sum(r.errors for r in results)
    cost = sum(r.cost for r in results)
    unknown = sum(r.unknown_cost_calls for r in results)
    unknown_note = f" (+ {unknown} model calls of unknown cost)" if unknown else ""
    print(f"{len(results)} cells, {ran} episodes run, {errors} errors, ${cost:.4f} recorded{unknown_note} -> {cfg.out}")
    held = Counter(r.selection for r in results if r.selection)
    if held:
        print("cells hold: " + "; ".join(f"{text} ({k} cell{'s' if k != 1 else ''})" for text, k in held.items()))
    from countgym.cells import log_files_of

    _print_glance([f for r in results for f in log_files_of(r.log)], Path(cfg.out))
    failed = [r for r in results if all_failed(r)]
    if failed:
        print(
            f"countgym: error: {len(failed)} of {len(results)} cells failed entirely; {failure_summary(failed[0])}",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_rehearse(args: argparse.Namespace) -> int:
    """``countgym rehearse``: every config under ``--simulate``, audited, injected vs recovered."""
    from countgym.rehearse import rehearse

    folder = Path(args.configs) if args.configs else None
    if folder is not None and not folder.is_dir():
        raise UserError(f"--configs {folder}: no such folder")
    rehearse(Path(args.out), scale=args.scale, profile=args.profile, configs=folder,
             progress=not args.no_progress)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from countgym.demo import run_demo

    run_demo(Path(args.out), subset=args.subset, progress=not args.no_progress)
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """``countgym list``: the catalogue of environments, batteries, arms and configs."""
    from pathlib import Path

    from countgym.catalog import render

    folder = Path(args.configs) if args.configs else None
    if folder is not None and not folder.is_dir():
        raise UserError(f"--configs {folder}: no such folder")
    sys.stdout.write(render(folder))
    return 0


COMMANDS = {
    "list": cmd_list,
    "demo": cmd_demo,
    "run": cmd_run,
    "sweep": cmd_sweep,
    "rehearse": cmd_rehearse,
    "audit": cmd_audit,
    "replay": cmd_replay,
    "cache": cmd_cache,
    "export": cmd_export,
}


_PATH_MISTAKES = (FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError)
_DISK_MISTAKES = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG}


def _path_error(e: OSError) -> str:
    """An OS error about a path as one line with the fix."""
    what = {
        FileNotFoundError: "no such file or folder",
        FileExistsError: "a file is in the way (a folder is needed there)",
        NotADirectoryError: "a file is in the way (a folder is needed there)",
        IsADirectoryError: "a folder is in the way (a file is needed there)",
        PermissionError: "permission denied",
    }.get(type(e), e.strerror or type(e).__name__)
    if e.errno in _DISK_MISTAKES:
        what = {errno.ENOSPC: "no space left on the disk (free some, then run again to resume)",
                errno.EROFS: "the folder is on a read-only file system (choose another --out)",
                errno.EDQUOT: "disk quota exceeded (free some, then run again to resume)",
                errno.EFBIG: "file too large for this file system"}[e.errno]
    path = e.filename if e.filename is not None else ""
    return f"{what}: {path}" if path else str(what)


def _stdout_closed() -> int:
    """The reader of our output went away (``countgym ... | head -1``): stop quietly, as Unix
    tools do (exit 141 = 128 + SIGPIPE), and keep Python from complaining when it flushes
    stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):
        pass
    return 141


def _announce_slow_imports() -> None:
    """Say on stderr what a run loads before its first model call when that takes seconds."""
    from countgym import notices

    notices.hook = lambda msg: print(f"countgym: {msg}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``countgym`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["testserver"]:
        # The test server owns its flags; argparse's REMAINDER would swallow them badly.
        from countgym.testing.server import main as serve

        return serve(argv[1:])
    args = build_parser().parse_args(argv)
    # Warnings (e.g. a skipped corrupt log line) are one line each, like errors.
    warnings.formatwarning = lambda msg, *a, **k: f"countgym: warning: {_scrub(str(msg))}\n"
    _announce_slow_imports()
    try:
        rc = cmd_scenes_make(args) if args.command == "scenes" else COMMANDS[args.command](args)
        sys.stdout.flush()  # a reader that went away shows here, not in Python's exit handler
        return rc
    except UserError as e:
        print(f"countgym: error: {_scrub(str(e))}", file=sys.stderr)
        return 2
    except _PATH_MISTAKES as e:
        # An --out that is a file, a folder without write permission, a missing path: the user's
        # to fix, so one line and exit 2, like every other user mistake.
        print(f"countgym: error: {_path_error(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("countgym: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as e:
        if _stdout_is_closed():
            return _stdout_closed()
        return _internal_error(e)
    except OSError as e:
        if e.errno not in _DISK_MISTAKES:
            return _internal_error(e)
        # A full disk or a read-only folder: the user's to fix; the logs stay resumable.
        print(f"countgym: error: {_path_error(e)}", file=sys.stderr)
        return 2
    except ValueError as e:
        if "null byte" not in str(e):
            return _internal_error(e)
        print("countgym: error: a path holds a NUL character; remove it", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - last resort: one line, exit 1
        return _internal_error(e)


def _internal_error(e: Exception) -> int:
    if os.environ.get("COUNTGYM_DEBUG"):
        raise e
    print(f"countgym: internal error: {type(e).__name__}: {_scrub(str(e))} (set COUNTGYM_DEBUG=1 for a traceback)",
          file=sys.stderr)
    return 1


def _stdout_is_closed() -> bool:
    """Whether the broken pipe is our stdout (its reader left), not a socket or a child's pipe."""
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
    except (AttributeError, OSError, ValueError):
        return True  # no way to look (captured stream, no poll): the usual cause is stdout
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


def _scrub(text: str) -> str:
    """Text that may come from a provider or a model, as printed: secrets masked, terminal
    control sequences removed (``countgym.termtext``)."""
    from countgym.secrets import scrub_text
    from countgym.termtext import terminal_safe

    return terminal_safe(scrub_text(text))


if __name__ == "__main__":
    raise SystemExit(main())
