"""The fast default renderer: numpy + Pillow, no Blender.

Same geometry, same camera model (a pinhole with Blender's focal length, sensor and sensor fit),
same ground truth as the Blender renderer; a simpler look: a white ground with a regular line
pattern, Lambert-shaded spheres and beveled cubes in the five colours with faint per-instance
surface noise, soft contact shadows, depth-ordered with a z-buffer.

Why it is fast: the camera only rotates about a fixed position, and the images of a pinhole
camera under pure rotation are related by a homography (no parallax). So each video is ray-cast
once, into a canvas wide enough to hold every requested frame's view, and each frame is a
perspective warp of that canvas (Pillow, bilinear). Rendering 10 sampled frames costs one canvas
plus 10 warps; the full 150-frame clip costs 150 warps.

Why it is reproducible: per-pixel arithmetic uses only +, -, *, /, sqrt, floor, abs, min and
max on float32/float64 arrays (IEEE-exact, so identical on every CPU); transcendental functions
(whose SIMD versions differ by machine) are only evaluated on scalars, and no matrix product
(BLAS may fuse multiply-adds differently) touches pixels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from PIL import Image

from .geometry import (
    CUBE_BEVEL,
    CUBE_EDGE,
    FOCAL_MM,
    OBJECT_HEIGHT,
    SAMPLED_FRAMES,
    SPHERE_RADIUS,
    SceneGeometry,
    euler_to_matrix,
    sensor_size,
)

RENDERER_VERSION = 1
"""Bump when any rendered pixel changes."""

COLORS_RGB: dict[str, tuple[float, float, float]] = {
    "red": (0.80, 0.09, 0.09),
    "blue": (0.10, 0.28, 0.85),
    "green": (0.12, 0.60, 0.18),
    "yellow": (0.96, 0.80, 0.08),
    "purple": (0.50, 0.16, 0.72),
}
"""Base colours (display sRGB, 0-1): distinct on white and from each other."""
GROUND = 0.97
LINE = 0.70
LINE_SPACING = 2.0
"""Ground line pattern: one line every 2 units (one cube edge) in x and y."""
LINE_HALF_WIDTH = 0.035
NOISE_AMPLITUDE = 0.045
"""Faint per-instance surface noise: +-4.5 % brightness at most."""
SHADOW_STRENGTH = 0.32

# Lighting in display space, fixed for every video: a uniform ambient term (white sky and white
# ground both light the objects), an overhead light and four border lights 30 deg above the
# ground angled inward (Table 3's arrangement). The border lights differ in strength so the
# visible faces of a cube differ in shade: tops ~0.97 of the base colour, sides 0.37-0.56.
_LIGHTS: tuple[tuple[tuple[float, float, float], float], ...] = (
    ((0.0, 0.0, 1.0), 0.32),
    ((0.866, 0.0, 0.5), 0.30),
    ((0.0, 0.866, 0.5), 0.20),
    ((-0.866, 0.0, 0.5), 0.12),
    ((0.0, -0.866, 0.5), 0.08),
)
_AMBIENT = 0.30
_SPECULAR = 0.08
_NOISE_TABLE_SIDE = 32
_NOISE_TABLE = np.random.default_rng(20240531).random(_NOISE_TABLE_SIDE**3).astype(np.float32)
"""Lattice values of the surface noise (fixed; instances differ by offset and orientation)."""


@dataclass(frozen=True)
class _View:
    """A pinhole view: pixel (x, y) centre -> camera ray (x - cx, cy - y, -f) (pixels)."""

    width: int
    height: int
    f: float
    cx: float
    cy: float
    R: np.ndarray
    """Camera-to-world rotation."""


def focal_pixels(width: int, height: int) -> float:
    """Focal length in pixels for an output of this size (sensor fit AUTO)."""
    sw, sh = sensor_size(width, height)
    return FOCAL_MM * width / sw


def render_frames(
    geom: SceneGeometry,
    frames: Sequence[int] = SAMPLED_FRAMES,
    size: tuple[int, int] = (1920, 1080),
) -> list[np.ndarray]:
    """The given frames of a video as uint8 H x W x 3 arrays, ``size`` = (width, height)."""
    width, height = int(size[0]), int(size[1])
    if width < 2 or height < 2:
        raise ValueError(f"size must be at least 2 x 2, got {size}")
    f = focal_pixels(width, height)
    rotations = [geom.rotation(fr) for fr in frames]
    R0 = _mean_rotation(geom, frames)
    canvas_view = _canvas_view(R0, rotations, width, height, f)
    canvas = render_view(geom, canvas_view)
    img = Image.fromarray(canvas)
    out = []
    for R in rotations:
        h = _homography(canvas_view, R, width, height, f)
        warped = img.transform(
            (width, height), Image.Transform.PERSPECTIVE, h, Image.Resampling.BILINEAR
        )
        out.append(np.asarray(warped))
    return out


def render_direct(
    geom: SceneGeometry, frame: int, size: tuple[int, int] = (1920, 1080)
) -> np.ndarray:
    """One frame ray-cast directly at its own orientation (reference for the warp path)."""
    width, height = int(size[0]), int(size[1])
    view = _View(
        width, height, focal_pixels(width, height), width / 2, height / 2, geom.rotation(frame)
    )
    return render_view(geom, view)


# --------------------------------------------------------------------------- canvas + warps


def _mean_rotation(geom: SceneGeometry, frames: Sequence[int]) -> np.ndarray:
    e = geom.euler(list(frames))
    pan = geom.pan(list(frames))
    return euler_to_matrix(float(e[:, 0].mean()), float(e[:, 1].mean()), float(pan.mean()))


def _canvas_view(
    R0: np.ndarray, rotations: list[np.ndarray], width: int, height: int, f: float
) -> _View:
    """A view with orientation R0 whose image holds every frame's view (plus a margin)."""
    corners = np.array(
        [
            [-width / 2, height / 2, -f],
            [width / 2, height / 2, -f],
            [width / 2, -height / 2, -f],
            [-width / 2, -height / 2, -f],
        ]
    )
    xs, ys = [], []
    for R in rotations:
        d = (corners @ R.T) @ R0  # frame camera -> world -> canvas camera
        xs.extend(f * d[:, 0] / -d[:, 2])
        ys.extend(f * d[:, 1] / -d[:, 2])
    x0, x1 = math.floor(min(xs)) - 3, math.ceil(max(xs)) + 3
    y0, y1 = math.floor(min(ys)) - 3, math.ceil(max(ys)) + 3
    # Canvas pixel (x, y) centre has ray (x - cx, cy - y, -f): x0 -> column 0, y1 -> row 0.
    return _View(x1 - x0, y1 - y0, f, float(-x0), float(y1), R0)


