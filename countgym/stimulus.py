"""The Stimulus: everything about one counting item, and the dataset folder that stores them.

A dataset folder holds ``manifest.jsonl`` (one JSON object per line) and
the media files it names. Generators write folders; loaders and environments read them.
"""

from __future__ import annotations

import hashlib
import io
import json
import stat
import threading
import warnings
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, ValidationError, field_validator

from countgym.errors import UserError

MANIFEST = "manifest.jsonl"
# Pillow's decompression-bomb guard stays on. Pillow itself only warns between 1x and 2x this
# limit, so ``check_image_size`` refuses anything over it: user images above 64 MP raise.
Image.MAX_IMAGE_PIXELS = 64_000_000


class Stimulus(BaseModel):
    """One counting item as stored in a dataset folder's manifest."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    """Stable, unique identifier inside the folder."""
    n: int = Field(ge=0, le=2**63 - 1)
    """The true count (a signed 64-bit integer, as every log column holds it)."""
    obj: str = Field(min_length=1)
    """Plural object name used in prompts ("dots")."""
    obj_sing: str = Field(min_length=1)
    """Singular object name ("dot")."""
    image: str | None = None
    """Relative path of the image (image tasks)."""
    frames: list[str] | None = None
    """Relative paths of the sampled frames (video tasks)."""
    points: list[tuple[FiniteFloat, FiniteFloat]] | None = None
    """Ground-truth object centres in pixels of the stored image, when known."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Everything else: battery, set, arrangement, seed, factor, colour, shape, ..."""

    @field_validator("image", "frames")
    @classmethod
    def _no_nul(cls, v: Any) -> Any:
        for rel in [v] if isinstance(v, str) else v or []:
            if "\x00" in rel:
                raise ValueError("a media path holds a NUL character")
        return v

    @field_validator("points")
    @classmethod
    def _points_match_n(cls, v: list[tuple[float, float]] | None, info: Any) -> Any:
        n = info.data.get("n")
        if v is not None and n is not None and len(v) != n:
            raise ValueError(f"{len(v)} points given for n={n}")
        return v


MEDIA_PATHS_KEPT = 65536
"""Media paths remembered as checked (a 2,600-video battery names 26,000), and content hashes."""
_MEDIA_PATHS: dict[tuple[Path, str], Path] = {}
_CONTENT_HASHES: dict[tuple[Any, ...], str] = {}
_CONTENT_HASHES_LOCK = threading.Lock()
STIMULUS_CACHE_SIZE = 16384
"""Stimuli a ``Dataset`` keeps parsed (most recently used); the rest stay manifest lines.
Every built-in dataset (a few thousand stimuli at most) is kept whole, so an audit parses
each stimulus once; of a larger one it keeps about 0.13 GB (stimuli of 50 points)."""


