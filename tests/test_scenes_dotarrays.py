"""DotArrays generators, batteries, subsets, dataset folders and the cache."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from countgym.errors import UserError
from countgym.scenes import (
    BATTERIES,
    SubsetDataset,
    battery_specs,
    generate,
    make_battery,
    resolve_dataset,
    select_subset,
    subset_ids,
)
from countgym.scenes import batteries as bat
from countgym.scenes.cache_marks import ROOT_MARKER
from countgym.scenes.dotarrays import (
    GENERATOR_VERSION,
    JITTER,
    MIN_GAP,
    RADIUS,
    RANDOM_FIELD,
    SIDE,
    ArraySpec,
    random_centres,
)
from countgym.scenes.dotarrays_stats import PAPER_TAU, tau_stats
from countgym.stimulus import Dataset, Stimulus, write_manifest

# Pixel hashes (SHA-256 of the decoded RGB bytes, not of the PNG file: PNG bytes also depend
# on the zlib build, which is not the generator's business). Update only on purpose, with a
# GENERATOR_VERSION bump.
GOLDEN = {
    "main-random-n025-s0": "7c188ae599141640cefd7a1b7ba07cae27da96dbd0d8736448050ed3284eee17",
    "hetero-n015-s2": "a885575099a9f61c957f357ee3ec3a4b848b8fa1d9bce94b28666a158a8e9f29",
    "lattice-hex-n030-s3": "24eaae2075aa9386c76df2dfe8ab623a6cbdb235943a3d534ac33d3681df94fa",
}
ALL_BATTERIES = ("dotarrays", "dotarrays-xl", "lattice")  # dotarrays-main is inside dotarrays


@pytest.fixture(scope="module")
def stimuli() -> dict[str, Stimulus]:
    """Every distinct stimulus of the four batteries (362), images discarded."""
    out: dict[str, Stimulus] = {}
    for name in ALL_BATTERIES:
        for spec in battery_specs(name):
            out[spec.stimulus_id] = generate(spec)[0]
    return out


def _spec(stimulus_id: str) -> ArraySpec:
    for name in ALL_BATTERIES:
        for spec in battery_specs(name):
            if spec.stimulus_id == stimulus_id:
                return spec
    raise KeyError(stimulus_id)


def _pairwise_min(points: np.ndarray) -> float:
    if len(points) < 2:
        return math.inf
    d = np.sqrt(((points[:, None, :] - points[None, :, :]) ** 2).sum(-1))
    d[np.diag_indices(len(points))] = np.inf
    return float(d.min())


# --------------------------------------------------------------------------- design


def test_battery_sizes_and_unique_ids() -> None:
    sizes = {name: len(battery_specs(name)) for name in BATTERIES}
    assert sizes == {"dotarrays": 272, "dotarrays-main": 216, "dotarrays-xl": 30, "lattice": 60}
    factor = [s for s in battery_specs("dotarrays") if s.set != "main"]
    assert len(factor) == 56
    ids = [s.stimulus_id for name in ALL_BATTERIES for s in battery_specs(name)]
    assert len(ids) == len(set(ids)) == 362
    assert {s.stimulus_id for s in battery_specs("dotarrays-main")} <= set(ids)


def test_readable_ids(stimuli: dict[str, Stimulus]) -> None:
    for sid in (
        "main-regular-n012-s1",
        "hetero-n015-s2",
        "xl-random-n200-s0",
        "lattice-hex-n030-s3",
    ):
        assert sid in stimuli
    assert stimuli["main-regular-n012-s1"].image == "images/main-regular-n012-s1.png"


def test_points_match_n_and_names(stimuli: dict[str, Stimulus]) -> None:
    names = {"main": "dots", "heterogeneous": "shapes", "distractor": "red dots"}
    for s in stimuli.values():
        assert s.points is not None and len(s.points) == s.n
        assert s.obj == names.get(s.meta["set"], "dots")
        for key in ("battery", "set", "arrangement", "seed", "replicate", "width", "height"):
            assert key in s.meta
        assert s.meta["radius"] == (6 if s.meta["set"] == "small" else RADIUS)


def test_every_object_inside_canvas(stimuli: dict[str, Stimulus]) -> None:
    for s in stimuli.values():
        # Heterogeneous shapes are placed by their bounding circle (triangle circumradius).
        reach = s.meta["radius"] * (1.56 if s.meta["set"] == "heterogeneous" else 1.0)
        pts = np.asarray(s.points + [tuple(p) for p in s.meta.get("distractors", [])])
        assert pts.min() - reach >= 0 and pts.max() + reach <= SIDE, s.id


def test_random_min_gap(stimuli: dict[str, Stimulus]) -> None:
    for s in stimuli.values():
        if s.meta["arrangement"] != "random":
            continue
        r = s.meta["radius"]
        pts = np.asarray(s.points + [tuple(p) for p in s.meta.get("distractors", [])])
        assert s.meta["min_gap"] == MIN_GAP  # no fallback was needed anywhere, even at n=200
        extent = r * 1.555 if s.meta["set"] == "heterogeneous" else r
        assert _pairwise_min(pts) >= 2 * extent + MIN_GAP - 1e-9, s.id


def test_random_centres_stay_in_the_field(stimuli: dict[str, Stimulus]) -> None:
    lo, hi = (1 - RANDOM_FIELD) / 2 * SIDE, (1 + RANDOM_FIELD) / 2 * SIDE
    spans = []
    for s in stimuli.values():
        if s.meta["arrangement"] != "random":
            continue
        pts = np.asarray(s.points + [tuple(p) for p in s.meta.get("distractors", [])])
        if s.meta["set"] == "xl":  # 200 discs at the 8 px gap need the whole canvas
            assert s.meta["field"] == 1.0
            continue
        assert s.meta["field"] == RANDOM_FIELD
        assert pts.min() >= lo - 1e-9 and pts.max() <= hi + 1e-9, s.id
        spans.append(pts.max(axis=0) - pts.min(axis=0))
    # The field is used, not just a bound: the widest arrays reach across most of it.
    assert np.max(spans) > 0.9 * (hi - lo)


def test_tau_statistics_match_the_paper() -> None:
    # Give the Model a Finger, App. E: median tau 44 px, range 17-272 over the battery.
    stats = {s.group: s for s in tau_stats("dotarrays")}
    every = stats["all"]
    assert every.images == 260  # 272 images less the 12 with one disc (no nearest neighbour)
    assert round(every.median) == PAPER_TAU["median"]
    assert round(every.min) == PAPER_TAU["min"]
    assert abs(every.max - PAPER_TAU["max"]) <= 0.05 * PAPER_TAU["max"]
    # Regular lattices fill the canvas (cell = side / columns); random arrays are denser.
    assert stats["main/random"].median < stats["main/regular"].median


def test_clustered_no_overlap(stimuli: dict[str, Stimulus]) -> None:
    for s in stimuli.values():
        if s.meta["arrangement"] != "clustered":
            continue
        gap = 0.0 if s.meta["set"] == "dense" else 4.0
        assert s.meta["min_gap"] == gap
        assert _pairwise_min(np.asarray(s.points)) >= 2 * RADIUS + gap - 1e-9, s.id
        assert 2 <= len(s.meta["cluster_centres"]) <= 4
        assert s.meta["sigma"] == pytest.approx(0.09 * SIDE)


def test_regular_and_lattice_jitter(stimuli: dict[str, Stimulus]) -> None:
    checked = 0
    for s in stimuli.values():
        if "cells" not in s.meta:
            continue
        off = np.abs(np.asarray(s.points) - np.asarray(s.meta["cells"]))
        assert off.max() <= JITTER * s.meta["cell"] + 1e-9, s.id
        assert _pairwise_min(np.asarray(s.points)) > 2 * RADIUS, s.id
        checked += 1
    assert checked == 72 + 15 + 60  # main regular, xl regular, lattice


def test_lattice_cells_meta(stimuli: dict[str, Stimulus]) -> None:
    lattice = [s for s in stimuli.values() if s.meta["set"] == "lattice"]
    assert Counter(s.meta["arrangement"] for s in lattice) == {
        "rotated": 20,
        "hex": 20,
        "holed": 20,
    }
    for s in lattice:
        cells = np.asarray(s.meta["cells"])
        assert cells.shape == (s.n, 2)
        # Square and hexagonal lattices both have nearest-neighbour spacing of one cell.
        assert _pairwise_min(cells) == pytest.approx(s.meta["cell"])
        kind = s.meta["arrangement"]
        if kind == "rotated":
            assert 20 <= s.meta["angle_deg"] <= 40
            d = cells[None] - cells[:, None]
            near = np.isclose(np.hypot(d[..., 0], d[..., 1]), s.meta["cell"])
            angles = np.degrees(np.arctan2(d[..., 1][near], d[..., 0][near])) % 90
            assert np.allclose(angles, s.meta["angle_deg"])
        if kind == "holed":
            assert len(s.meta["holes"]) + s.n == math.ceil(s.n / 0.75) == s.meta["n_cells"]


def test_factor_meta(stimuli: dict[str, Stimulus]) -> None:
    hetero = [s for s in stimuli.values() if s.meta["set"] == "heterogeneous"]
    assert all(len(s.meta["shapes"]) == len(s.meta["colors"]) == s.n for s in hetero)
    assert {sh for s in hetero for sh in s.meta["shapes"]} == {"circle", "square", "triangle"}
    assert len({c for s in hetero for c in s.meta["colors"]}) == 6
    for s in stimuli.values():
        if s.meta["set"] == "distractor":
            assert len(s.meta["distractors"]) == s.n


# --------------------------------------------------------------------------- pixels


@pytest.mark.slow
@pytest.mark.parametrize("arrangement", ["regular", "random", "clustered"])
def test_main_pixels_one_dark_blob_per_disc(arrangement: str) -> None:
    for spec in battery_specs("dotarrays-main"):
        if spec.arrangement != arrangement:
            continue
        s, im = generate(spec)
        a = np.asarray(im)
        dark = a.max(axis=2) < 128
        for x, y in s.points:
            assert tuple(a[int(y), int(x)]) == (0, 0, 0), s.id
        assert ndimage.label(dark)[1] == s.n, s.id
        # Anything not black is white: no anti-aliasing.
        assert ((a == 0) | (a == 255)).all()


def test_distractor_pixels() -> None:
    for spec in battery_specs("dotarrays"):
        if spec.set != "distractor":
            continue
        s, im = generate(spec)
        a = np.asarray(im)
        for x, y in s.points:
            assert tuple(a[int(y), int(x)]) == (255, 0, 0), s.id
        for x, y in s.meta["distractors"]:
            assert tuple(a[int(y), int(x)]) == (0, 0, 255), s.id
        red = (a[..., 0] == 255) & (a[..., 2] == 0)
        assert ndimage.label(red)[1] == s.n


def test_heterogeneous_pixels_match_shape_colours() -> None:
    for spec in battery_specs("dotarrays"):
        if spec.set != "heterogeneous":
            continue
        s, im = generate(spec)
        a = np.asarray(im)
        palette = s.meta["palette"]
        for (x, y), color in zip(s.points, s.meta["colors"], strict=True):
            assert list(a[int(y), int(x)]) == palette[color], s.id


def test_drawn_disc_centre_within_half_pixel() -> None:
    s, im = generate(_spec("main-random-n010-s3"))
    labels, k = ndimage.label(np.asarray(im).max(axis=2) < 128)
    centroids = np.asarray(ndimage.center_of_mass(labels > 0, labels, range(1, k + 1)))
    drawn = centroids[:, ::-1] + 0.5  # (row, col) of pixel centres -> continuous (x, y)
    for x, y in s.points:
        assert np.abs(drawn - (x, y)).max(axis=1).min() <= 0.5 + 1e-9


# --------------------------------------------------------------------------- determinism


def test_same_spec_same_pixels_and_golden_hashes() -> None:
    for sid, digest in GOLDEN.items():
        s1, im1 = generate(_spec(sid))
        s2, im2 = generate(_spec(sid))
        assert im1.tobytes() == im2.tobytes()
        assert s1 == s2
        assert hashlib.sha256(im1.tobytes()).hexdigest() == digest, sid


def test_seed_offset_changes_images() -> None:
    spec = _spec("main-random-n025-s0")
    s0, im0 = generate(spec)
    s1, im1 = generate(spec, seed_offset=1)
    assert s1.id == s0.id and s1.meta["seed_offset"] == 1 and s1.meta["seed"] != s0.meta["seed"]
    assert im0.tobytes() != im1.tobytes()


def test_smaller_gap_fallback_is_recorded() -> None:
    # Five discs cannot keep an 8 px gap in this box (best possible is about 5.9 px).
    rng = np.random.default_rng(0)
    with pytest.raises(RuntimeError):
        random_centres(5, np.random.default_rng(0), side=80)
    pts, gap = random_centres(5, rng, side=80, allow_smaller_gap=True)
    assert gap < MIN_GAP
    assert _pairwise_min(pts) >= 2 * RADIUS + gap


# --------------------------------------------------------------------------- subsets


def test_subset_sizes_and_rules() -> None:
    main = battery_specs("dotarrays-main")
    everything = battery_specs("dotarrays")
    common, ablation = subset_ids("common"), subset_ids("ablation")
    assert len(common) == 50 and len(ablation) == 68
    by_id = {s.stimulus_id: s for s in everything}
    assert common <= {s.stimulus_id for s in main}
    assert all(by_id[i].n >= 5 for i in ablation)
    assert {by_id[i].set for i in ablation} >= {"main", "heterogeneous", "distractor"}
    per_level = Counter(by_id[i].n for i in common)
    assert set(per_level) == set(bat.MAIN_LEVELS) and set(per_level.values()) == {2, 3}
    arrangements = Counter(by_id[i].arrangement for i in common)
    assert max(arrangements.values()) - min(arrangements.values()) <= 2
    assert set(Counter(by_id[i].n for i in ablation).values()) <= {4, 5}


def test_select_subset_keeps_order_and_rejects_bad_names(stimuli: dict[str, Stimulus]) -> None:
    items = list(stimuli.values())
    chosen = select_subset(items, "ablation")
    assert [s.id for s in chosen] == [s.id for s in items if s.id in subset_ids("ablation")]
    with pytest.raises(UserError, match="common, ablation"):
        select_subset(items, "nope")
    lattice = [s for s in items if s.meta["set"] == "lattice"]
    with pytest.raises(UserError, match="selects nothing"):
        select_subset(lattice, "common")


# --------------------------------------------------------------------------- folders


def test_make_battery_folder_reads_back(tmp_path: Path) -> None:
    out = make_battery("dotarrays", tmp_path / "d", limit=6, progress=False)
    ds = Dataset(out)
    assert len(ds) == 6
    assert len({s.n for s in ds}) > 3  # limit spreads over the design, not the first six
    for s in ds:
        fresh, im = generate(_spec(s.id))
        assert s == fresh
        assert ds.load_image(s).tobytes() == im.tobytes()
    first = {s.id: ds.content_hash(s) for s in ds}
    again = Dataset(make_battery("dotarrays", tmp_path / "e", limit=6, progress=False))
    assert {s.id: again.content_hash(s) for s in again} == first  # same PNG bytes


def test_make_battery_with_worker_pool(tmp_path: Path) -> None:
    out = make_battery("lattice", tmp_path, limit=20, progress=False, workers=2)
    ds = Dataset(out)
    assert len(ds) == 20
    with Image.open(ds.image_path(ds.stimuli[0])) as im:
        assert im.size == (SIDE, SIDE) and im.mode == "P"  # palette PNG, see render()


def test_bad_battery_and_limit(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="dotarrays, dotarrays-main, dotarrays-xl, lattice"):
        make_battery("dots", tmp_path)
    with pytest.raises(UserError, match="limit"):
        make_battery("lattice", tmp_path, limit=0)


def test_resolve_dataset_builds_cache_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COUNTGYM_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []
    real = bat.make_battery

    def counting(name: str, out: Path, **kw: object) -> Path:
        calls.append(name)
        return real(name, out, limit=12, **kw)  # keep the test small

    monkeypatch.setattr(bat, "make_battery", counting)
    ds = resolve_dataset("lattice")
    assert len(ds) == 12 and ds.name == "lattice"
    assert ds.root == tmp_path / "cache" / f"lattice-v{GENERATOR_VERSION}"
    again = resolve_dataset("lattice")
    assert calls == ["lattice"] and again.ids() == ds.ids()
    left = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert left == [ROOT_MARKER, f"lattice-v{GENERATOR_VERSION}"]  # the root's marker, no temp left


def test_cache_race_loser_discards_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COUNTGYM_CACHE", str(tmp_path))
    real = bat.make_battery

    def racing(name: str, out: Path, **kw: object) -> Path:
        real(name, tmp_path / f"lattice-v{GENERATOR_VERSION}", limit=3, progress=False)  # the other process wins
        return real(name, out, limit=5, **kw)

    monkeypatch.setattr(bat, "make_battery", racing)
    assert len(resolve_dataset("lattice")) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == [ROOT_MARKER, f"lattice-v{GENERATOR_VERSION}"]


def test_resolve_dataset_subsets(
    stimuli: dict[str, Stimulus], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COUNTGYM_CACHE", str(tmp_path / "cache"))
    # Subsets only read the manifest, so a manifest without images is enough here.
    folder = tmp_path / "full"
    write_manifest(folder, [stimuli[s.stimulus_id] for s in battery_specs("dotarrays")])
    ds = resolve_dataset(f"{folder}:ablation")
    assert isinstance(ds, SubsetDataset) and len(ds) == 68 and ds.name == "full:ablation"
    assert all(s.n >= 5 for s in ds)
    with pytest.raises(UserError):
        ds["main-regular-n001-s0"]  # outside the subset
    assert len(resolve_dataset(str(folder))) == 272
    # A battery name with a subset builds the battery once, then restricts it.
    monkeypatch.setattr(bat, "cached_battery", lambda name, **kw: folder)
    common = resolve_dataset("dotarrays-main:common")
    assert len(common) == 50 and common.name == "dotarrays-main:common"


@pytest.mark.parametrize("bad", ["dots", "dotarrays:nope", "/no/such/folder", "lattice:common:x"])
def test_resolve_dataset_bad_names(
    bad: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COUNTGYM_CACHE", str(tmp_path))
    with pytest.raises(UserError) as e:
        resolve_dataset(bad)
    assert "\n" not in str(e.value)
    assert "dotarrays-xl" in str(e.value) or "common, ablation" in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing was built for a bad name
