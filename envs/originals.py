"""Stimulus images as episodes start from them: decoded and fitted once, shared by the episodes
that show the same image (repeats, arms and cells of one process), and held compactly while an
episode waits for its model.

An episode starts by decoding its image, fitting it to the long-side limit and rendering the
unmarked view (about 10 ms of CPU for 768 x 768, plus the view's PNG encoding when a model sees
it). Episodes of one stimulus get the same ``Original`` instead: the same pixels, decoded once,
and a first observation that is a ``StoredView`` of it (``countgym.envs.stored_view``: decoded
only when something reads it), which ``view_key`` names, so that backends encode each distinct
view once. Entries are keyed by the image file's path, size, modification time and inode, so an
edited file is read again.

Memory per episode in flight: an original holds one copy of its pixels at most (the view; the
PIL image episodes draw from is made from it on demand). A view with long runs of equal bytes (a
battery image: flat background, flat discs) is held as those runs (``RUNS_MAX_BYTES``; a few kB
instead of 1.7 MB at 768 x 768), expanded again in well under a millisecond when an episode
draws; any other view is held as its pixels until a backend has encoded it (``keep_encoded``,
before the first model call), then as that PNG only, decoded again when an episode next draws,
through a small shared cache of decoded views (``DECODED_BYTES``). Either way an episode holds
no pixels while it waits for its model.

A source that is already the first view's PNG (an 8-bit RGB PNG within the long-side limit,
with no chunk that changes what a decoder shows: ``png_as_sent``) is not decoded at all to start
an episode: its original holds the file's pixel chunks (``Original.from_sent_png``), the first
model call sends them as they are, and the pixels are decoded only when an episode draws or a
policy reads them. Only the pixels leave the machine: text, time and resolution chunks are
dropped (without re-encoding), and a file with anything else beside its pixels (data after the
zlib stream, a stream larger than its pixels) is decoded and encoded afresh. Checking that costs
one inflate of the pixels (bounded by their size) once per source file: a file that passed is
recorded in the derived cache (``<countgym cache>/derived/sent``), so a later process checks its
chunks only. Datasets written by countgym, and the fitted copies below, are such files. A clean
8-bit three-component JPEG within the limit (a photo dataset's usual file) is held and sent the
same way, as its own image data with its metadata segments cut out (``countgym.envs.jpeg_clean``,
the rule for video frames): checking it is one pass over its bytes, no decode, and where its
segments are is recorded in ``sent/`` too.

Large sources (a 2048 px photo: about 45 ms to decode and 42 ms to fit to 1024 px) are fitted
once per file, not once per episode: the fitted copy is kept as a PNG in the derived cache
(``<countgym cache>/derived/fitted``, one file per source file, path, size and modification time
in its name's hash), and later episodes, in this process or another, decode that instead.
Where the cache cannot be written the fit is simply done again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import operator
import os
import struct
import threading
import weakref
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from countgym.bounded_cache import BoundedCache
from countgym.envs.common import fit_long_side
from countgym.envs.jpeg_clean import jpeg_parse
from countgym.envs.render import render_working_image
from countgym.envs.stored_view import StoredView
from countgym.scenes.cache_marks import JPEG_VERDICT

MAX_ENTRIES = 1024
"""Originals kept for reuse, at most (an encoded one holds only its PNG; a battery image its runs
of equal bytes; a decoded one about 1.7 MB at 768 x 768, until a backend encodes its view)."""
HELD_BYTES = 32 * 2**20
"""What the kept originals may hold in all: a paper's cells go through the same few hundred
battery images one after another, so a cache of a few entries never served the next cell."""
DECODED_BYTES = 24 * 2**20
"""Decoded views kept for the next draw (about 14 at 768 x 768)."""
RUNS_MAX_BYTES = 256 * 1024
"""A view is held as runs of equal bytes when they take at most this much memory."""


class Original:
    """A stimulus image as every episode starts from it."""

    __slots__ = ("stored_size", "size", "mode", "key", "sent", "sent_type", "_image", "_pixels", "_runs", "_png",
                 "_lock", "_runs_tried", "__weakref__")

    def __init__(self, image: Image.Image, stored_size: tuple[int, int], key: tuple[Any, ...] | None,
                 source: bytes | None = None) -> None:
        self.stored_size = stored_size
        """The size of the image file's pixels, before fitting."""
        self.size = image.size
        """(width, height) after fitting to the long-side limit."""
        self.mode = image.mode
        self.key = key
        """What identifies the view's pixels (None: not cached)."""
        self.sent = png_as_sent(source, image.size) if source is not None and image.mode == "RGB" else None
        """The image data of the file the image was decoded from, when that file is what a model
        is sent for the view (a PNG of exactly the view's pixels, ``png_as_sent``; a clean JPEG,
        ``countgym.envs.jpeg_clean``; metadata cut out): sent instead of an encoding of the view.
        Else None."""
        self.sent_type = "image/png"
        """The media type of ``sent``."""
        view = np.asarray(render_working_image(image))
        view.flags.writeable = False
        self._png: bytes | None = None
        # An RGB image is its view's pixels: it is made from them on demand, not kept twice.
        self._image: Image.Image | None = None if image.mode == "RGB" else image
        self._runs = _pack_runs(view) if self._image is None else None
        self._pixels: np.ndarray | None = None if self._runs is not None else view
        self._lock = threading.Lock()
        self._runs_tried = True

    @classmethod
    def from_sent(cls, data: bytes, media_type: str, size: tuple[int, int], key: tuple[Any, ...]) -> Original:
        """An RGB original held only as ``data``, the image data of its source file that a model
        is sent (``media_type`` ``image/png`` or ``image/jpeg``; ``size`` its width and height):
        nothing is decoded until an episode draws or a policy reads the pixels."""
        self = cls.__new__(cls)
        self.stored_size = self.size = (int(size[0]), int(size[1]))
        self.mode, self.key, self.sent, self.sent_type = "RGB", key, data, media_type
        self._png, self._image, self._runs, self._pixels = data, None, None, None
        self._lock = threading.Lock()
        self._runs_tried = False
        return self

    @property
    def source_png(self) -> bytes | None:
        """``sent`` when it is a PNG, else None."""
        return self.sent if self.sent_type == "image/png" else None

    @property
    def view(self) -> np.ndarray:
        """The unmarked working image (read-only): the first observation's pixels."""
        return self.pixels()

    @property
    def image(self) -> Any:
        """The fitted image episodes draw from (never drawn on: renders copy it): the PIL image,
        or for an RGB image a stand-in with its size and mode that decodes the pixels on use."""
        return self._image if self._image is not None else LazyImage(self)

    def pixels(self) -> np.ndarray:
        """The view's pixels (read-only), decoded again from the PNG when only that is held."""
        pixels = self._pixels
        if pixels is not None:
            return pixels
        if self._runs is not None:
            return _unpack_runs(*self._runs)
        return _decoded(self)

    def png(self) -> bytes | None:
        """The bytes the view is held as: its lossless PNG once a backend encoded it
        (``keep_encoded``), or the source file's image data it is sent as (``sent``: a PNG, or
        a JPEG, whose decoded pixels the view is)."""
        return self._png

    def keep_encoded(self, png: bytes) -> None:
        """Hold the view as ``png`` (lossless PNG bytes of exactly these pixels) instead of its
        pixels. Only an RGB original keyed by its file lets go of its pixels."""
        if self.key is None or self._image is not None or self._runs is not None:
            return
        with self._lock:
            if self._png is None:
                self._png = png
                self._pixels = None
        _CACHE.resized(self.key, self)

    def held_bytes(self) -> int:
        """The memory this original holds: its pixels or its PIL image, its runs, its PNG."""
        held = len(self._png or b"")
        if self._pixels is not None:
            held += int(self._pixels.nbytes)
        elif self._image is not None:
            held += self.size[0] * self.size[1] * len(self._image.getbands())
        if self._runs is not None:
            held += int(self._runs[0].nbytes + self._runs[1].nbytes)
        return held

    def first_view(self) -> StoredView | np.ndarray:
        """The unmarked view as a first observation: a ``StoredView`` of this original (decoded
        only when read; ``view_key`` knows it) when the original is keyed by its file, else a new
        read-only copy of the pixels."""
        if self.key is not None:
            return StoredView(self)
        out = _unpack_runs(*self._runs) if self._runs is not None else self.pixels().copy()
        out.flags.writeable = False
        return out

    def _keep_runs(self, pixels: np.ndarray) -> bool:
        """Hold ``pixels`` as runs of equal bytes as well, when they are that compact (a battery
        image), so later draws expand them instead of decoding the PNG again. Whether it does."""
        if self._runs is None and self._image is None and not self._runs_tried:
            self._runs_tried = True  # a photograph: its runs never fit, do not look again
            runs = _pack_runs(pixels)
            if runs is not None:
                with self._lock:
                    self._runs = runs
                if self.key is not None:
                    _CACHE.resized(self.key, self)
        return self._runs is not None


