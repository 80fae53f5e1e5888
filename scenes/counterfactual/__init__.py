"""CounterCount (*CounterCount*, Section 2 and Appendix B): factual/counterfactual pairs.

``make_countercount`` writes the procedural battery (drawn subjects, no download);
``load_countercount`` reads the released data from a user-given root; ``blur_outside`` and
``mask_bb`` are the region tools the interventions and internals analyses use.
"""

from .categories import canonical_category
from .draw import SIZE, Layer, Scene, rasterize, render
from .generator import (
    BATTERY,
    GENERATOR_VERSION,
    SUBJECTS,
    PairSpec,
    cached_countercount,
    draw,
    make_countercount,
    pair_specs,
    resolve_countercount,
)
from .interventions import (
    BLUR_RADIUS,
    BLUR_SWEEP,
    FEATHER,
    blur_outside,
    box_mask,
    load_mask,
    mask_bb,
    scale_box,
)
from .loader import CounterCountRelease, load_countercount
from .spec import CATEGORIES, Subject

__all__ = [
    "BATTERY",
    "BLUR_RADIUS",
    "BLUR_SWEEP",
    "CATEGORIES",
    "FEATHER",
    "GENERATOR_VERSION",
    "SIZE",
    "SUBJECTS",
    "CounterCountRelease",
    "Layer",
    "PairSpec",
    "Scene",
    "Subject",
    "blur_outside",
    "box_mask",
    "canonical_category",
    "cached_countercount",
    "draw",
    "load_countercount",
    "load_mask",
    "make_countercount",
    "mask_bb",
    "pair_specs",
    "rasterize",
    "render",
    "resolve_countercount",
    "scale_box",
]
