"""CountVideoBench (*CountVideoBench*, Section 4 and Appendix B): design, geometry, renderers.

- ``specs``: 26 cardinalities x 10 classes x 10 videos = 2,600, seeds, balanced subsets;
- ``geometry``: the renderer-independent ground truth (camera, placement, visibility);
- ``fast_render``: the default numpy/Pillow renderer; ``blender``: the optional Cycles renderer;
- ``dataset``: ``make_countvideo`` writes a dataset folder; ``released``: the downloaded benchmark.
"""

from .dataset import (
    BATTERY,
    GENERATOR_VERSION,
    RENDERERS,
    SIZES,
    cached_countvideo,
    make_countvideo,
    select_specs,
    video_geometry,
)
from .geometry import (
    CANDIDATE_CAP,
    READING,
    READINGS,
    RENDERED_FRAMES,
    SAMPLED_FRAMES,
    CameraPose,
    SceneGeometry,
    generate_geometry,
    with_reading,
)
from .released import load_released_countvideo
from .specs import (
    ANCHORS,
    CARDINALITIES,
    CLASSES,
    COLORS,
    SHAPES,
    VideoSpec,
    balanced_subset,
    design,
    video_seed,
)

__all__ = [
    "ANCHORS",
    "BATTERY",
    "CANDIDATE_CAP",
    "CARDINALITIES",
    "CLASSES",
    "COLORS",
    "GENERATOR_VERSION",
    "READING",
    "READINGS",
    "RENDERED_FRAMES",
    "RENDERERS",
    "SAMPLED_FRAMES",
    "SHAPES",
    "SIZES",
    "CameraPose",
    "SceneGeometry",
    "VideoSpec",
    "balanced_subset",
    "cached_countvideo",
    "design",
    "generate_geometry",
    "load_released_countvideo",
    "make_countvideo",
    "select_specs",
    "video_geometry",
    "video_seed",
    "with_reading",
]