class LazyImage:
    """Stands in for an RGB original's PIL image in an episode's state: its size and mode at no
    cost; its pixels (any other attribute, or ``copy``/``convert``) decoded when asked for."""

    __slots__ = ("_original",)

    def __init__(self, original: Original) -> None:
        self._original = original

    @property
    def size(self) -> tuple[int, int]:
        return self._original.size

    @property
    def width(self) -> int:
        return self._original.size[0]

    @property
    def height(self) -> int:
        return self._original.size[1]

    @property
    def mode(self) -> str:
        return self._original.mode

    def load_image(self) -> Image.Image:
        """A new PIL image of the pixels (the caller may draw on it)."""
        return Image.fromarray(self._original.pixels())

    def copy(self) -> Image.Image:
        return self.load_image()

    def convert(self, mode: str | None = None, *args: Any, **kwargs: Any) -> Image.Image:
        img = self.load_image()
        return img if mode in (None, img.mode) and not args and not kwargs else img.convert(mode, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.load_image(), name)


_CACHE: BoundedCache[tuple[Any, ...], Original] = BoundedCache(MAX_ENTRIES, HELD_BYTES, Original.held_bytes)
"""The kept originals, by key (``MAX_ENTRIES``, ``HELD_BYTES``)."""
_DRAWN: dict[int, Original] = {}
_DECODED: BoundedCache[tuple[Any, ...], np.ndarray] = BoundedCache(2**62, DECODED_BYTES, lambda a: int(a.nbytes))
"""Decoded views kept for the next draw, by key (``DECODED_BYTES``)."""
_LOCK = threading.Lock()


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SENT_CHUNKS = frozenset({b"IHDR", b"IDAT", b"IEND"})
"""The chunks a PNG is sent with: the header, the pixels and the end (an RGB image needs no
``PLTE``)."""
DROPPED_CHUNKS = frozenset({b"pHYs", b"tEXt", b"zTXt", b"iTXt", b"tIME", b"PLTE"})
"""Chunks no decoder draws an RGB image with, dropped from what is sent (they can hold a label,
a token, a location, or megabytes of text): the pixels' chunks are copied, never re-encoded.
Colour management (``gAMA``, ``cHRM``, ``sRGB``, ``iCCP``, ``cICP``), transparency (``tRNS``),
animation (``acTL``), orientation (``eXIf``) and any unknown chunk make a file ineligible: the
view is encoded afresh instead."""