def _homography(view: _View, R: np.ndarray, width: int, height: int, f: float) -> tuple[float, ...]:
    """Pillow PERSPECTIVE coefficients: output pixel -> canvas pixel, for frame rotation R."""
    # output pixel (x, y) (Pillow passes pixel centres) -> frame camera ray
    k_out_inv = np.array([[1.0, 0.0, -width / 2], [0.0, -1.0, height / 2], [0.0, 0.0, -f]])
    rel = view.R.T @ R  # frame camera -> canvas camera
    # canvas camera ray (X, Y, Z) -> homogeneous canvas pixel (w = -Z)
    k_canvas = np.array([[view.f, 0.0, -view.cx], [0.0, -view.f, -view.cy], [0.0, 0.0, -1.0]])
    h = k_canvas @ rel @ k_out_inv
    h = h / h[2, 2]
    return tuple(float(v) for v in h.ravel()[:8])


# --------------------------------------------------------------------------- ray casting


def render_view(geom: SceneGeometry, view: _View) -> np.ndarray:
    """Ray-cast one view: ground, contact shadows, objects (z-buffered), edge smoothing."""
    H, W = view.height, view.width
    R = view.R
    C = geom.pose.position
    # float32 on the canvas: ground coordinates stay within 1e-4 units, and it halves the work.
    xs = ((np.arange(W, dtype=np.float64) + 0.5) - view.cx).astype(np.float32)
    ys = (view.cy - (np.arange(H, dtype=np.float64) + 0.5)).astype(np.float32)
    fz = -view.f
    r32 = R.astype(np.float32)
    # World ray d = R @ (x, y, -f) as row + column broadcasts (no BLAS on pixels).
    dx = (r32[0, 0] * xs)[None, :] + (r32[0, 1] * ys + np.float32(R[0, 2] * fz))[:, None]
    dy = (r32[1, 0] * xs)[None, :] + (r32[1, 1] * ys + np.float32(R[1, 2] * fz))[:, None]
    dz = (r32[2, 0] * xs)[None, :] + (r32[2, 1] * ys + np.float32(R[2, 2] * fz))[:, None]

    shade, depth = _ground(geom, view, C, dx, dy, dz)
    rgb = np.repeat(shade[:, :, None], 3, axis=2)
    ids = np.full((H, W), -1, dtype=np.int32)
    for i in _draw_order(geom):
        _draw_object(geom, i, view, C, dx, dy, dz, rgb, depth, ids)
    out = np.clip(rgb * 255.0 + 0.5, 0, 255).astype(np.uint8)
    _smooth_edges(out, ids)
    return out


