"""Stimulus generators and dataset loaders.

DotArrays (*Give the Model a Finger*, Appendix D): ``make_battery`` writes a battery folder,
``resolve_dataset`` turns a folder, a battery name or ``NAME:SUBSET`` into a ``Dataset``.
"""

from .batteries import (
    BATTERIES,
    SUBSETS,
    SubsetDataset,
    battery_specs,
    cache_root,
    make_battery,
    resolve_dataset,
    select_subset,
    subset_ids,
)
from .dotarrays import ArraySpec, derive_seed, generate

__all__ = [
    "BATTERIES",
    "SUBSETS",
    "ArraySpec",
    "SubsetDataset",
    "battery_specs",
    "cache_root",
    "derive_seed",
    "generate",
    "make_battery",
    "resolve_dataset",
    "select_subset",
    "subset_ids",
]
