"""Fetching listed image URLs into a folder, for releases that ship URLs instead of images.

Each image is saved as ``<dest>/<sha256(url)><ext>`` (``url_image_stem``), the extension from
the decoded format, so the loaders find an image from its URL alone and a re-run skips what is
already there. A download is accepted only if it is an image Pillow can decode, within
``max_bytes`` and ``max_pixels`` (decompression-bomb guard: the header's size is checked before
any pixel is decoded), and matching the release's SHA-256 when one is given (Flickr serves a
"photo unavailable" placeholder for deleted photos; the hash catches it).

Dead links (HTTP 4xx other than 408/425/429, non-images, hash mismatches, oversized files) are
skipped at once; transient failures (timeouts, connection errors, 408/425/429/5xx) are retried
``retries`` times with exponential backoff and then reported as failed. Nothing raises for one bad
URL; the ``DownloadReport`` lists every skip with its reason.

``timeout`` is a deadline, not a read timeout: one attempt (connect, headers, body) ends when it
passes, even if the server sends a byte every second. A watchdog shuts the attempt's socket
down at the deadline, so a blocked read returns at once; the attempt then counts as a transient
failure. An image therefore takes at most ``(retries + 1) x timeout`` plus the backoff sleeps.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from PIL import Image
from tqdm import tqdm

from .common import FORMAT_EXTENSIONS, find_image, url_image_stem

USER_AGENT = "countgym-image-fetch/1 (research use; one request per listed image)"
MAX_BYTES = 50_000_000
MAX_PIXELS = 64_000_000
"""Same cap as ``countgym.stimulus`` (so every accepted image is readable later)."""
TRANSIENT_HTTP = frozenset({408, 425, 429, 500, 502, 503, 504})

Outcome = Literal["downloaded", "present", "dead", "failed"]


@dataclass(frozen=True)
class DownloadReport:
    """What a download run did; ``dead`` and ``failed`` hold ``(url, reason)`` pairs."""

    downloaded: int
    present: int
    dead: tuple[tuple[str, str], ...]
    """Skipped for good: missing, not an image, changed content, too large."""
    failed: tuple[tuple[str, str], ...]
    """Still failing after the retries (transient errors); a re-run may fetch them."""

    @property
    def available(self) -> int:
        """Images now in the folder (downloaded + already present)."""
        return self.downloaded + self.present


class RejectedImage(ValueError):
    """A permanent failure for one URL or file: the reason is the message."""


class _Transient(Exception):
    """A failure worth retrying."""


ALLOWED_SCHEMES = ("http", "https")
"""The only URL schemes fetched, for the listed URL and for every redirect it leads to."""


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects only to http(s): urllib's own handler also follows ``ftp://``, which the
    listed URLs are refused for."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001, ANN201
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in ALLOWED_SCHEMES:
            raise RejectedImage(f"redirected to a {scheme or 'schemeless'} URL (only http(s) is fetched)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Watchdog:
    """Shuts down every socket of one attempt when the attempt's deadline passes."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks.append(sock)
            expired = self.expired
        if expired:
            _shutdown(sock)

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
            socks = list(self._socks)
        for sock in socks:
            _shutdown(sock)

    def cancel(self) -> None:
        self._timer.cancel()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed


def _watched(base: type[http.client.HTTPConnection], dog: _Watchdog) -> type[http.client.HTTPConnection]:
    """A connection class whose sockets (TLS handshake included) the watchdog can shut down."""

    class Watched(base):  # type: ignore[valid-type, misc]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            create: Callable[..., socket.socket] = getattr(self, "_create_connection")  # noqa: B009

            def create_watched(*a: object, **k: object) -> socket.socket:
                sock = create(*a, **k)
                dog.watch(sock)
                return sock

            self._create_connection = create_watched

    return Watched


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, dog: _Watchdog) -> None:
        super().__init__()
        self._dog = dog

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_watched(http.client.HTTPConnection, self._dog), req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, dog: _Watchdog) -> None:
        super().__init__()
        self._dog = dog

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        kwargs = {"context": self._context}  # type: ignore[attr-defined]
        if hasattr(self, "_check_hostname"):  # Python < 3.12
            kwargs["check_hostname"] = self._check_hostname
        return self.do_open(_watched(http.client.HTTPSConnection, self._dog), req, **kwargs)


