"""The Stimulus: everything about one counting item, and the dataset folder that stores them.

A dataset folder holds ``manifest.jsonl`` (one JSON object per line, see ``contracts.md``) and
the media files it names. Generators write folders; loaders and environments read them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from countgym.errors import UserError

MANIFEST = "manifest.jsonl"
# Pillow's decompression-bomb guard stays on; user images larger than this raise.
Image.MAX_IMAGE_PIXELS = 64_000_000


class Stimulus(BaseModel):
    """One counting item as stored in a dataset folder's manifest."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    """Stable, unique identifier inside the folder."""
    n: int = Field(ge=0)
    """The true count."""
    obj: str = Field(min_length=1)
    """Plural object name used in prompts ("dots")."""
    obj_sing: str = Field(min_length=1)
    """Singular object name ("dot")."""
    image: str | None = None
    """Relative path of the image (image tasks)."""
    frames: list[str] | None = None
    """Relative paths of the sampled frames (video tasks)."""
    points: list[tuple[float, float]] | None = None
    """Ground-truth object centres in pixels of the stored image, when known."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Everything else: battery, set, arrangement, seed, factor, colour, shape, ..."""

    @field_validator("points")
    @classmethod
    def _points_match_n(cls, v: list[tuple[float, float]] | None, info: Any) -> Any:
        n = info.data.get("n")
        if v is not None and n is not None and len(v) != n:
            raise ValueError(f"{len(v)} points given for n={n}")
        return v


class Dataset:
    """A dataset folder: the manifest's stimuli plus access to their media.

    ``Dataset(root)`` validates every manifest line; a bad line raises a ``UserError`` naming
    the file and line number.
    """

    def __init__(self, root: str | Path, name: str | None = None) -> None:
        self.root = Path(root)
        self.name = name or self.root.name
        manifest = self.root / MANIFEST
        if not manifest.is_file():
            raise UserError(
                f"no {MANIFEST} in {self.root}: make one with 'countgym scenes make BATTERY --out DIR'"
            )
        self.stimuli: list[Stimulus] = list(_read_manifest(manifest))
        self._by_id = {s.id: s for s in self.stimuli}
        if len(self._by_id) != len(self.stimuli):
            raise UserError(f"{manifest}: duplicate stimulus ids")
        self._hashes: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.stimuli)

    def __iter__(self) -> Iterator[Stimulus]:
        return iter(self.stimuli)

    def __getitem__(self, stimulus_id: str) -> Stimulus:
        try:
            return self._by_id[stimulus_id]
        except KeyError:
            raise UserError(f"no stimulus {stimulus_id!r} in {self.root}") from None

    def ids(self) -> list[str]:
        """Stimulus ids in manifest order."""
        return [s.id for s in self.stimuli]

    def image_path(self, stimulus: Stimulus) -> Path:
        """Absolute path of a stimulus's image, checked to stay inside the folder."""
        if stimulus.image is None:
            raise UserError(f"stimulus {stimulus.id!r} has no image")
        path = (self.root / stimulus.image).resolve()
        if self.root.resolve() not in path.parents:
            raise UserError(f"stimulus {stimulus.id!r}: image path escapes the dataset folder")
        return path

    def load_image(self, stimulus: Stimulus) -> Image.Image:
        """The stimulus image as RGB (decompression-bomb guard on)."""
        path = self.image_path(stimulus)
        try:
            with Image.open(path) as im:
                return im.convert("RGB")
        except FileNotFoundError:
            raise UserError(f"missing image {path} for stimulus {stimulus.id!r}") from None
        except (OSError, Image.DecompressionBombError) as e:
            raise UserError(f"cannot read image {path}: {e}") from None

    def content_hash(self, stimulus: Stimulus) -> str:
        """SHA-256 of the stimulus media bytes (image, or frames concatenated)."""
        if stimulus.id not in self._hashes:
            h = hashlib.sha256()
            paths = [stimulus.image] if stimulus.image else list(stimulus.frames or [])
            for rel in paths:
                h.update((self.root / rel).read_bytes())
            self._hashes[stimulus.id] = h.hexdigest()
        return self._hashes[stimulus.id]


def _read_manifest(path: Path) -> Iterator[Stimulus]:
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield Stimulus.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError) as e:
                first = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise UserError(f"{path}:{lineno}: invalid manifest line: {first}") from None


def write_manifest(root: str | Path, stimuli: Iterable[Stimulus]) -> Path:
    """Write ``manifest.jsonl`` atomically (temp file + rename)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (MANIFEST + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for s in stimuli:
            f.write(json.dumps(s.model_dump(mode="json"), separators=(",", ":")) + "\n")
    tmp.replace(root / MANIFEST)
    return root / MANIFEST