class Dataset:
    """A dataset folder: the manifest's stimuli plus access to their media.

    ``Dataset(root)`` validates every manifest line; a bad line raises a ``UserError`` naming
    the file and line number. It then keeps each stimulus as its manifest line (bytes) and
    parses it again when asked for, holding the ``STIMULUS_CACHE_SIZE`` most recently used
    ones (on opening, the manifest's first ones): 100,000 stimuli of 50 points take about 0.2 GB instead of 0.8 GB as objects. Reading
    ``stimuli`` builds (and keeps) the list of every stimulus, as subclasses that select a
    subset do; assigning it makes the dataset that list.
    """

    def __init__(self, root: str | Path, name: str | None = None) -> None:
        self.root = Path(root)
        self.name = name or self.root.name
        manifest = self.root / MANIFEST
        if not manifest.is_file():
            raise UserError(
                f"no {MANIFEST} in {self.root}: make one with 'countgym scenes make BATTERY --out DIR'"
            )
        self._stimuli: list[Stimulus] | None = None
        self._ids: tuple[str, ...] | None = None
        self._lines: dict[str, bytes] = {}
        self._parsed: OrderedDict[str, Stimulus] = OrderedDict()
        lines: dict[str, int] = {}
        for lineno, line, stim in _read_manifest_lines(manifest):
            if stim.id in lines:
                raise UserError(
                    f"{manifest}:{lineno}: field 'id': duplicate stimulus id {stim.id!r} (first on line {lines[stim.id]})"
                )
            lines[stim.id] = lineno
            self._lines[stim.id] = line.encode("utf-8")
            # The first stimuli are kept (logs mostly follow the manifest's order, so these are
            # asked for first); the rest are parsed again when asked for.
            if len(self._parsed) < STIMULUS_CACHE_SIZE:
                self._keep(stim)
        self._hashes: dict[str, str] = {}

    @property
    def stimuli(self) -> list[Stimulus]:
        """Every stimulus in manifest order (built once from the manifest lines, then kept)."""
        if self._stimuli is None:
            self._stimuli = [self[i] for i in self._lines]
            self._by_id = {s.id: s for s in self._stimuli}
        return self._stimuli

    @stimuli.setter
    def stimuli(self, value: list[Stimulus]) -> None:
        self._stimuli = value
        self._ids = None
        self._by_id = {s.id: s for s in value}
        self._lines = {}

    def _keep(self, stim: Stimulus) -> Stimulus:
        self._parsed[stim.id] = stim
        if len(self._parsed) > STIMULUS_CACHE_SIZE:
            self._parsed.popitem(last=False)
        return stim

    def __len__(self) -> int:
        return len(self._stimuli) if self._stimuli is not None else len(self._lines)

    def __iter__(self) -> Iterator[Stimulus]:
        if self._stimuli is not None:
            return iter(self._stimuli)
        return (self[i] for i in list(self._lines))

    def __getitem__(self, stimulus_id: str) -> Stimulus:
        if self._stimuli is not None:
            try:
                return self._by_id[stimulus_id]
            except KeyError:
                raise UserError(f"no stimulus {stimulus_id!r} in {self.root}") from None
        stim = self._parsed.get(stimulus_id)
        if stim is not None:
            self._parsed.move_to_end(stimulus_id)
            return stim
        raw = self._lines.get(stimulus_id)
        if raw is None:
            raise UserError(f"no stimulus {stimulus_id!r} in {self.root}")
        return self._keep(_fast_parse(raw) or Stimulus.model_validate(json.loads(raw)))

    def ids(self) -> list[str]:
        """Stimulus ids in manifest order (a new list; the ids are kept: an environment asks for
        them when it is made, once per episode)."""
        ids = getattr(self, "_ids", None)
        if ids is None:
            ids = self._ids = tuple(s.id for s in self._stimuli) if self._stimuli is not None else tuple(self._lines)
        return list(ids)

    def image_path(self, stimulus: Stimulus) -> Path:
        """Absolute path of a stimulus's image, checked to stay inside the folder."""
        if stimulus.image is None:
            raise UserError(f"stimulus {stimulus.id!r} has no image")
        return self.media_path(stimulus, stimulus.image, "image")

    def _resolved_root(self) -> Path:
        """The folder with its links resolved (once: it is asked for every media file)."""
        root = getattr(self, "_root_real", None)
        if root is None:
            root = self._root_real = self.root.resolve()
        return root

    def known_media_path(self, rel: str) -> Path | None:
        """The checked path of ``rel`` when ``media_path`` found it a regular file inside the
        folder earlier in this process, else None (not checked yet, or not a regular file)."""
        return _MEDIA_PATHS.get((self._resolved_root(), rel))

    def media_path(self, stimulus: Stimulus, rel: str, what: str = "media") -> Path:
        """Absolute path of a file a stimulus names (image, frame, mask), checked to stay inside
        the folder and, when it exists, to be a regular file (a FIFO named ``x.png`` would block
        the reader forever; a device or folder is no image either). A path found to be a regular
        file is remembered for the process, by dataset folder (``MEDIA_PATHS_KEPT``): a video
        episode asks for ten, each cell loads its dataset afresh, and resolving a path costs a
        ``stat`` per folder of it."""
        root = self._resolved_root()
        known = _MEDIA_PATHS.get((root, rel))
        if known is not None:
            return known
        path = (self.root / rel).resolve()
        if root not in path.parents:
            raise UserError(f"stimulus {stimulus.id!r}: {what} path {rel!r} escapes the dataset folder")
        try:
            regular = stat.S_ISREG(path.stat().st_mode)
        except OSError:  # missing (or unreadable): the reader says so
            return path
        if not regular:
            raise UserError(f"stimulus {stimulus.id!r}: {what} path {rel!r} is not a regular file")
        with _CONTENT_HASHES_LOCK:
            if len(_MEDIA_PATHS) >= MEDIA_PATHS_KEPT:
                _MEDIA_PATHS.clear()
            _MEDIA_PATHS[(root, rel)] = path
        return path

    def load_image(self, stimulus: Stimulus) -> Image.Image:
        """The stimulus image as RGB (decompression-bomb guard on: at most 64 MP)."""
        return self.read_image(stimulus)[0]

    def read_image(self, stimulus: Stimulus) -> tuple[Image.Image, bytes]:
        """The stimulus image as RGB, and the file's bytes it was decoded from (read once, so
        the two always agree)."""
        path = self.image_path(stimulus)
        try:
            data = path.read_bytes()
            with warnings.catch_warnings():
                # Pillow warns between 1x and 2x its limit; check_image_size refuses those.
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                im = Image.open(io.BytesIO(data))
            with im:
                check_image_size(im, path)
                return im.convert("RGB"), data
        except FileNotFoundError:
            raise UserError(f"missing image {path} for stimulus {stimulus.id!r}") from None
        except (OSError, Image.DecompressionBombError) as e:
            raise UserError(f"cannot read image {path}: {e}") from None
        except ValueError as e:  # Pillow's bound on a compressed text chunk (a text bomb)
            raise UserError(f"cannot read image {path}: {e}") from None

    def content_hash(self, stimulus: Stimulus) -> str:
        """SHA-256 of the stimulus media bytes (image, or frames concatenated). Kept per process
        while the files are unchanged (path, size, modification time, inode), across datasets:
        each cell loads its own, and a video's ten frames are 2 MB to read and hash."""
        if stimulus.id not in self._hashes:
            paths = [self.media_path(stimulus, rel) for rel in
                     ([stimulus.image] if stimulus.image else list(stimulus.frames or []))]
            identity: tuple[Any, ...] | None
            try:
                identity = tuple((str(p), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)
                                 for p in paths for st in (p.stat(),))
            except OSError:
                identity = None  # a missing file: read_bytes below says so
            digest = _CONTENT_HASHES.get(identity) if identity is not None else None
            if digest is None:
                h = hashlib.sha256()
                for path in paths:
                    h.update(path.read_bytes())
                digest = h.hexdigest()
                if identity is not None:
                    with _CONTENT_HASHES_LOCK:
                        if len(_CONTENT_HASHES) >= MEDIA_PATHS_KEPT:
                            _CONTENT_HASHES.clear()
                        _CONTENT_HASHES[identity] = digest
            self._hashes[stimulus.id] = digest
        return self._hashes[stimulus.id]


