"""CounterCount scenes: drawn pairs, masks and boxes, blur, the release loader."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage
from shapely.ops import unary_union

from countgym.errors import UserError
from countgym.scenes.counterfactual import (
    CATEGORIES,
    SUBJECTS,
    Scene,
    blur_outside,
    canonical_category,
    draw,
    load_countercount,
    make_countercount,
    mask_bb,
    pair_specs,
    rasterize,
    render,
)
from countgym.stimulus import Dataset


@pytest.fixture(scope="session")
def cf_battery(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """One pair per subject (the first round of the design): every subject drawn once."""
    root = make_countercount(tmp_path_factory.mktemp("cf"), limit=len(SUBJECTS), progress=False)
    return Dataset(root)


def _pixels(ds: Dataset, sid: str) -> np.ndarray:
    return np.asarray(ds.load_image(ds[sid]), dtype=np.int16)


def _layers_key(scene: Scene) -> list[tuple[bytes, tuple, object, float]]:
    return [(la.geom.wkb, la.fill, la.outline, la.width) for la in scene.layers if la.role != "attribute"]


def test_every_category_is_drawn() -> None:
    assert {s.category for s in SUBJECTS.values()} == set(CATEGORIES)
    assert len(CATEGORIES) == 17


@pytest.mark.parametrize("key", sorted(SUBJECTS))
def test_every_count_shows_its_parts_and_changes_only_the_attribute(key: str) -> None:
    s = SUBJECTS[key]
    base = draw(s, s.canonical)
    assert base.n_parts() == s.canonical
    for n in s.cf_counts:
        scene = draw(s, n)
        assert scene.n_parts() == n
        # The object and scenery layers are the same geometry and colours whatever the count.
        assert _layers_key(scene) == _layers_key(base)


def test_design_spans_removals_additions_and_counts_zero_to_seven_plus() -> None:
    specs = pair_specs()
    assert {p.edit for p in specs} == {"removal", "addition"}
    counts = {p.cf_count for p in specs}
    assert {0, 1, 2, 3, 4, 5, 6, 7}.issubset(counts) and max(counts) >= 9
    # Round-robin order: the first len(SUBJECTS) pairs hold every subject once.
    assert {p.subject.key for p in specs[: len(SUBJECTS)]} == set(SUBJECTS)


@pytest.mark.slow
def test_pairs_differ_only_inside_the_attribute_box(cf_battery: Dataset) -> None:
    pairs = {s.meta["pair_id"] for s in cf_battery}
    assert len(pairs) == len(SUBJECTS)
    for pid in pairs:
        f, c = cf_battery[f"{pid}-factual"], cf_battery[f"{pid}-cf"]
        assert f.meta["bbox"] == c.meta["bbox"]
        x1, y1, x2, y2 = f.meta["bbox"]
        diff = np.any(_pixels(cf_battery, f.id) != _pixels(cf_battery, c.id), axis=2)
        inside = np.zeros_like(diff)
        inside[y1:y2, x1:x2] = True
        assert not diff[~inside].any(), pid
        assert diff[inside].any(), pid  # the edit is visible
        # Tighter: the pixels differ only where an attribute part shows in either image.
        subject = SUBJECTS[f.meta["subject_key"]]
        parts = [*draw(subject, f.n).visible_parts().values(), *draw(subject, c.n).visible_parts().values()]
        near = ndimage.binary_dilation(rasterize(unary_union(parts)), iterations=2)
        assert not diff[~near].any(), pid


@pytest.mark.slow
def test_masks_and_boxes_match_the_drawn_pixels(cf_battery: Dataset) -> None:
    for stim in cf_battery:
        if stim.meta["kind"] != "cf":
            continue
        subject = SUBJECTS[stim.meta["subject_key"]]
        scene = draw(subject, stim.n)
        ground = Scene(scene.background, [la for la in scene.layers if la.role == "background"])
        pixels = _pixels(cf_battery, stim.id)
        empty = np.asarray(render(ground), dtype=np.int16)
        mask = np.asarray(Image.open(cf_battery.root / stim.meta["mask"])) > 127
        delta = np.abs(pixels - empty).max(axis=2)
        differs = delta > 0
        # Outside the mask the image is the bare scenery, up to anti-aliasing: a pixel the object
        # covers by less than half is not in the mask, so right next to it only faint slivers
        # (< 1/16 coverage) may differ, and nothing beyond two pixels.
        assert not differs[~ndimage.binary_dilation(mask, iterations=2)].any(), stim.id
        assert delta[~ndimage.binary_dilation(mask, iterations=1)].max(initial=0) <= 16, stim.id
        core = ndimage.binary_erosion(mask, iterations=1)
        assert differs[core].mean() > 0.9, stim.id
        # Every counted part lies in the attribute box, and in the object mask.
        x1, y1, x2, y2 = stim.meta["bbox"]
        assert len(stim.points) == stim.n
        for x, y in stim.points:
            assert x1 <= x < x2 and y1 <= y < y2
            assert mask[int(y), int(x)]
        if stim.n:
            assert mask_bb(mask, stim.meta["bbox"]).any()


GOLDEN_FILES: dict[str, str] = {
    # sha256 of the decoded pixels (Pillow >= 10.1 rasterisation); bump GENERATOR_VERSION with them.
    "images/dog-n4.png": "2c40e0cef2ed25424d83e7fa5839288ca8aa3aa73a19763c2f861ff560475145",
    "images/hand-n4.png": "6f8324f8130aa9d3aa0209945f8752a8563765a8357da057cf567d7ddd72f7d4",
    "images/star-n4.png": "6d6f196303c668242df89b7634055357e7c80292a1b806f512f15053c4b1606c",
    "images/pizza-n6.png": "c0bad0e6ca86555d61c0ca94c5b0fd72e2c99b6ed06d3ee6ac12108e0f808961",
    "masks/octopus-n6.png": "0e475e6f3c734bc6cd76757c293f1362816f1bfabee2b5b334db81f7f3b9f4ac",
}


def test_golden_hashes_and_determinism(tmp_path: Path, cf_battery: Dataset) -> None:
    for rel, digest in GOLDEN_FILES.items():
        pixels = np.asarray(Image.open(cf_battery.root / rel)).tobytes()
        assert hashlib.sha256(pixels).hexdigest() == digest, rel
    # A second build is byte-identical (a prefix of the design gives a prefix of the manifest).
    again = make_countercount(tmp_path / "again", limit=4, progress=False)
    lines = (cf_battery.root / "manifest.jsonl").read_text().splitlines()[:8]
    assert (again / "manifest.jsonl").read_text().splitlines() == lines
    for f in sorted((again / "images").iterdir()) + sorted((again / "masks").iterdir()):
        assert f.read_bytes() == (cf_battery.root / f.parent.name / f.name).read_bytes(), f.name


def test_seed_changes_colours_not_geometry(tmp_path: Path) -> None:
    a = Dataset(make_countercount(tmp_path / "a", limit=3, seed=0, progress=False))
    b = Dataset(make_countercount(tmp_path / "b", limit=3, seed=3, progress=False))
    assert [s.id for s in a] == [s.id for s in b]
    assert [s.meta["bbox"] for s in a] == [s.meta["bbox"] for s in b]
    assert any(not np.array_equal(_pixels(a, s.id), _pixels(b, s.id)) for s in a)


def test_limit_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--limit"):
        make_countercount(tmp_path, limit=0, progress=False)


# --------------------------------------------------------------------------- blur
def test_blur_keeps_boxes_sharp_and_blurs_the_rest() -> None:
    rng = np.random.default_rng(0)
    img = Image.fromarray(rng.integers(0, 256, (120, 160, 3), dtype=np.uint8))
    boxes = [(10, 20, 50, 60), (100, 70, 150, 110)]
    out = np.asarray(blur_outside(img, boxes, radius=8, feather=4))
    src = np.asarray(img)
    for x1, y1, x2, y2 in boxes:
        assert np.array_equal(out[y1:y2, x1:x2], src[y1:y2, x1:x2])
    far = np.ones(src.shape[:2], bool)
    for x1, y1, x2, y2 in boxes:
        far[max(0, y1 - 12) : y2 + 12, max(0, x1 - 12) : x2 + 12] = False
    # Far from the boxes the noise is smoothed out: much lower local contrast.
    assert np.abs(np.diff(out[far].astype(float), axis=0)).mean() < 0.3 * np.abs(np.diff(src[far].astype(float), axis=0)).mean()
    # Feathering only softens outside: a pixel just outside a box is a blend, not the source.
    assert not np.array_equal(out[19, 10:50], src[19, 10:50])
    assert np.array_equal(np.asarray(blur_outside(img, boxes, radius=0, feather=0)), src)
    with pytest.raises(ValueError):
        blur_outside(img, boxes, radius=-1)


def test_mask_bb_is_the_intersection() -> None:
    mask = np.zeros((10, 10), bool)
    mask[2:8, 2:8] = True
    got = mask_bb(mask, (5, 0, 10, 4))
    want = np.zeros_like(mask)
    want[2:4, 5:8] = True
    assert np.array_equal(got, want)


# --------------------------------------------------------------------------- release loader
def _release(root: Path, battery: Dataset, fmt: str = "jsonl", drop: str | None = None) -> Path:
    """A tiny release in the documented layout, made from the drawn battery's files."""
    root.mkdir(parents=True, exist_ok=True)
    recs = []
    for pid in sorted({s.meta["pair_id"] for s in battery})[:3]:
        f, c = battery[f"{pid}-factual"], battery[f"{pid}-cf"]
        for stim in (f, c):
            for rel in (stim.image, stim.meta["mask"]):
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes((battery.root / rel).read_bytes())
        rec = {
            "pair_id": pid, "subject": c.meta["subject"], "attribute": c.obj_sing, "category": c.meta["category"],
            "factual_count": f.n, "cf_count": c.n, "factual_image": f.image, "cf_image": c.image,
            "mask": c.meta["mask"], "bbox": c.meta["bbox"],
        }
        if drop:
            rec.pop(drop)
        recs.append(rec)
    if fmt == "jsonl":
        (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    else:
        import csv

        with (root / "metadata.csv").open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(recs[0]))
            w.writeheader()
            for r in recs:
                w.writerow({**r, "bbox": ",".join(map(str, r["bbox"]))})
    return root


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_release_loader_reads_the_documented_layout(tmp_path: Path, cf_battery: Dataset, fmt: str) -> None:
    root = _release(tmp_path / "rel", cf_battery, fmt)
    ds = load_countercount(root)
    assert len(ds) == 6
    for s in ds:
        orig = cf_battery[s.id]
        assert (s.n, s.obj, s.meta["kind"], s.meta["canonical_count"]) == (orig.n, orig.obj, orig.meta["kind"], orig.meta["canonical_count"])
        assert [round(v) for v in s.meta["bbox"]] == orig.meta["bbox"]
        assert np.array_equal(np.asarray(ds.load_image(s)), np.asarray(cf_battery.load_image(orig)))
    assert ds.content_hash(ds.stimuli[0]) == cf_battery.content_hash(cf_battery[ds.stimuli[0].id])
    again = load_countercount(root, write_manifest=True)
    assert (root / "manifest.jsonl").is_file() and again.ids() == ds.ids()