def _deflate_bound(n: int) -> int:
    """The most bytes a zlib stream of ``n`` bytes may take here: the bytes themselves plus 1.6 %
    and 1 kB (an encoder's stored or expanded blocks of incompressible rows cost about 0.1 %). A
    longer ``IDAT`` pads the pixels with something."""
    return n + (n >> 6) + 1024


def png_as_sent(data: bytes, size: tuple[int, int], *, stream_checked: bool = False) -> bytes | None:
    """The PNG to send for ``data`` when every decoder reads it as exactly the 8-bit RGB pixels
    Pillow decoded from it (``size``: their width and height): non-interlaced 8-bit RGB, correct
    CRCs, one zlib stream in ``IDAT`` that inflates to exactly the pixel rows, ending at
    ``IEND``. What is sent is ``IHDR``, ``IDAT`` and ``IEND`` only (``data`` itself when that is
    all it holds); chunks in ``DROPPED_CHUNKS`` are left out. Else None (anything after the zlib
    stream or after ``IEND``, a pixel stream larger than the pixels can compress to, any other
    chunk): the view is encoded afresh. At most the pixels' size is inflated, so a compression
    bomb costs no more than the image. ``stream_checked``: this file's pixel stream is known to
    pass (``load_original`` records that per file, CRCs included): the chunks are walked, the
    pixel chunks neither inflated nor checksummed again."""
    if not data.startswith(_PNG_SIGNATURE):
        return None
    pos, view = len(_PNG_SIGNATURE), memoryview(data)
    ihdr: bytes | None = None
    idat: list[tuple[int, int]] = []  # (start, end) of each IDAT chunk, header and CRC included
    dropped = False
    while pos + 12 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        end = pos + 12 + length
        if end > len(data) or (kind not in SENT_CHUNKS and kind not in DROPPED_CHUNKS):
            return None
        body = view[pos + 8 : end - 4]
        if (not stream_checked or kind != b"IDAT") and zlib.crc32(body, zlib.crc32(kind)) != struct.unpack_from(">I", data, end - 4)[0]:
            return None
        if kind == b"IHDR":
            if ihdr is not None or pos != len(_PNG_SIGNATURE) or length != 13:
                return None
            w, h, depth, colour, method, filt, interlace = struct.unpack(">IIBBBBB", body)
            if (w, h) != tuple(size) or (depth, colour, method, filt, interlace) != (8, 2, 0, 0, 0):
                return None
            ihdr = data[pos:end]
        elif ihdr is None:
            return None
        elif kind == b"IDAT":
            if idat and idat[-1][1] != pos:
                return None  # the pixel chunks must follow each other
            idat.append((pos, end))
        elif kind == b"IEND":
            if end != len(data) or length != 0 or not idat:
                return None
            if not _within_bound(idat, size) or (not stream_checked and not _one_stream_of_pixels(view, idat, size)):
                return None
            if not dropped:
                return data
            return b"".join([_PNG_SIGNATURE, ihdr, view[idat[0][0] : idat[-1][1]], data[pos:end]])
        else:
            if kind == b"PLTE" and idat:
                return None  # a palette after the pixels: not a valid PNG
            dropped = True
        pos = end
    return None


