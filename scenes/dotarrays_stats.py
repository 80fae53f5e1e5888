"""The matching threshold tau over a DotArrays battery (*Give the Model a Finger*, Appendix E).

Appendix E reports the per-image tau (half the median nearest-neighbour distance among the
ground-truth points, floored at 15 px) over the 272 DotArrays images: median 44 px, range
17-272. Images with one disc have no nearest neighbour and are left out (their tau would be
the floor). ``python -m countgym.scenes.dotarrays_stats`` prints the figures for the generator.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from countgym.matching import tau_for

from .batteries import battery_specs
from .dotarrays import ArraySpec, generate

PAPER_TAU = {"median": 44.0, "min": 17.0, "max": 272.0}
"""Appendix E: tau over the DotArrays battery, pixels."""


@dataclass(frozen=True)
class TauStats:
    """Per-image tau summarised over a group of images (pixels)."""

    group: str
    images: int
    median: float
    min: float
    max: float


def image_taus(specs: Iterable[ArraySpec]) -> list[tuple[ArraySpec, float]]:
    """``(spec, tau)`` for every image with at least two objects."""
    out = []
    for spec in specs:
        if spec.n < 2:
            continue
        stim, _ = generate(spec)
        out.append((spec, tau_for(np.asarray(stim.points, dtype=float))))
    return out


def tau_stats(battery: str = "dotarrays") -> list[TauStats]:
    """Tau over the whole battery, then per main-battery arrangement and per factor set."""
    taus = image_taus(battery_specs(battery))
    groups: dict[str, list[float]] = {"all": [t for _, t in taus]}
    for spec, t in taus:
        key = f"main/{spec.arrangement}" if spec.set == "main" else spec.set
        groups.setdefault(key, []).append(t)
    return [
        TauStats(k, len(v), float(np.median(v)), float(np.min(v)), float(np.max(v)))
        for k, v in groups.items()
    ]


def main(argv: list[str] | None = None) -> int:
    """Print the tau table of a battery next to the paper's figures."""
    args = sys.argv[1:] if argv is None else argv
    battery = args[0] if args else "dotarrays"
    print(f"{'group':<20}{'images':>7}{'median':>9}{'min':>8}{'max':>8}")
    for s in tau_stats(battery):
        print(f"{s.group:<20}{s.images:>7}{s.median:>9.1f}{s.min:>8.1f}{s.max:>8.1f}")
    p = PAPER_TAU
    print(f"{'paper (App. E)':<20}{'':>7}{p['median']:>9.1f}{p['min']:>8.1f}{p['max']:>8.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