def download_images(
    items: Iterable[tuple[str, str | None]],
    dest: str | Path,
    *,
    workers: int = 8,
    retries: int = 3,
    timeout: float = 30.0,
    backoff_s: float = 0.5,
    max_bytes: int = MAX_BYTES,
    max_pixels: int = MAX_PIXELS,
    progress: bool = True,
) -> DownloadReport:
    """Fetch ``(url, sha256 or None)`` items into ``dest`` (skipping present files); never raises
    for a bad URL. ``retries`` bounds the extra attempts after a transient failure."""
    if workers < 1 or retries < 0 or timeout <= 0 or max_bytes < 1 or max_pixels < 1:
        raise ValueError("workers >= 1, retries >= 0, timeout > 0, max_bytes >= 1 and max_pixels >= 1 required")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    unique: dict[str, str | None] = {}
    for url, sha in items:
        if url and url not in unique:
            unique[url] = sha.lower() if isinstance(sha, str) and sha else None
    counts = {"downloaded": 0, "present": 0}
    dead: list[tuple[str, str]] = []
    failed: list[tuple[str, str]] = []

    def one(url: str) -> tuple[str, Outcome, str]:
        return (url, *_fetch_one(url, unique[url], dest, retries=retries, timeout=timeout,
                                 backoff_s=backoff_s, max_bytes=max_bytes, max_pixels=max_pixels))

    bar = tqdm(total=len(unique), desc="download images", unit="img", disable=None if progress else True)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(one, u) for u in unique]
        for fut in as_completed(futures):
            url, outcome, reason = fut.result()
            if outcome in counts:
                counts[outcome] += 1
            else:
                (dead if outcome == "dead" else failed).append((url, reason))
            bar.update(1)
    bar.close()
    order = {u: i for i, u in enumerate(unique)}
    return DownloadReport(
        downloaded=counts["downloaded"],
        present=counts["present"],
        dead=tuple(sorted(dead, key=lambda x: order[x[0]])),
        failed=tuple(sorted(failed, key=lambda x: order[x[0]])),
    )


def _fetch_one(
    url: str, sha: str | None, dest: Path, *, retries: int, timeout: float, backoff_s: float,
    max_bytes: int, max_pixels: int,
) -> tuple[Outcome, str]:
    stem = url_image_stem(url)
    if find_image(dest, stem) is not None:
        return "present", ""
    if not url.lower().startswith(("http://", "https://")):
        return "dead", "not an http(s) URL"
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        try:
            data = _get(url, timeout=timeout, max_bytes=max_bytes)
            ext = check_image_bytes(data, sha, max_pixels=max_pixels)
        except RejectedImage as e:
            return "dead", str(e)
        except _Transient as e:
            last = str(e)
            continue
        tmp = dest / f".{stem}.{os.getpid()}.part"
        tmp.write_bytes(data)
        tmp.replace(dest / f"{stem}{ext}")
        return "downloaded", ""
    return "failed", f"{last} (after {retries + 1} attempts)"


def _get(url: str, *, timeout: float, max_bytes: int) -> bytes:
    """One attempt, ended by its watchdog ``timeout`` seconds after it started."""
    dog = _Watchdog(timeout)
    try:
        data = _get_watched(url, timeout=timeout, max_bytes=max_bytes, dog=dog)
    except _Transient:
        if dog.expired:
            raise _Transient(f"no complete response within {timeout:g} s (deadline of one attempt)") from None
        raise
    finally:
        dog.cancel()
    if dog.expired:  # a read cut short by the watchdog can look like a short body
        raise _Transient(f"no complete response within {timeout:g} s (deadline of one attempt)")
    return data


def _get_watched(url: str, *, timeout: float, max_bytes: int, dog: _Watchdog) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    opener = urllib.request.build_opener(_WatchedHTTPHandler(dog), _WatchedHTTPSHandler(dog), _HttpOnlyRedirects)
    try:
        with opener.open(req, timeout=timeout) as resp:  # scheme checked, redirects too
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise RejectedImage(f"too large ({declared} bytes > {max_bytes})")
            final_url = resp.geturl() or url
            if "photo_unavailable" in final_url:  # Flickr redirects deleted photos to a placeholder
                raise RejectedImage("photo unavailable (redirected to a placeholder)")
            data = resp.read(max_bytes + 1)
    except urllib.error.HTTPError as e:
        if e.code in TRANSIENT_HTTP:
            raise _Transient(f"HTTP {e.code}") from None
        raise RejectedImage(f"HTTP {e.code}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException, OSError) as e:
        reason = getattr(e, "reason", e)
        raise _Transient(f"{type(e).__name__}: {reason}") from None
    if len(data) > max_bytes:
        raise RejectedImage(f"too large (> {max_bytes} bytes)")
    if not data:
        raise _Transient("empty response")
    return data


def check_image_bytes(data: bytes, sha256: str | None = None, *, max_pixels: int = MAX_PIXELS) -> str:
    """The file extension of an acceptable image (decodable, within ``max_pixels``, matching
    ``sha256`` when given); else ``RejectedImage`` with the reason."""
    sha = sha256
    if sha is not None and hashlib.sha256(data).hexdigest() != sha:
        raise RejectedImage("content differs from the release (sha256 mismatch)")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as im:
                w, h = im.size
                if w * h > max_pixels:
                    raise RejectedImage(f"{w}x{h} exceeds {max_pixels} pixels (decompression-bomb guard)")
                fmt = im.format or ""
                im.load()
        except RejectedImage:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
            raise RejectedImage(f"decompression-bomb guard: {e}") from None
        except (OSError, SyntaxError, ValueError) as e:
            raise RejectedImage(f"not a readable image ({type(e).__name__})") from None
    ext = FORMAT_EXTENSIONS.get(fmt)
    if ext is None:
        raise RejectedImage(f"unsupported image format {fmt or 'unknown'}")
    return ext