def _within_bound(idat: list[tuple[int, int]], size: tuple[int, int]) -> bool:
    """Whether the ``IDAT`` chunks are no longer than a zlib stream of the pixel rows may be."""
    w, h = size
    return sum(end - start - 12 for start, end in idat) <= _deflate_bound(h * (1 + 3 * w))


def _one_stream_of_pixels(view: memoryview, idat: list[tuple[int, int]], size: tuple[int, int]) -> bool:
    """Whether the ``IDAT`` chunks hold one zlib stream of exactly the pixel rows of an 8-bit RGB
    image of ``size``, with nothing after it (inflating no more than the rows)."""
    w, h = size
    rows = h * (1 + 3 * w)
    inflater = zlib.decompressobj()
    got = 0
    try:
        for start, end in idat:
            chunk: bytes | memoryview = view[start + 8 : end - 4]
            while len(chunk):
                if inflater.eof:
                    return False  # bytes after the zlib stream: a second stream, a payload
                # max_length >= 1 here (a 0 would mean no limit): ``got`` never passes ``rows``.
                got += len(inflater.decompress(chunk, rows + 1 - got))
                if got > rows or inflater.unused_data:
                    return False
                chunk = inflater.unconsumed_tail
    except zlib.error:
        return False
    return inflater.eof and got == rows


