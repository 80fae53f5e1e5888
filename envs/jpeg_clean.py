"""JPEG files as they may leave the machine: image data only, cut from the file without re-encoding.

A stored JPEG frame is sent to a provider as its own bytes when they hold nothing but what a
decoder needs to draw the pixels: SOI, the tables (DQT, DHT, DRI), one frame header (SOF0
baseline, SOF1 extended or SOF2 progressive; 8-bit, three components), the scans (SOS and their
entropy-coded data) and EOI, plus an APP0 JFIF and an Adobe APP14 (its colour transform flag
changes how three components decode). Every other APPn segment (Exif, XMP, ICC profiles, IPTC,
maker notes) and every COM segment is cut out, and nothing after EOI is kept. The pixels are
untouched: the segments that remain are the file's own bytes, so a decoder reads exactly the
pixels it read from the file (colour profiles and orientation tags are ignored by our own decoding
too, so what the model sees is what the environment decoded).

A file this cannot vouch for (another marker, 12-bit or arithmetic-coded frames, grey or CMYK,
a truncated or malformed segment, a size other than the one decoded) gives None: the caller
then sends a fresh lossless encoding of the decoded pixels instead.
"""

from __future__ import annotations

import re
import struct

SOI, EOI, SOS, DQT, DHT, DRI = 0xD8, 0xD9, 0xDA, 0xDB, 0xC4, 0xDD
SOF_SENT = frozenset({0xC0, 0xC1, 0xC2})
"""Frame headers sent as they are: baseline, extended sequential and progressive Huffman."""
APP0, APP14 = 0xE0, 0xEE
_TABLES = frozenset({DQT, DHT, DRI})
_DROPPED = frozenset(range(0xE0, 0xF0)) | {0xFE}
"""APPn and COM: metadata, cut out (APP0 JFIF and APP14 Adobe are kept, see ``_keep_app``)."""
# In entropy-coded data a 0xFF byte is followed by 0x00 (a stuffed byte) or a restart marker
# (RST0-7); anything else (fill 0xFF bytes included) starts the next marker.
_MARKER_IN_SCAN = re.compile(rb"\xff[^\x00\xd0-\xd7\xff]")


def jpeg_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a JPEG's frame header, or None when ``data`` is not a JPEG this
    module sends (``jpeg_as_sent`` would refuse it for any size)."""
    parsed = _parse(data)
    return None if parsed is None else parsed[1]


def jpeg_as_sent(data: bytes, size: tuple[int, int]) -> bytes | None:
    """``data`` with its metadata segments and anything after EOI cut out, when it is a clean
    8-bit three-component JPEG of ``size`` (width, height) that this module can vouch for (see the
    module docstring); else None. Returns ``data`` itself when nothing had to be cut."""
    parsed = _parse(data)
    if parsed is None or parsed[1] != tuple(size):
        return None
    spans = parsed[0]
    if len(spans) == 1 and spans[0] == (0, len(data)):
        return data
    view = memoryview(data)
    return b"".join(view[a:b] for a, b in spans)


def jpeg_parse(data: bytes) -> tuple[list[tuple[int, int]], tuple[int, int]] | None:
    """(byte spans ``jpeg_as_sent`` keeps, (width, height)) of a JPEG this module sends, or None:
    one pass over ``data`` (the scan for the next marker reads every entropy-coded byte)."""
    return _parse(data)


def _keep_app(marker: int, body: bytes) -> bool:
    return (marker == APP0 and body.startswith(b"JFIF\x00")) or (marker == APP14 and body.startswith(b"Adobe"))


def _parse(data: bytes) -> tuple[list[tuple[int, int]], tuple[int, int]] | None:
    """(byte spans to keep, (width, height)) of a JPEG this module sends, or None."""
    if len(data) < 4 or data[0] != 0xFF or data[1] != SOI:
        return None
    n = len(data)
    spans: list[tuple[int, int]] = []
    keep_from = 0  # start of the run of kept bytes being extended
    pos = 2
    size: tuple[int, int] | None = None
    scans = 0
    while True:
        if pos + 2 > n or data[pos] != 0xFF:
            return None
        while pos + 1 < n and data[pos + 1] == 0xFF:  # fill bytes before a marker
            pos += 1
        if pos + 2 > n:
            return None
        marker = data[pos + 1]
        if marker == EOI:
            if size is None or scans == 0:
                return None
            spans.append((keep_from, pos + 2))
            return spans, size
        if pos + 4 > n:
            return None
        length = struct.unpack_from(">H", data, pos + 2)[0]
        end = pos + 2 + length
        if length < 2 or end > n:
            return None
        body = data[pos + 4 : end]
        if marker in _DROPPED and not _keep_app(marker, body):
            if pos > keep_from:
                spans.append((keep_from, pos))
            keep_from = pos = end
            continue
        if marker in SOF_SENT:
            if size is not None or length != 8 + 3 * 3:
                return None
            precision, h, w, components = struct.unpack_from(">BHHB", body)
            if precision != 8 or components != 3 or w == 0 or h == 0:
                return None
            size = (w, h)
            pos = end
        elif marker == SOS:
            if size is None or length < 6 or body[0] * 2 + 6 != length:
                return None
            found = _MARKER_IN_SCAN.search(data, end)
            if found is None:
                return None
            scans += 1
            pos = found.start()
        elif marker in _TABLES or marker in _DROPPED:
            pos = end
        else:  # another frame type, DNL, DHP, EXP, JPG extensions, reserved: not vouched for
            return None