def _ground(
    geom: SceneGeometry, view: _View, C: np.ndarray, dx: np.ndarray, dy: np.ndarray, dz: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Ground brightness (line pattern filtered to the pixel footprint, shadows) and depth."""
    R = view.R.astype(np.float32)
    hit = dz < 0
    safe_dz = np.where(hit, dz, np.float32(-1.0))
    t = np.float32(-C[2]) / safe_dz
    gx = np.float32(C[0]) + t * dx
    gy = np.float32(C[1]) + t * dy
    # Footprint of one pixel on the ground: |d g / d pixel| summed over the two pixel axes,
    # d(g)/d(x_pix) = t (R[:, 0] - d R[2, 0] / dz), d(g)/d(y_pix) = -t (R[:, 1] - d R[2, 1] / dz).
    ax, ay = R[2, 0] / safe_dz, R[2, 1] / safe_dz
    fwx = t * (np.abs(R[0, 0] - dx * ax) + np.abs(R[0, 1] - dx * ay))
    fwy = t * (np.abs(R[1, 0] - dy * ax) + np.abs(R[1, 1] - dy * ay))
    cover = np.maximum(_line_cover(gx, fwx), _line_cover(gy, fwy))
    shade = np.float32(GROUND) - np.float32(GROUND - LINE) * cover
    _shadows(geom, view, gx, gy, shade)
    shade = np.where(hit, shade, np.float32(GROUND))
    depth = np.where(hit, t, np.float32(np.inf))
    return shade, depth


def _line_cover(u: np.ndarray, fw: np.ndarray) -> np.ndarray:
    """Fraction of a pixel (box footprint ``fw``) covered by lines of half-width w every S."""
    s, w = np.float32(LINE_SPACING), np.float32(LINE_HALF_WIDTH)
    fw = np.maximum(fw, np.float32(1e-6))
    d = np.abs(u - s * np.floor(u / s + np.float32(0.5)))
    half = fw * np.float32(0.5)
    cov = (np.minimum(d + half, w) - np.maximum(d - half, -w)) / fw
    np.clip(cov, 0.0, 1.0, out=cov)
    # Where a pixel spans several lines, fade to their mean density (no moire).
    far = np.clip(fw / s - np.float32(0.5), 0.0, 1.0)
    return cov + far * (np.float32(2 * LINE_HALF_WIDTH / LINE_SPACING) - cov)


def _shadows(
    geom: SceneGeometry, view: _View, gx: np.ndarray, gy: np.ndarray, shade: np.ndarray
) -> None:
    """Soft contact shadows, in place: x (1 - k / (1 + (r / r0)^4)), r = distance to the centre."""
    r0 = 1.25 if geom.shape == "cube" else 1.0
    reach = 3.0 * r0
    C = geom.pose.position
    for x, y in geom.positions:
        win = _ground_window(view, C, float(x), float(y), reach)
        if win is None:
            continue
        rs, cs = win
        sx, sy = gx[rs, cs] - np.float32(x), gy[rs, cs] - np.float32(y)
        q = (sx * sx + sy * sy) * np.float32(1.0 / (r0 * r0))
        shade[rs, cs] *= np.float32(1.0) - np.float32(SHADOW_STRENGTH) / (np.float32(1.0) + q * q)


def _ground_window(
    view: _View, C: np.ndarray, x: float, y: float, reach: float
) -> tuple[slice, slice] | None:
    """Pixel window holding the projection of the ground square of half-side ``reach``."""
    pts = np.array([[x + a, y + b, 0.0] for a in (-reach, reach) for b in (-reach, reach)])
    return _window(view, C, pts)


def _draw_order(geom: SceneGeometry) -> list[int]:
    # Far to near is not needed with a z-buffer; index order keeps the loop simple.
    return list(range(geom.n))


def _object_window(
    view: _View, C: np.ndarray, centre: np.ndarray, rho: float
) -> tuple[slice, slice] | None:
    """Pixel window holding the projection of the cube [centre - rho, centre + rho]^3."""
    offs = np.array([[a, b, c] for a in (-rho, rho) for b in (-rho, rho) for c in (-rho, rho)])
    return _window(view, C, centre + offs)


def _window(view: _View, C: np.ndarray, pts: np.ndarray) -> tuple[slice, slice] | None:
    """Pixel window bounding the projections of ``pts`` (None if off-canvas or behind)."""
    pc = (pts - C) @ view.R
    z = -pc[:, 2]
    if np.any(z <= 1e-6):
        return None
    x = view.cx + view.f * pc[:, 0] / z
    y = view.cy - view.f * pc[:, 1] / z
    c0, c1 = max(0, math.floor(x.min())), min(view.width, math.ceil(x.max()) + 1)
    r0, r1 = max(0, math.floor(y.min())), min(view.height, math.ceil(y.max()) + 1)
    if c0 >= c1 or r0 >= r1:
        return None
    return slice(r0, r1), slice(c0, c1)


def _draw_object(
    geom: SceneGeometry,
    i: int,
    view: _View,
    C: np.ndarray,
    dx: np.ndarray,
    dy: np.ndarray,
    dz: np.ndarray,
    rgb: np.ndarray,
    depth: np.ndarray,
    ids: np.ndarray,
) -> None:
    cube = geom.shape == "cube"
    centre = np.array([geom.positions[i, 0], geom.positions[i, 1], OBJECT_HEIGHT])
    win = _object_window(view, C, centre, CUBE_EDGE / 2 if cube else SPHERE_RADIUS)
    if win is None:
        return
    rs, cs = win
    # float64 for the intersections (b^2 - ac cancels badly in float32); scalars are Python
    # floats so numpy 1.x and 2.x promote identically.
    wx, wy, wz = (a[rs, cs].astype(np.float64) for a in (dx, dy, dz))
    # Object frame: translate to the centre, rotate by -yaw about z.
    ca, sa = math.cos(float(geom.yaw[i])), math.sin(float(geom.yaw[i]))
    o = [float(v) for v in C - centre]
    ox, oy, oz = ca * o[0] + sa * o[1], -sa * o[0] + ca * o[1], o[2]
    lx, ly, lz = ca * wx + sa * wy, -sa * wx + ca * wy, wz
    if cube:
        t, nx, ny, nz, px, py, pz = _hit_beveled_cube(ox, oy, oz, lx, ly, lz)
    else:
        t, nx, ny, nz, px, py, pz = _hit_sphere(ox, oy, oz, lx, ly, lz)
    win_depth = depth[rs, cs]
    draw = (t > 0) & (t < win_depth)  # z-buffer: nearer than ground and earlier objects
    if not draw.any():
        return
    # Normal back to world axes (rotate by +yaw).
    wnx, wny = ca * nx - sa * ny, sa * nx + ca * ny
    shade = _lighting(wnx, wny, nz)
    shade = shade * (
        1.0
        + NOISE_AMPLITUDE
        * _surface_noise(px, py, pz, geom.noise_rotation[i], float(geom.noise_w[i]))
    )
    base = COLORS_RGB[geom.color]
    win_rgb = rgb[rs, cs]
    for k in range(3):
        ch = base[k] * shade + _SPECULAR * _specular(wnx, wny, nz, wx, wy, wz)
        win_rgb[..., k] = np.where(draw, ch, win_rgb[..., k])
    depth[rs, cs] = np.where(draw, t, win_depth)
    ids[rs, cs] = np.where(draw, i, ids[rs, cs])


def _hit_sphere(
    ox: float, oy: float, oz: float, lx: np.ndarray, ly: np.ndarray, lz: np.ndarray
) -> tuple[np.ndarray, ...]:
    a = lx * lx + ly * ly + lz * lz
    b = ox * lx + oy * ly + oz * lz
    c = ox * ox + oy * oy + oz * oz - SPHERE_RADIUS * SPHERE_RADIUS
    disc = b * b - a * c
    hit = disc >= 0
    t = np.where(hit, (-b - np.sqrt(np.maximum(disc, 0.0))) / a, -1.0)
    px, py, pz = ox + t * lx, oy + t * ly, oz + t * lz
    inv = 1.0 / SPHERE_RADIUS
    return t, px * inv, py * inv, pz * inv, px, py, pz


def _hit_beveled_cube(
    ox: float, oy: float, oz: float, lx: np.ndarray, ly: np.ndarray, lz: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Slab test against the box of half-size 1; normals of the rounded box (bevel 0.1)."""
    h = CUBE_EDGE / 2
    tnear = np.full(lx.shape, -np.inf)
    tfar = np.full(lx.shape, np.inf)
    for o, d in ((ox, lx), (oy, ly), (oz, lz)):
        safe = np.where(d == 0, 1e-30, d)
        t1, t2 = (-h - o) / safe, (h - o) / safe
        tnear = np.maximum(tnear, np.minimum(t1, t2))
        tfar = np.minimum(tfar, np.maximum(t1, t2))
    hit = (tnear <= tfar) & (tnear > 0)
    t = np.where(hit, tnear, -1.0)
    px, py, pz = ox + t * lx, oy + t * ly, oz + t * lz
    inner = h - CUBE_BEVEL
    qx = px - np.clip(px, -inner, inner)
    qy = py - np.clip(py, -inner, inner)
    qz = pz - np.clip(pz, -inner, inner)
    qn = np.sqrt(qx * qx + qy * qy + qz * qz)
    qn = np.where(qn > 0, qn, 1.0)
    return t, qx / qn, qy / qn, qz / qn, px, py, pz


def _lighting(nx: np.ndarray, ny: np.ndarray, nz: np.ndarray) -> np.ndarray:
    shade = np.full(nx.shape, _AMBIENT, dtype=nx.dtype)
    for (lx, ly, lz), s in _LIGHTS:
        shade = shade + s * np.maximum(0.0, nx * lx + ny * ly + nz * lz)
    return shade


def _specular(
    nx: np.ndarray, ny: np.ndarray, nz: np.ndarray, dx: np.ndarray, dy: np.ndarray, dz: np.ndarray
) -> np.ndarray:
    """Blinn-Phong highlight of the overhead light, exponent 32 by repeated squaring."""
    inv = 1.0 / np.sqrt(dx * dx + dy * dy + dz * dz)
    hx, hy, hz = -dx * inv, -dy * inv, 1.0 - dz * inv
    hn = np.sqrt(hx * hx + hy * hy + hz * hz)
    c = np.maximum(0.0, (nx * hx + ny * hy + nz * hz) / np.maximum(hn, 1e-12))
    for _ in range(5):
        c = c * c
    return c


def _surface_noise(
    px: np.ndarray, py: np.ndarray, pz: np.ndarray, rot: np.ndarray, w: float
) -> np.ndarray:
    """Per-instance value noise in about [-1, 1]: two octaves of a fixed lattice, read through
    the instance's mapping rotation and offset by its realisation ``w``."""
    m = _rotation_xyz(*(float(v) for v in rot))
    u = m[0, 0] * px + m[0, 1] * py + m[0, 2] * pz
    v = m[1, 0] * px + m[1, 1] * py + m[1, 2] * pz
    z = m[2, 0] * px + m[2, 1] * py + m[2, 2] * pz
    n1 = _value_noise(2.2 * u + w, 2.2 * v + 0.5 * w, 2.2 * z - w)
    n2 = _value_noise(5.1 * u - w, 5.1 * v + w, 5.1 * z + 0.25 * w)
    return (n1 * 0.65 + n2 * 0.35) * 2.0 - 1.0


def _rotation_xyz(a: float, b: float, c: float) -> np.ndarray:
    ca, sa, cb, sb, cc, sc = (
        math.cos(a),
        math.sin(a),
        math.cos(b),
        math.sin(b),
        math.cos(c),
        math.sin(c),
    )
    rx = np.array([[1, 0, 0], [0, ca, -sa], [0, sa, ca]])
    ry = np.array([[cb, 0, sb], [0, 1, 0], [-sb, 0, cb]])
    rz = np.array([[cc, -sc, 0], [sc, cc, 0], [0, 0, 1]])
    return rz @ ry @ rx


def _value_noise(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Trilinear value noise on the periodic lattice with smoothstep weights, in [0, 1]."""
    side = _NOISE_TABLE_SIDE
    fx, fy, fz = np.floor(x), np.floor(y), np.floor(z)
    tx, ty, tz = x - fx, y - fy, z - fz
    tx, ty, tz = tx * tx * (3 - 2 * tx), ty * ty * (3 - 2 * ty), tz * tz * (3 - 2 * tz)
    ix = fx.astype(np.int64) % side
    iy = fy.astype(np.int64) % side
    iz = fz.astype(np.int64) % side
    jx, jy, jz = (ix + 1) % side, (iy + 1) % side, (iz + 1) % side
    t = _NOISE_TABLE

    def at(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return t[(a * side + b) * side + c]

    x00 = at(ix, iy, iz) + tx * (at(jx, iy, iz) - at(ix, iy, iz))
    x10 = at(ix, jy, iz) + tx * (at(jx, jy, iz) - at(ix, jy, iz))
    x01 = at(ix, iy, jz) + tx * (at(jx, iy, jz) - at(ix, iy, jz))
    x11 = at(ix, jy, jz) + tx * (at(jx, jy, jz) - at(ix, jy, jz))
    y0 = x00 + ty * (x10 - x00)
    y1 = x01 + ty * (x11 - x01)
    return y0 + tz * (y1 - y0)


def _smooth_edges(img: np.ndarray, ids: np.ndarray) -> None:
    """Anti-alias silhouettes: pixels where the object id changes get a 3 x 3 box average."""
    edge = np.zeros(ids.shape, dtype=bool)
    edge[:, 1:] |= ids[:, 1:] != ids[:, :-1]
    edge[:, :-1] |= ids[:, 1:] != ids[:, :-1]
    edge[1:, :] |= ids[1:, :] != ids[:-1, :]
    edge[:-1, :] |= ids[1:, :] != ids[:-1, :]
    edge[0, :] = edge[-1, :] = False
    edge[:, 0] = edge[:, -1] = False
    r, c = np.nonzero(edge)
    if not r.size:
        return
    acc = np.zeros((r.size, 3), dtype=np.uint32)
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            acc += img[r + di, c + dj]
    img[r, c] = ((acc + 4) // 9).astype(np.uint8)