def _pack_runs(view: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]] | None:
    """(byte values, run lengths, shape) of ``view``'s bytes in order, or None when the runs
    would take more than ``RUNS_MAX_BYTES`` (a photograph) or more than the pixels themselves (a
    small noisy image: five bytes a run)."""
    flat = np.ascontiguousarray(view).reshape(-1)
    if flat.size == 0:
        return None
    change = np.empty(flat.size, dtype=bool)
    change[0] = True
    np.not_equal(flat[1:], flat[:-1], out=change[1:])
    starts = np.flatnonzero(change)
    if starts.size * 5 > min(RUNS_MAX_BYTES, flat.size):
        return None
    lengths = np.diff(np.append(starts, flat.size)).astype(np.uint32)
    return flat[starts], lengths, view.shape


def _unpack_runs(values: np.ndarray, lengths: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A new read-only array of the pixels ``_pack_runs`` packed."""
    out = np.repeat(values, lengths).reshape(shape)
    out.flags.writeable = False
    return out


def _decoded(original: Original) -> np.ndarray:
    """``original``'s pixels from its PNG, through the bounded cache of decoded views."""
    key = original.key
    assert key is not None
    hit = _DECODED.get(key)
    if hit is not None:
        return hit
    png = original.png()
    if png is None:  # encoded and decoded at once by another thread: the pixels are back
        pixels = original._pixels
        assert pixels is not None
        return pixels
    try:
        with Image.open(io.BytesIO(png)) as im:
            pixels = np.asarray(im.convert("RGB") if im.mode != "RGB" else im)
    except (OSError, ValueError, SyntaxError) as e:  # a stored file whose data does not decode
        from countgym.errors import UserError

        raise UserError(f"cannot read image {key[0]}: {e}") from None
    pixels.flags.writeable = False
    if original._keep_runs(pixels):
        return pixels  # held as runs from now on: expanding them is cheaper than a cache entry
    _DECODED.put(key, pixels)
    return pixels


def mark_drawn_over(out: np.ndarray, original: Original) -> np.ndarray:
    """Note that ``out`` (a working image, same size) is ``original``'s unmarked view with marks
    drawn on it, while ``out`` lives: encoders then redo only the rows that differ
    (``drawn_over``). Returns ``out``."""
    if original.key is not None and out.shape[:2] == original.size[::-1] and out.ndim == 3 and out.shape[2] == 3:
        with _LOCK:
            _DRAWN[id(out)] = original
        weakref.finalize(out, _DRAWN.pop, id(out), None)
    return out


def drawn_over(array: Any) -> tuple[tuple[Any, ...], np.ndarray] | None:
    """(key, pixels) of the unmarked view ``array`` was drawn over, or None."""
    with _LOCK:
        original = _DRAWN.get(id(array))
    if original is None or original.key is None:
        return None
    return original.key, original.pixels()


def view_key(array: Any) -> tuple[Any, ...] | None:
    """The key of the cached original ``array`` is the unmarked view of (a ``StoredView``; None
    for any other object): equal keys mean equal pixels, so an encoding of one serves all."""
    return array.original.key if isinstance(array, StoredView) else None


def original_of(array: Any) -> Original | None:
    """The ``Original`` whose unmarked view ``array`` is (a ``StoredView``), or None."""
    return array.original if isinstance(array, StoredView) else None


def load_original(dataset: Any, stimulus: Any, max_side: int) -> Original:
    """The stimulus's image fitted to ``max_side``, from the cache when its file is unchanged."""
    key: tuple[Any, ...] | None
    sent: Original | bool | None = None
    try:
        path = dataset.image_path(stimulus)
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns, st.st_ino, max_side)
    except (OSError, AttributeError):
        key = None  # no file to key on: load it (a missing file raises its usual error there)
    if key is not None:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
        sent = _load_as_sent(key, max_side) if _standard_loader(dataset) else None
        if isinstance(sent, Original):
            _keep(key, sent)
            return sent
    fitted = _load_fitted(dataset, stimulus, key, max_side) if key is not None else None
    if fitted is not None:
        image, stored, data = fitted
        entry = Original(image, stored, key, data)
    elif key is not None and _standard_loader(dataset):
        raw, data = dataset.read_image(stimulus)
        fit = fit_long_side(raw, max_side)
        # A PNG ``_load_as_sent`` refused (False) is not checked again: it is encoded afresh.
        entry = Original(fit, raw.size, key, data if fit is raw and sent is not False else None)
    else:
        raw = dataset.load_image(stimulus)
        entry = Original(fit_long_side(raw, max_side), raw.size, key)
    if key is not None:
        _keep(key, entry)
    return entry