def check_image_size(im: Image.Image, path: str | Path) -> None:
    """Refuse an image over ``Image.MAX_IMAGE_PIXELS`` (64 MP) before decoding it.

    Pillow raises only above twice its limit (and warns below), so the stated limit is enforced
    here, from the header alone."""
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and im.width * im.height > limit:
        raise UserError(
            f"image {path} is {im.width} x {im.height} = {im.width * im.height / 1e6:.1f} MP, "
            f"over the {limit / 1e6:g} MP limit (decompression-bomb guard); resize it"
        )


MAX_VIDEO_PIXELS = 256_000_000
"""Largest total of pixels of one video stimulus's frames (about 0.8 GB as RGB): 64 frames of
2 MP, or ten 4K frames, fit; ten 62 MP frames do not."""


def check_video_pixels(dataset: Dataset, stimulus: Stimulus) -> None:
    """Refuse a video whose frames hold more than ``MAX_VIDEO_PIXELS`` pixels in all, from the
    frame headers alone (before any frame is decoded)."""
    total = 0
    for rel in stimulus.frames or []:
        path = dataset.media_path(stimulus, rel, "frame")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                with Image.open(path) as im:
                    total += im.width * im.height
        except FileNotFoundError:
            raise UserError(f"missing frame {path} for stimulus {stimulus.id!r}") from None
        except (OSError, ValueError, Image.DecompressionBombError) as e:
            raise UserError(f"cannot read frame {path}: {e}") from None
        if total > MAX_VIDEO_PIXELS:
            raise UserError(
                f"stimulus {stimulus.id!r}: its {len(stimulus.frames or [])} frames hold over "
                f"{total / 1e6:.0f} MP, more than the {MAX_VIDEO_PIXELS / 1e6:g} MP a video may "
                "hold in all; use fewer or smaller frames"
            )


def _read_manifest(path: Path) -> Iterator[tuple[int, Stimulus]]:
    """(line number, stimulus) for each non-blank line (see ``_read_manifest_lines``)."""
    for lineno, _, stim in _read_manifest_lines(path):
        yield lineno, stim


def _read_manifest_lines(path: Path) -> Iterator[tuple[int, str, Stimulus]]:
    """(line number, line, stimulus) for each non-blank line; a bad line is a ``UserError`` naming the
    file, the line and the field."""
    with path.open(encoding="utf-8", errors="surrogateescape") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}: invalid manifest line"
            try:
                line.encode("utf-8")
            except UnicodeEncodeError:
                raise UserError(f"{where}: not UTF-8 text") from None
            stim = _fast_parse(line)
            if stim is not None:
                yield lineno, line, stim
                continue
            try:
                data = json.loads(line)
            except RecursionError:
                raise UserError(f"{where}: nested too deeply to read") from None
            except ValueError as e:  # bad JSON, or a number past Python's digit limit
                raise UserError(f"{where}: {str(e).splitlines()[0][:200]}") from None
            if not isinstance(data, dict):
                raise UserError(f"{where}: expected a JSON object, got {type(data).__name__}")
            try:
                yield lineno, line, Stimulus.model_validate(data)
            except (ValidationError, RecursionError) as e:
                raise UserError(f"{where}: {_field_error(e)}") from None


def _fast_parse(line: str | bytes) -> Stimulus | None:
    """The stimulus of a manifest line parsed and validated by pydantic in one go, or None
    where it refuses the line or the line escapes a surrogate (the caller then reads it with
    ``json.loads`` and ``model_validate``, which give the same stimulus for every line this
    accepts: the last duplicate key wins and the digit limit holds in both)."""
    if isinstance(line, bytes):
        if b"\\ud" in line or b"\\uD" in line:
            return None
    elif "\\ud" in line or "\\uD" in line:
        return None
    try:
        return Stimulus.model_validate_json(line)
    except (ValueError, RecursionError):
        return None


def _field_error(e: ValidationError | RecursionError) -> str:
    """The first problem of a manifest line, naming its field: ``field 'n': Input should be ...``."""
    if isinstance(e, RecursionError):
        return "nested too deeply to read"
    err = e.errors()[0]
    loc = ".".join(str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    return f"field {loc!r}: {msg}" if loc else msg


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
