"""``countgym demo``: the main job end to end on the embedded default, with no keys and no GPU.

Generates the registry's demo subset of an image battery, runs two model-free policies (``blob-counter``, which looks at
pixels, and ``noisy-pointer``, an oracle with injected errors) through the real tag loop, audits
the logs and prints the results table.
"""

from __future__ import annotations

from pathlib import Path

from countgym.cells import CellSpec
from countgym.errors import UserError
from countgym.registration import DEMO_DATASET
from countgym.runner import run_cell

DEMO_AGENTS: dict[str, dict] = {
    "blob-counter": {},
    "noisy-pointer": {"sigma": 4.0, "omission": 0.10, "duplicate": 0.05, "phantom": 0.05, "slip": 0.10},
}
SUMMARY_COLUMNS = {
    "arm": "arm", "n_episodes": "episodes", "em": "EM", "acc10": "Acc@10%", "mae": "MAE",
    "coverage": "coverage", "on_target_per100": "on-target", "duplicate_per100": "duplicate",
    "phantom_per100": "phantom", "omission_per100": "omission",
    "cardinality_consistency": "card.cons.", "pointing_error": "pointing err",
}


def run_demo(out: Path, *, subset: str = DEMO_DATASET, progress: bool = True) -> dict[str, Path]:
    """Run the demo into ``out`` and return the paths of the written tables."""
    from countgym.analysis.tables import write_audit_files
    from countgym.scenes import make_battery

    battery, _, sub = subset.partition(":")
    out = out.resolve()
    data = out / "data"
    if not (data / "manifest.jsonl").is_file():
        print(f"[1/3] generating the {battery} battery into {data}")
        make_battery(battery, data, progress=progress)
    dataset = f"{data}:{sub}" if sub else str(data)
    runs = out / "runs"
    print(f"[2/3] running {', '.join(DEMO_AGENTS)} through the tag loop on {subset}")
    for agent, options in DEMO_AGENTS.items():
        spec = CellSpec(dataset=dataset, agent=agent, agent_options=options, env_options={"tools": ["tag"]})
        res = run_cell(spec, runs, progress=progress)
        if res.errors:
            raise UserError(f"{res.errors} demo episodes failed: {res.error_messages[:3]}")
    print(f"[3/3] auditing {runs}")
    files = write_audit_files([runs], out / "audit")
    _print_summary(files.tables["summary"])
    print("\n".join(f"wrote {p}" for p in files.tables.values()))
    if files.report is not None:
        print(f"wrote {files.report}  <- open it in a browser")
    return files.tables


def _print_summary(path: Path) -> None:
    import pandas as pd

    df = pd.read_csv(path)
    cols = [c for c in SUMMARY_COLUMNS if c in df.columns]
    table = df[cols].rename(columns=SUMMARY_COLUMNS)
    print("\nAudit rates are per 100 ground-truth objects; pointing error in thousandths of the image side.")
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.precision", 3):
        print(table.to_string(index=False))
    print()