def derived_original(base: Original, variant: tuple[Any, ...], make: Any) -> Original:
    """The image ``make`` draws from ``base``'s fitted image (a PIL copy it may change), kept like
    an original under ``base``'s key plus ``variant`` (what ``make`` does, with its parameters):
    CounterCount's blurred images are drawn once per stimulus and setting, not once per episode.
    Sent as a fresh encoding (it is not its source file), once per process while kept."""
    key = None if base.key is None else (*base.key, *variant)
    if key is not None:
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
    entry = Original(make(base.image.copy()), base.stored_size, key)
    if base.sent is not None and base.png() is None:
        base.keep_encoded(base.sent)  # its own view may never be sent: hold its file, not its pixels
    if key is not None:
        _keep(key, entry)
    return entry


def _keep(key: tuple[Any, ...], entry: Original) -> None:
    """Cache ``entry`` under ``key``, dropping the oldest beyond ``MAX_ENTRIES`` or ``HELD_BYTES``."""
    _CACHE.put(key, entry)


def _load_as_sent(key: tuple[Any, ...], max_side: int) -> Original | bool | None:
    """The original of a source file that is already what a model is sent (an 8-bit RGB PNG
    within ``max_side`` that ``png_as_sent`` accepts), held as that PNG and decoded only when
    read; False for a candidate whose chunks or pixel stream ``png_as_sent`` refused, None for any
    other file (either way the caller decodes it as usual, errors included).

    Its pixel stream is inflated once per file to check it (``png_as_sent``): a file that passed
    is recorded in the derived cache (``<countgym cache>/derived/sent``, an empty file named by
    the hash of the file's path, size, modification time and inode), so later episodes, in this
    process or another, check its chunks only."""
    try:
        fd = os.open(key[0], os.O_RDONLY)
        try:
            data = os.read(fd, key[1] + 1)  # the size it had when stat'ed, or one byte more
        finally:
            os.close(fd)
    except OSError:
        return None
    if len(data) != key[1]:
        return None  # changed since: read as usual
    if data[:2] == b"\xff\xd8":
        return _jpeg_as_sent(data, key, max_side, _sent_record(key))
    if len(data) < 33 or not data.startswith(_PNG_SIGNATURE) or data[12:16] != b"IHDR":
        return None
    size = struct.unpack_from(">II", data, 16)
    if not 1 <= min(size) <= max(size) <= max_side or data[24:29] != b"\x08\x02\x00\x00\x00":
        return None
    marker = _sent_record(key)
    with _LOCK:
        known = key in _STREAMS_CHECKED
    if not known:
        known = os.path.isfile(marker)
    png = png_as_sent(data, size, stream_checked=known)
    if png is None:
        return False
    with _LOCK:
        if len(_STREAMS_CHECKED) >= MAX_ENTRIES * 64:
            _STREAMS_CHECKED.clear()
        _STREAMS_CHECKED.add(key)
    if not known:
        try:
            _derived_folder(Path(marker).parent)
            Path(marker).touch()
        except OSError:  # a read-only cache: the stream is checked again in the next process
            pass
    return Original.from_sent(png, "image/png", size, key)


