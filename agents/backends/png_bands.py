"""PNG encoding of a view drawn over a cached unmarked view: only the changed row bands are deflated.

A tag render differs from its stimulus's unmarked view only around the tags. The PNG stream is
cut into bands of ``BAND_ROWS`` rows, each deflated on its own: raw deflate ended by a full
flush, which resets the compressor's history, so no band refers to bytes before it and any bands
join into one valid stream (one compressor serves all the bands of an encode; making one per band
cost more time under the interpreter lock than the deflating). A band whose filtered bytes are the
same as the unmarked view's reuses that view's compressed band. Rows use the "Up" filter, so a band is
re-encoded when one of its rows or the row above its first row changed. The zlib trailer's
Adler-32 is combined from the bands' checksums (zlib's ``adler32_combine``), so unchanged bands
are never read again. Decoders see exactly the image's pixels; the bytes differ from
``encode_png``'s (the block boundaries), never the pixels.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Hashable

import numpy as np

from countgym.bounded_cache import BoundedCache

BAND_ROWS = 16
"""Rows per independently deflated band (about 37 KB of a 768-wide RGB image)."""
MAX_VIEWS = 4096
"""Unmarked views whose compressed bands are kept, at most ..."""
MAX_BYTES = 32 * 2**20
"""... and at most this many compressed bytes in all (a battery image's view: tens of kB, a
photo's: about 1 MB), so that every episode in flight finds its view's bands when it draws."""

_ADLER_MOD = 65521
_FINAL_BLOCK = zlib.compressobj(1, zlib.DEFLATED, -15).flush()
"""An empty final deflate block: ends the joined stream."""
_ZLIB_HEADER = b"\x78\x01"
"""zlib stream header: deflate, 32 KiB window, fastest level."""
_COLOUR_TYPE = {1: 0, 3: 2, 4: 6}
_SIGNATURE = b"\x89PNG\r\n\x1a\n"

Band = tuple[bytes, int, int]
"""(raw deflate bytes ending in a full flush, Adler-32 of the filtered bytes, their length)."""

_BANDS: BoundedCache[Hashable, list[Band]] = BoundedCache(MAX_VIEWS, MAX_BYTES, lambda bands: sum(len(b[0]) for b in bands))


def adler32_combine(adler1: int, adler2: int, len2: int) -> int:
    """The Adler-32 of two byte strings joined, from each one's checksum and the second's length."""
    rem = len2 % _ADLER_MOD
    sum1 = adler1 & 0xFFFF
    sum2 = (rem * sum1) % _ADLER_MOD
    sum1 += (adler2 & 0xFFFF) + _ADLER_MOD - 1
    sum2 += ((adler1 >> 16) & 0xFFFF) + ((adler2 >> 16) & 0xFFFF) + _ADLER_MOD - rem
    sum1 %= _ADLER_MOD
    sum2 %= _ADLER_MOD
    return sum1 | (sum2 << 16)


def _rows(image: np.ndarray) -> np.ndarray | None:
    """The image as (rows, bytes per row) uint8, or None when it is not a PNG-able uint8 image."""
    channels = 1 if image.ndim == 2 else (image.shape[2] if image.ndim == 3 else 0)
    if image.dtype != np.uint8 or channels not in _COLOUR_TYPE or image.shape[0] < 1 or image.shape[1] < 1:
        return None
    return np.ascontiguousarray(image).reshape(image.shape[0], -1)


def _filtered(rows: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` PNG-filtered ("None" for row 0, "Up" for the others), each prefixed
    by its filter byte."""
    raw = np.empty((stop - start, rows.shape[1] + 1), dtype=np.uint8)
    raw[:, 0] = 2
    if start == 0:
        raw[0, 0] = 0
        raw[0, 1:] = rows[0]
        np.subtract(rows[1:stop], rows[: stop - 1], out=raw[1:, 1:])
    else:
        np.subtract(rows[start:stop], rows[start - 1 : stop - 1], out=raw[:, 1:])
    return raw


def _compressor() -> zlib._Compress:
    """Raw deflate, fastest level, run-length strategy (what ``encode_png`` uses)."""
    return zlib.compressobj(1, zlib.DEFLATED, -15, 8, zlib.Z_RLE)


def _deflated(deflate: zlib._Compress, raw: np.ndarray) -> Band:
    """One band of filtered rows, standing alone (the full flush resets the history)."""
    data = deflate.compress(raw.data) + deflate.flush(zlib.Z_FULL_FLUSH)
    return data, zlib.adler32(raw.data), raw.size


def _band(rows: np.ndarray, start: int, stop: int, deflate: zlib._Compress) -> Band:
    """Filter rows ``start:stop`` and deflate them as a band of their own."""
    return _deflated(deflate, _filtered(rows, start, stop))


def _view_bands(key: Hashable, view_rows: np.ndarray) -> list[Band]:
    """The unmarked view's bands, deflated once per view (bounded cache)."""
    hit = _BANDS.get(key)
    if hit is not None:
        return hit
    h = view_rows.shape[0]
    raw = _filtered(view_rows, 0, h)  # the whole view at once: the bands are row slices of it
    deflate = _compressor()
    bands = [_deflated(deflate, raw[s : s + BAND_ROWS]) for s in range(0, h, BAND_ROWS)]
    _BANDS.put(key, bands)
    return bands


def _changed_rows(rows: np.ndarray, view_rows: np.ndarray) -> np.ndarray:
    """Per row: does it differ from the view's (compared 8 bytes at a time where rows allow)?"""
    if rows.shape[1] % 8 == 0:
        return (rows.view(np.uint64) != view_rows.view(np.uint64)).any(1)
    return (rows != view_rows).any(1)


def encode_png_over(image: np.ndarray, view_key: Hashable, view: np.ndarray) -> bytes | None:
    """PNG bytes of ``image``, drawn over the unmarked ``view`` known by ``view_key``; None when
    the two cannot share bands (other shape or dtype): the caller encodes the whole image."""
    if image.shape != view.shape:
        return None
    rows, view_rows = _rows(image), _rows(view)
    if rows is None or view_rows is None:
        return None
    h = rows.shape[0]
    base = _view_bands(view_key, view_rows)
    changed = _changed_rows(rows, view_rows)
    n_bands = -(-h // BAND_ROWS)
    dirty = np.zeros(n_bands * BAND_ROWS, dtype=bool)
    dirty[:h] = changed
    dirty[1:h] |= changed[:-1]  # the "Up" filter reads the row above
    band_dirty: list[bool] = np.logical_or.reduce(dirty.reshape(n_bands, BAND_ROWS), axis=1).tolist()
    bands: list[Band] = []
    deflate: zlib._Compress | None = None
    for i, start in enumerate(range(0, h, BAND_ROWS)):
        stop = min(start + BAND_ROWS, h)
        if band_dirty[i]:
            deflate = deflate or _compressor()
            bands.append(_band(rows, start, stop, deflate))
        else:
            bands.append(base[i])
    adler = 1
    for _, band_adler, length in bands:
        adler = adler32_combine(adler, band_adler, length)
    idat = b"".join([_ZLIB_HEADER, *(b[0] for b in bands), _FINAL_BLOCK, struct.pack(">I", adler)])
    channels = 1 if image.ndim == 2 else image.shape[2]
    ihdr = struct.pack(">IIBBBBB", image.shape[1], h, 8, _COLOUR_TYPE[channels], 0, 0, 0)
    return _SIGNATURE + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def clear() -> None:
    """Forget every cached view's bands."""
    _BANDS.clear()
