"""The ``countgym`` command line (contracts.md). Exit codes: 0 ok, 2 user mistake, 1 internal error."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from countgym.errors import UserError


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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="countgym", description="Measure and improve how vision-language models count.")
    from countgym import __version__

    p.add_argument("--version", action="version", version=f"countgym {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    d = sub.add_parser("demo", help="generate a DotArrays subset, run two model-free policies, audit")
    d.add_argument("--out", default="countgym-demo", help="output folder (default: countgym-demo)")
    d.add_argument("--subset", default="dotarrays-main:common", help="battery[:subset] to run on")
    d.add_argument("--no-progress", action="store_true")

    sc = sub.add_parser("scenes", help="stimulus batteries")
    scs = sc.add_subparsers(dest="scenes_command", required=True, parser_class=_Parser)
    mk = scs.add_parser("make", help="write a battery as a dataset folder (manifest.jsonl + media)")
    mk.add_argument("battery")
    mk.add_argument("--out", required=True)
    mk.add_argument("--seed", type=_non_negative_int, default=0)
    mk.add_argument("--per-level", type=_positive_int, default=None)
    mk.add_argument("--limit", type=_positive_int, default=None)
    mk.add_argument("--renderer", default=None, help="countvideo: fast (default), blender/cycles, eevee, workbench")
    mk.add_argument("--size", type=_frame_size, default=None, help="countvideo frame size: WxH, full, half or quarter")
    mk.add_argument("--video", action="store_true", help="countvideo: also write an MP4 of each clip")
    mk.add_argument("--data", default=None, help="fsc147 / pixmo / countbench: the release folder")
    mk.add_argument("--no-progress", action="store_true")
    dl = scs.add_parser("download", help="fetch the listed images of a photo release (pixmo, countbench)")
    dl.add_argument("name", choices=["pixmo", "countbench"])
    dl.add_argument("--data", required=True, help="the release folder; images go to DATA/images")
    dl.add_argument("--no-progress", action="store_true")

    r = sub.add_parser("run", help="run one cell: dataset x agent x model")
    r.add_argument("--data", required=True, help="dataset folder or battery name (battery[:subset])")
    r.add_argument("--agent", required=True, help="built-in arm/policy or package.module:ClassName")
    r.add_argument("--model", default="", help="model id for model-backed arms")
    r.add_argument("--tools", nargs="+", default=None, help="enabled tools (tag crop erase grid)")
    r.add_argument("--budget", type=_non_negative_int, default=None, help="tool-call budget T")
    r.add_argument("--no-verify", action="store_true", help="ablation: no verification prompt")
    r.add_argument("--plain-marks", action="store_true", help="ablation: tags without numbers")
    r.add_argument("--order", choices=["reading", "reverse"], default=None)
    r.add_argument("--no-thinking", action="store_true", help="control: reasoning off / minimal effort")
    r.add_argument("--perturb", choices=["remove", "add"], default=None)
    r.add_argument("--agent-option", action="append", default=[], metavar="KEY=VALUE",
                   help="policy constructor option (repeatable), e.g. omission=0.2")
    r.add_argument("--out", default="runs", help="run folder (default: runs)")
    r.add_argument("--concurrency", type=_positive_int, default=1)
    r.add_argument("--limit", type=_positive_int, default=None)
    r.add_argument("--repeats", type=_positive_int, default=1)
    r.add_argument("--seed", type=_non_negative_int, default=0)
    r.add_argument("--max-cost", type=float, default=None, help="stop starting episodes at this spend (USD)")
    r.add_argument("--force", action="store_true", help="discard this cell's log and run again")
    r.add_argument("--no-progress", action="store_true")

    sw = sub.add_parser("sweep", help="run a grid of cells from a TOML/YAML config (resumable)")
    sw.add_argument("config")
    sw.add_argument("--executor", choices=["local", "ray"], default="local",
                    help="ray: shard episodes into Ray tasks (local instance, or the cluster at RAY_ADDRESS)")
    sw.add_argument("--force", action="store_true", help="discard the logs of the sweep's cells and rerun")
    sw.add_argument("--dry-run", action="store_true", help="list the cells and exit")
    sw.add_argument("--no-progress", action="store_true")

    sub.add_parser("testserver", help="a local OpenAI-compatible server that answers like a model",
                        add_help=False)  # handled in main()

    a = sub.add_parser("audit", help="audit episode logs: episodes.csv, summary.csv")
    a.add_argument("runs", nargs="+", help="run folders or log files")
    a.add_argument("--out", required=True)
    a.add_argument("--viewer-episodes", type=_non_negative_int, default=40,
                   help="episodes in the report's trajectory viewer (0: no viewer; default 40)")
    a.add_argument("--resamples", type=_positive_int, default=2000, help="bootstrap resamples (default 2000)")
    a.add_argument("--judge", default=None, metavar="MODEL",
                   help="CounterCount: resolve replies with several numbers with this model (cached)")
    a.add_argument("--judge-option", action="append", default=[], metavar="KEY=VALUE",
                   help="backend option for the judge (repeatable), e.g. api_base=...")

    rp = sub.add_parser("replay", help="re-render one observation of a logged episode")
    rp.add_argument("runfile")
    rp.add_argument("--episode", required=True, help="episode id (or a unique suffix of it)")
    rp.add_argument("--step", type=_non_negative_int, default=None,
                    help="observation index: 0 = first observation, k = after step k (default: last)")
    rp.add_argument("--out", required=True,
                    help="PNG file to write (video: a contact sheet of the sampled frames, or a folder with --frames)")
    rp.add_argument("--frames", action="store_true",
                    help="video episodes: write one PNG per sampled frame into the folder --out")
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
    return out


def cmd_scenes_download(args: argparse.Namespace) -> int:
    from countgym.scenes.photos import download_photo_images

    report = download_photo_images(args.name, args.data, progress=not args.no_progress)
    print(
        f"{report.downloaded} downloaded, {report.present} already present, "
        f"{len(report.dead)} dead links skipped, {len(report.failed)} failed (re-run to retry)"
    )
    return 0


def cmd_scenes_make(args: argparse.Namespace) -> int:
    from countgym.scenes import make_battery

    if args.scenes_command == "download":
        return cmd_scenes_download(args)
    if args.battery in ("fsc147", "pixmo", "countbench"):
        from countgym.scenes.photos import make_photo_set

        if args.data is None:
            raise UserError(f"{args.battery} is built from its official release: pass --data RELEASE_ROOT")
        print(f"wrote {make_photo_set(args.battery, args.data, Path(args.out), progress=not args.no_progress)}")
        return 0
    if args.data is not None:
        raise UserError(f"--data applies to the photo sets (fsc147, pixmo, countbench), not {args.battery!r}")
    kwargs: dict[str, Any] = {"seed": args.seed, "limit": args.limit, "progress": not args.no_progress}
    if args.battery == "countvideo":
        from countgym.scenes.video import make_countvideo

        video_kwargs: dict[str, Any] = {**kwargs, "per_level": args.per_level, "renderer": args.renderer or "fast"}
        if args.size:
            video_kwargs["size"] = args.size
        if args.video:
            video_kwargs["video"] = True
        print(f"wrote {make_countvideo(Path(args.out), **video_kwargs)}")
        return 0
    if args.battery == "countercount":
        from countgym.scenes.counterfactual import make_countercount

        if args.per_level is not None or args.renderer is not None:
            raise UserError("--per-level and --renderer do not apply to countercount (--limit counts pairs)")
        print(f"wrote {make_countercount(Path(args.out), **kwargs)}")
        return 0
    if args.per_level is not None:
        kwargs["per_level"] = args.per_level
    if args.renderer is not None:
        kwargs["renderer"] = args.renderer
    try:
        out = make_battery(args.battery, Path(args.out), **kwargs)
    except TypeError as e:
        raise UserError(f"battery {args.battery!r} does not take that option: {e}") from None
    print(f"wrote {out}")
    return 0


def cell_from_args(args: argparse.Namespace) -> Any:
    from countgym.agents.registry import cell_env_options, is_model_arm
    from countgym.runner import CellSpec

    _check_agent_name(args.agent)
    ablations: dict[str, Any] = {}
    if args.no_verify:
        ablations["verify"] = False
    if args.plain_marks:
        ablations["numbered"] = False
    if args.order:
        ablations["order"] = args.order
    if args.perturb:
        ablations["perturb"] = args.perturb
    env_options = cell_env_options(args.agent, tools=args.tools, budget=args.budget, **ablations)
    agent_options = _parse_kv(args.agent_option)
    if args.no_thinking:
        if not is_model_arm(args.agent):
            raise UserError("--no-thinking applies to model arms only")
        agent_options["thinking"] = False
    if args.model and not is_model_arm(args.agent) and ":" not in args.agent:
        raise UserError(f"agent {args.agent!r} is model-free; drop --model")
    return CellSpec(
        dataset=args.data,
        agent=args.agent,
        model=args.model,
        env_options=env_options,
        agent_options=agent_options,
        repeats=args.repeats,
        limit=args.limit,
        seed=args.seed,
    )


def _check_agent_name(agent: str) -> None:
    """Unknown built-in names fail here with the list of valid ones (plug-ins are checked on load)."""
    from countgym.agents.registry import BUILTIN_POLICIES, is_model_arm, model_arms

    if ":" in agent or agent in BUILTIN_POLICIES or is_model_arm(agent):
        return
    if agent.startswith("cf-"):
        from countgym.agents.cf_arm import parse_cf_arm

        parse_cf_arm(agent)  # raises a UserError naming the valid format and interventions
    names = sorted([*BUILTIN_POLICIES, *model_arms(), "video-p1", "video-p2", "video-p3", "cf-mcq[+...]", "cf-oe[+...]"])
    raise UserError(f"unknown agent {agent!r}: use one of {', '.join(names)} or package.module:ClassName")


def cmd_run(args: argparse.Namespace) -> int:
    from countgym.runner import run_cell

    spec = cell_from_args(args)
    res = run_cell(
        spec,
        args.out,
        concurrency=args.concurrency,
        max_cost=args.max_cost,
        force=args.force,
        progress=not args.no_progress,
    )
    msg = f"{res.ran} episodes run, {res.skipped} already done, {res.errors} errors -> {res.log}"
    if res.stopped_by_cost:
        msg += f" (stopped at the spend cap: ${res.cost:.4f})"
    print(msg)
    for line in res.error_messages[:5]:
        print(f"  error: {line}", file=sys.stderr)
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from countgym.analysis.tables import write_audit_files
    from countgym.analysis.viewer import ViewerOptions
    from countgym.logs import find_logs

    logs = find_logs(args.runs)
    if not logs:
        raise UserError(f"no episode logs (*.jsonl) found in {' '.join(args.runs)}")
    judge = None
    if args.judge:
        from countgym.agents.backends import make_backend

        judge = make_backend(args.judge, **_parse_kv(args.judge_option))
    files = write_audit_files(
        logs,
        Path(args.out),
        judge=judge,
        n_resamples=args.resamples,
        report=True,
        viewer=ViewerOptions(max_episodes=args.viewer_episodes),
    )
    for name, path in files.tables.items():
        print(f"{name}: {path}")
    print(f"figures: {len(files.figures)} in {Path(args.out) / 'figures'}")
    if files.report is not None:
        shown = f" (viewer: {files.viewer_shown} of {files.viewer_total} episodes)" if files.viewer_total else ""
        print(f"report: {files.report}{shown}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from countgym.envs.replay import contact_sheet, replay_observation, write_png
    from countgym.logs import iter_records
    from countgym.scenes import resolve_dataset

    path = Path(args.runfile)
    if not path.is_file():
        raise UserError(f"no such log file: {path}")
    matches = [r for r in iter_records([path]) if r.episode_id == args.episode or r.episode_id.endswith(args.episode)]
    if not matches:
        raise UserError(f"no episode {args.episode!r} in {path}")
    if len(matches) > 1:
        raise UserError(f"{len(matches)} episodes match {args.episode!r} in {path}; give the full id")
    rec = matches[0]
    ds = resolve_dataset(args.data or rec.dataset)
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


def _frame_numbers(rec: Any, ds: Any, n: int) -> list[int]:
    """The sampled frame numbers of a video stimulus (its position when not recorded)."""
    nums = ds[rec.stimulus_id].meta.get("frame_indices")
    if isinstance(nums, list) and len(nums) == n and all(isinstance(v, int) for v in nums):
        return nums
    return list(range(n))


def cmd_sweep(args: argparse.Namespace) -> int:
    from countgym.sweep import expand, load_config, run_sweep

    cfg = load_config(args.config)
    if args.dry_run:
        for cell in expand(cfg):
            print(f"{cell.log_name()}  {cell.agent} {cell.model} on {cell.dataset} {cell.env_options}")
        return 0
    if args.executor == "ray":
        from countgym.executors.ray_executor import run_sweep_ray

        results = run_sweep_ray(cfg, progress=not args.no_progress, force=args.force)
    else:
        results = run_sweep(cfg, progress=not args.no_progress, force=args.force)
    ran = sum(r.ran for r in results)
    errors = sum(r.errors for r in results)
    cost = sum(r.cost for r in results)
    print(f"{len(results)} cells, {ran} episodes run, {errors} errors, ${cost:.4f} recorded -> {cfg.out}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from countgym.demo import run_demo

    run_demo(Path(args.out), subset=args.subset, progress=not args.no_progress)
    return 0


COMMANDS = {
    "demo": cmd_demo,
    "run": cmd_run,
    "sweep": cmd_sweep,
    "audit": cmd_audit,
    "replay": cmd_replay,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``countgym`` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["testserver"]:
        # The test server owns its flags; argparse's REMAINDER would swallow them badly.
        from countgym.agents.testserver import main as serve

        return serve(argv[1:])
    args = build_parser().parse_args(argv)
    # Warnings (e.g. a skipped corrupt log line) are one line each, like errors.
    warnings.formatwarning = lambda msg, *a, **k: f"countgym: warning: {msg}\n"
    try:
        if args.command == "scenes":
            return cmd_scenes_make(args)
        return COMMANDS[args.command](args)
    except UserError as e:
        print(f"countgym: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("countgym: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - last resort: one line, exit 1
        if os.environ.get("COUNTGYM_DEBUG"):
            raise
        print(f"countgym: internal error: {type(e).__name__}: {e} (set COUNTGYM_DEBUG=1 for a traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