def _jpeg_as_sent(data: bytes, key: tuple[Any, ...], max_side: int, record: str) -> Original | None:
    """The original of a clean 8-bit three-component JPEG within ``max_side``
    (``countgym.envs.jpeg_clean``: its metadata segments and anything after EOI cut out, the
    image data untouched, as for a video frame), held as those bytes; None for any other JPEG.

    Finding the segments reads every entropy-coded byte: the verdict (size and the byte spans
    kept) is recorded as ``record`` (the derived cache's ``sent/``, beside the PNG records,
    ``_write_jpeg_record``), and a later process reads it instead while the file is unchanged."""
    parsed = _read_jpeg_record(record, len(data))
    if parsed is None:
        parsed = jpeg_parse(data)
        if parsed is None:
            return None
        _write_jpeg_record(record, parsed)
    spans, size = parsed
    if not 1 <= min(size) <= max(size) <= max_side:
        return None
    view = memoryview(data)
    sent = data if spans == [(0, len(data))] else b"".join(view[a:b] for a, b in spans)
    return Original.from_sent(sent, "image/jpeg", size, key)


def _write_jpeg_record(record: str, parsed: tuple[list[tuple[int, int]], tuple[int, int]]) -> None:
    """Record a JPEG's verdict (``jpeg W H A0 B0 A1 B1 ...``: its size, then the ends of the byte
    spans kept) as the target of a symbolic link named ``record``, which a later episode reads
    with one system call (``os.readlink``), no open and no read; where links cannot be made, as
    the content of a file of that name. A read-only cache records nothing: the next process
    parses the file again."""
    spans, size = parsed
    text = " ".join(["jpeg", *map(str, [*size, *(i for span in spans for i in span)])])
    folder, name = os.path.split(record)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        _derived_folder(Path(folder))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # left by a killed process of this id: never write through it
        try:
            os.symlink(text, tmp)
        except (OSError, NotImplementedError):  # a file system or platform without links
            Path(tmp).write_text(text)
        os.replace(tmp, record)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _read_jpeg_record(record: str, length: int) -> tuple[list[tuple[int, int]], tuple[int, int]] | None:
    """(spans, size) from a JPEG verdict ``_write_jpeg_record`` recorded (a link's target, or a
    file's content), or None when there is none or it does not describe a file of ``length``
    bytes (any doubt: parse the file again)."""
    try:
        text = os.readlink(record)
    except FileNotFoundError:
        return None
    except OSError:  # not a link: a verdict kept as a file's content
        try:
            fd = os.open(record, os.O_RDONLY)
        except OSError:
            return None
        try:
            text = os.read(fd, 65536).decode("ascii")
        except (OSError, UnicodeDecodeError):
            return None
        finally:
            os.close(fd)
    words = JPEG_VERDICT.fullmatch(text)
    if words is None:
        return None
    w, h, *ends = map(int, words[1].split())
    if len(ends) % 2 or ends[-1] > length:
        return None
    # Spans in order, none empty, none overlapping, all within the file.
    starts, stops = ends[::2], ends[1::2]
    if ends != sorted(ends) or not all(map(operator.lt, starts, stops)):
        return None
    return list(zip(starts, stops, strict=True)), (w, h)


_STREAMS_CHECKED: set[tuple[Any, ...]] = set()
"""Source files whose pixel stream passed ``png_as_sent`` in this process."""


