"""Real-photograph datasets from user-given releases: FSC-147, PixMo-Count, CountBench(QA).

None of these can be redistributed, so each loader reads the official release from a folder the
user names (``$COUNTGYM_FSC147_ROOT``, ``$COUNTGYM_PIXMO_ROOT``, ``$COUNTGYM_COUNTBENCH_ROOT``, or
the folder itself as the dataset), selects the paper's images deterministically and writes an
ordinary dataset folder (``manifest.jsonl`` + images) that ``CountImageEnv`` reads. Layouts,
selection rules and name normalisation: docs/photos.md.

    from countgym.scenes.photos import prepare_fsc147, resolve_photo_dataset
    prepare_fsc147("~/data/FSC147_384_V2", "datasets/fsc147")   # 200 images, 768 px high
    ds = resolve_photo_dataset("fsc147:common")                  # 100, via $COUNTGYM_FSC147_ROOT
"""

from .common import (
    DERIVED_CACHE_ENV,
    NOUN_OVERRIDES,
    SUBSETS_KEY,
    PhotoSubsetDataset,
    derived_cache_root,
    noun_forms,
    url_image_stem,
)
from .countbench import download_countbench_images, prepare_countbench, read_countbench
from .download import DownloadReport, RejectedImage, check_image_bytes, download_images
from .fsc147 import check_fsc147_release, prepare_fsc147, read_fsc147, select_fsc147
from .pixmo import download_pixmo_images, prepare_pixmo, read_pixmo_table
from .resolve import (
    ENV_IDS,
    PAPER_SUBSETS,
    PHOTO_SETS,
    PhotoSet,
    detect_release,
    download_photo_images,
    make_photo_set,
    open_photo_set,
    photo_set,
    release_root,
    resolve_photo_dataset,
)

__all__ = [
    "DERIVED_CACHE_ENV",
    "ENV_IDS",
    "NOUN_OVERRIDES",
    "PAPER_SUBSETS",
    "PHOTO_SETS",
    "SUBSETS_KEY",
    "DownloadReport",
    "PhotoSet",
    "PhotoSubsetDataset",
    "RejectedImage",
    "check_fsc147_release",
    "check_image_bytes",
    "derived_cache_root",
    "detect_release",
    "download_countbench_images",
    "download_images",
    "download_photo_images",
    "download_pixmo_images",
    "make_photo_set",
    "noun_forms",
    "open_photo_set",
    "photo_set",
    "prepare_countbench",
    "prepare_fsc147",
    "prepare_pixmo",
    "read_countbench",
    "read_fsc147",
    "read_pixmo_table",
    "release_root",
    "resolve_photo_dataset",
    "select_fsc147",
    "url_image_stem",
]