def test_release_loader_names_what_is_missing(tmp_path: Path, cf_battery: Dataset) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_countercount(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="metadata.jsonl"):
        load_countercount(tmp_path / "empty")
    with pytest.raises(UserError, match="missing field.*cf_count"):
        load_countercount(_release(tmp_path / "nofield", cf_battery, drop="cf_count"))
    root = _release(tmp_path / "nofile", cf_battery)
    first = json.loads((root / "metadata.jsonl").read_text().splitlines()[0])
    (root / first["cf_image"]).unlink()
    with pytest.raises(UserError, match="missing cf_image file"):
        load_countercount(root)
    bad = _release(tmp_path / "badbox", cf_battery)
    lines = (bad / "metadata.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    rec["bbox"] = [10, 10, 5, 5]
    (bad / "metadata.jsonl").write_text("\n".join([json.dumps(rec), *lines[1:]]))
    with pytest.raises(UserError, match="bbox must be pixel"):
        load_countercount(bad)


def test_release_loader_normalises_category_labels(tmp_path: Path, cf_battery: Dataset) -> None:
    """"birds", "Symbols", "sea_creatures" name the paper's categories; other labels are kept."""
    root = _release(tmp_path / "labels", cf_battery)
    lines = (root / "metadata.jsonl").read_text().splitlines()
    recs = [json.loads(line) for line in lines]
    for rec, label in zip(recs, ("birds", "Symbols", "Plants"), strict=True):
        rec["category"] = label
    (root / "metadata.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    ds = load_countercount(root)
    got = [ds[f"{r['pair_id']}-cf"].meta["category"] for r in recs]
    assert got == ["Birds", "Symbol", "Plants"]
    assert canonical_category("sea_creatures") == "Sea Creatures" and canonical_category("Vehicles") is None