def _sent_record(key: tuple[Any, ...]) -> str:
    """Where the derived cache records what was checked of the source file ``key`` names (a
    string path: this runs once per episode that starts from a file)."""
    env = os.environ
    folder = _sent_folder(env.get("COUNTGYM_DERIVED_CACHE"), env.get("COUNTGYM_CACHE"), env.get("HOME"))
    return folder + hashlib.sha256(repr(key).encode()).hexdigest()[:40]


@functools.lru_cache(maxsize=8)
def _sent_folder(derived: str | None, cache: str | None, home: str | None) -> str:
    """``<derived cache>/sent/`` for these values of ``COUNTGYM_DERIVED_CACHE``,
    ``COUNTGYM_CACHE`` and ``HOME`` (what ``derived_cache_root`` reads)."""
    from countgym.scenes.cache import derived_cache_root

    return os.path.join(str(derived_cache_root()), "sent", "")


def _derived_path(kind: str, key: tuple[Any, ...], suffix: str = "") -> Path:
    from countgym.scenes.cache import derived_cache_root

    name = hashlib.sha256(repr(key).encode()).hexdigest()[:40]
    return derived_cache_root() / kind / f"{name}{suffix}"


def _fitted_path(key: tuple[Any, ...]) -> Path:
    return _derived_path("fitted", key, ".png")


def _derived_folder(folder: Path) -> None:
    """Create a folder of the derived cache (``fitted/``, ``sent/``) with countgym's marks
    (``cache_marks``)."""
    from countgym.scenes.cache import ensure_cache_root
    from countgym.scenes.cache_marks import BUILD_MARKER, mark_build

    ensure_cache_root(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / BUILD_MARKER).exists():
        mark_build(folder)


def _standard_loader(dataset: Any) -> bool:
    """Whether ``dataset`` reads its images as countgym's ``Dataset`` does (not its own way)."""
    cls = type(dataset)
    known = _STANDARD.get(cls)
    if known is None:
        from countgym.stimulus import Dataset

        known = _STANDARD[cls] = cls.load_image is Dataset.load_image and cls.read_image is Dataset.read_image
    return known


_STANDARD: dict[type, bool] = {}
"""Dataset classes and whether they read images as ``Dataset`` does (a class's methods are set
when it is defined)."""


def _load_fitted(
    dataset: Any, stimulus: Any, key: tuple[Any, ...], max_side: int
) -> tuple[Image.Image, tuple[int, int], bytes | None] | None:
    """(fitted image, stored size, the fitted copy's PNG bytes) of a source larger than
    ``max_side`` from the fitted-copy cache, made and kept there on first use; None for a
    source that needs no fitting or a dataset that reads its images its own way (the caller
    loads it as usual)."""
    if not _standard_loader(dataset):
        return None
    path = Path(key[0])
    try:
        with Image.open(path) as im:  # the header only
            stored = im.size
    except (OSError, Image.DecompressionBombError, ValueError):
        return None  # the usual load reports it
    if max(stored) <= max_side:
        return None
    cached = _fitted_path(key)
    try:
        data = cached.read_bytes()
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            if im.mode == "RGB":
                return im.copy(), stored, data
    except (OSError, ValueError, SyntaxError):
        pass
    fitted = fit_long_side(dataset.load_image(stimulus), max_side)
    buf = io.BytesIO()
    fitted.save(buf, format="PNG", compress_level=1)
    data = buf.getvalue()
    try:
        _derived_folder(cached.parent)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, cached)
    except OSError:  # a read-only cache: fit again next time
        Path(tmp).unlink(missing_ok=True) if "tmp" in locals() else None
    return fitted, stored, data


def clear() -> None:
    """Forget every cached image."""
    with _LOCK:
        _CACHE.clear()
        _DECODED.clear()
        _STREAMS_CHECKED.clear()
