"""Scene geometry of a CountVideoBench video: the ground truth, independent of any renderer.

Everything here is pure numpy and follows *CountVideoBench* Section 4.3 and Appendix B (Table 3):

- **Camera pose**: on a sphere about the origin, distance U(32, 37), azimuth U(0, 360) deg,
  polar angle U(0, 65) deg from the vertical; the position is fixed for the whole clip.
- **Admissible region**: the camera frustum at the base orientation (looking at the origin)
  intersected with the plane z = 0, scaled by 0.9 about its (area) centroid.
- **Placement**: uniform rejection sampling in the region's bounding box, keeping a candidate
  inside the region and at least 3 from every accepted one, until 60 positions exist; the first
  N are kept. A pose whose region does not yield 60 positions within ``candidate_cap``
  candidates is redrawn. The paper does not state this cap; it decides the effective polar-angle
  distribution, and :data:`CANDIDATE_CAP` is calibrated against the paper's figures
  (``docs/countvideobench.md``, ``countgym.scenes.video.calibrate``).
- **Visibility check**: camera keys that leave an object out of every rendered frame are
  redrawn (Section 4.3: every object is visible in at least some frames).
- **Objects**: planar jitter +-0.30 (cubes) / +-0.25 (spheres) per axis after separation, yaw
  U(0, 2 pi); cube edge 2, sphere radius 1, resting on z = 0. Per-instance material noise:
  realisation U(-20, 20) and mapping rotation U(-pi, pi)^3.
- **Camera orientation**: keyed at frames 1, 50, 100, 150, 200 with elevation offsets
  de ~ U(-1, +5) deg and azimuth offsets da ~ U(-5, +5) deg, Bezier interpolation with
  auto-clamped handles (``fcurve``). Two readings (:data:`READINGS`): ``base-pan`` (default,
  generator version 3) keys ``R = Rz(azimuth + 90 deg) Rx(polar + de) Ry(da)`` (Blender mode
  ``YXZ``: da pans the camera about its own up axis) and puts the objects' origins at their base
  (z = 0); ``appendix-euler`` (version 2) keys Euler XYZ ``(polar + de, 0, azimuth + 90 deg + da)``
  (da turns about the world vertical) with origins at the objects' centres (height 1). Pose,
  region and placement are the same in both.
- **Camera model**: 50 mm lens, 36 mm sensor, sensor fit auto (horizontal for landscape),
  1920 x 1080, 30 fps; frames 21-170 are rendered (150 frames; see below), 10 sampled uniformly.
- **Visibility**: an object is in frame when its origin (the reading's) projects into [0, 1]^2
  in normalised camera coordinates with positive depth (Blender's ``world_to_camera_view``).

Frame window: Table 3 says "settling window frames 1-20 (not rendered)", "rendered window frames
20-170 (150 frames, 5 s)"; 20..170 inclusive is 151 frames, so we render 21..170, the reading
that keeps 150 frames and leaves frames 1-20 unrendered.

Randomness: one ``numpy.random.SeedSequence(seed)`` spawns independent streams for the pose
draws, the objects and the camera keys, and every pose attempt has its own candidate stream,
so the number of rejected candidates never shifts any other draw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from .fcurve import BezierCurve, auto_clamped

# --- Appendix B constants -------------------------------------------------------------------
FOCAL_MM = 50.0
SENSOR_MM = 36.0
WIDTH, HEIGHT = 1920, 1080
FPS = 30
DISTANCE_RANGE = (32.0, 37.0)
AZIMUTH_RANGE_DEG = (0.0, 360.0)
POLAR_RANGE_DEG = (0.0, 65.0)
ELEVATION_OFFSET_DEG = (-1.0, 5.0)
AZIMUTH_OFFSET_DEG = (-5.0, 5.0)
KEYFRAMES: tuple[int, ...] = (1, 50, 100, 150, 200)
FIRST_RENDERED, LAST_RENDERED = 21, 170
RENDERED_FRAMES: tuple[int, ...] = tuple(range(FIRST_RENDERED, LAST_RENDERED + 1))
N_SAMPLED = 10
REGION_SCALE = 0.9
MIN_SEPARATION = 3.0
POSITIONS_GENERATED = 60
JITTER = {"cube": 0.30, "sphere": 0.25}
CUBE_EDGE, CUBE_BEVEL, SPHERE_RADIUS = 2.0, 0.1, 1.0
OBJECT_HEIGHT = 1.0
"""Height of every object's centre: bounding-box base on z = 0, half-size 1."""

READINGS: tuple[str, ...] = ("base-pan", "appendix-euler")
"""The two readings of Appendix B's camera and object origins (``docs/countvideobench.md``):

- ``base-pan`` (generator version 3, the default): object origins at the object's base (z = 0),
  and the azimuth offset applied as a pan about the camera's own up axis (Blender rotation mode
  ``YXZ``: ``R = Rz(azimuth + 90 deg) Rx(polar + de) Ry(da)``).
- ``appendix-euler`` (generator version 2): origins at the object's centre (height 1), and the
  azimuth offset added to Euler Z (``R = Rz(azimuth + 90 deg + da) Rx(polar + de)``, a turn
  about the world vertical)."""
READING = "base-pan"
ORIGIN_HEIGHT = {"base-pan": 0.0, "appendix-euler": OBJECT_HEIGHT}
"""Height of the objects' origins (the points tested for being in frame) per reading."""
NOISE_W_RANGE = (-20.0, 20.0)

CANDIDATE_CAP = 1250
"""Candidates drawn per camera pose before the pose counts as failed (calibrated; see docs)."""
_BATCH = 512  # candidates drawn at a time (a fixed size keeps the stream deterministic)
MAX_POSE_ATTEMPTS = 100_000
MAX_CAMERA_ATTEMPTS = 1000


def sampled_frames(n: int = N_SAMPLED) -> tuple[int, ...]:
    """Frame numbers of the ``n`` uniformly sampled frames: ``linspace(0, 149, n)`` floored.

    Flooring (``numpy.linspace(..., dtype=int)``) is how common video-LLM loaders sample, so
    the frames are the first and last rendered frames and eight evenly spaced between them.
    """
    idx = np.linspace(0, len(RENDERED_FRAMES) - 1, n).astype(int)
    return tuple(RENDERED_FRAMES[i] for i in idx)


SAMPLED_FRAMES: tuple[int, ...] = sampled_frames()


# --- camera ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class CameraPose:
    """The fixed camera position on its sphere about the origin."""

    distance: float
    azimuth_deg: float
    polar_deg: float

    @property
    def position(self) -> np.ndarray:
        """World position (x, y, z)."""
        th, ph = math.radians(self.polar_deg), math.radians(self.azimuth_deg)
        d = self.distance
        return np.array(
            [d * math.sin(th) * math.cos(ph), d * math.sin(th) * math.sin(ph), d * math.cos(th)]
        )

    def as_dict(self) -> dict[str, float]:
        return {
            "distance": self.distance,
            "azimuth_deg": self.azimuth_deg,
            "polar_deg": self.polar_deg,
        }


def euler_to_matrix(rx: float, rz: float, pan: float = 0.0) -> np.ndarray:
    """Camera axes to world as a 3 x 3 matrix: ``R = Rz @ Rx @ Ry(pan)`` (Blender Euler XYZ
    with Y = 0 when ``pan`` is 0; Blender rotation mode ``YXZ`` otherwise)."""
    cx, sx, cz, sz = math.cos(rx), math.sin(rx), math.cos(rz), math.sin(rz)
    r = np.array([[cz, -sz * cx, sz * sx], [sz, cz * cx, -cz * sx], [0.0, sx, cx]])
    if pan:
        cp, sp = math.cos(pan), math.sin(pan)
        r = r @ np.array([[cp, 0.0, sp], [0.0, 1.0, 0.0], [-sp, 0.0, cp]])
    return r


def sensor_size(width: int = WIDTH, height: int = HEIGHT) -> tuple[float, float]:
    """(sensor width, sensor height) in mm with Blender's sensor fit AUTO (36 mm on the long side)."""
    if width >= height:
        return SENSOR_MM, SENSOR_MM * height / width
    return SENSOR_MM * width / height, SENSOR_MM


def base_rotation(pose: CameraPose) -> np.ndarray:
    """Camera orientation looking at the origin (no keyframe offsets)."""
    return euler_to_matrix(
        math.radians(pose.polar_deg), math.radians(pose.azimuth_deg) + math.pi / 2
    )


def frustum_ground_polygon(pose: CameraPose, rotation: np.ndarray | None = None) -> np.ndarray:
    """The 4 corners (x, y) where the frustum's corner rays meet z = 0 (counter-clockwise).

    Polar angles <= 65 deg keep every corner ray pointing below the horizon (the top edge of
    the view is at least 13 deg below it), so the intersection is a convex quadrilateral.
    """
    R = base_rotation(pose) if rotation is None else rotation
    c = pose.position
    sw, sh = sensor_size()
    corners = []
    for a, b in ((-1, -1), (1, -1), (1, 1), (-1, 1)):
        v = R @ np.array([a * sw / 2, b * sh / 2, -FOCAL_MM])
        if v[2] >= 0:
            raise ValueError(f"corner ray misses the ground at polar {pose.polar_deg:.1f} deg")
        t = -c[2] / v[2]
        corners.append(c[:2] + t * v[:2])
    poly = np.array(corners)
    if _signed_area(poly) < 0:
        poly = poly[::-1]
    return poly


def _signed_area(poly: np.ndarray) -> float:
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * float(np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y))


def polygon_centroid(poly: np.ndarray) -> np.ndarray:
    """Area centroid of a simple polygon."""
    x, y = poly[:, 0], poly[:, 1]
    x1, y1 = np.roll(x, -1), np.roll(y, -1)
    cross = x * y1 - x1 * y
    a = cross.sum() / 2
    return np.array([((x + x1) * cross).sum() / (6 * a), ((y + y1) * cross).sum() / (6 * a)])


def admissible_region(pose: CameraPose) -> np.ndarray:
    """Frustum-ground quadrilateral scaled by 0.9 about its centroid (counter-clockwise)."""
    poly = frustum_ground_polygon(pose)
    c = polygon_centroid(poly)
    return c + REGION_SCALE * (poly - c)


def region_area(poly: np.ndarray) -> float:
    """Area of a counter-clockwise polygon."""
    return abs(_signed_area(poly))


def inside_convex(points: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Per point: inside (or on) the counter-clockwise convex polygon."""
    ok = np.ones(len(points), dtype=bool)
    for i in range(len(poly)):
        a, b = poly[i], poly[(i + 1) % len(poly)]
        cross = (b[0] - a[0]) * (points[:, 1] - a[1]) - (b[1] - a[1]) * (points[:, 0] - a[0])
        ok &= cross >= 0
    return ok


# --- placement ------------------------------------------------------------------------------
def sample_positions(
    poly: np.ndarray,
    rng: np.random.Generator,
    *,
    k: int = POSITIONS_GENERATED,
    min_sep: float = MIN_SEPARATION,
    cap: int = CANDIDATE_CAP,
) -> np.ndarray | None:
    """Sequential uniform rejection sampling of ``k`` positions in the convex ``poly``.

    Candidates are uniform in the polygon's bounding box and are examined in draw order; one is
    accepted when inside and at least ``min_sep`` from every accepted position. Returns the
    (k, 2) positions, or None when ``cap`` candidates were not enough.
    """
    if not _may_hold(poly, k, min_sep):
        return None  # exact shortcut: no placement of k points fits, whatever the draws
    lo, hi = poly.min(axis=0), poly.max(axis=0)
    acc = np.empty((k, 2))
    m = 0
    drawn = 0
    d2min = min_sep * min_sep
    while drawn < cap:
        b = min(_BATCH, cap - drawn)
        cand = lo + rng.random((b, 2)) * (hi - lo)
        drawn += b
        cand = cand[inside_convex(cand, poly)]
        if m and len(cand):
            d2 = ((cand[:, None, :] - acc[None, :m, :]) ** 2).sum(-1).min(axis=1)
            cand = cand[d2 >= d2min]
        if not len(cand):
            continue
        # Greedy in draw order among this batch's survivors: a candidate is taken unless an
        # earlier one taken from the same batch is too close.
        clash = ((cand[:, None, :] - cand[None, :, :]) ** 2).sum(-1) < d2min
        free = np.ones(len(cand), dtype=bool)
        i = 0
        while True:
            nxt = np.flatnonzero(free[i:])
            if not nxt.size:
                break
            i += int(nxt[0])
            acc[m] = cand[i]
            m += 1
            if m == k:
                return acc
            free &= ~clash[i]
            i += 1
    return None


def _may_hold(poly: np.ndarray, k: int, d: float) -> bool:
    """Groemer's bound: a convex region of area A and perimeter P holds at most
    ``2 A / (sqrt(3) d^2) + P / (2 d) + 1`` points with pairwise distance >= d."""
    area = region_area(poly)
    perimeter = float(np.linalg.norm(np.roll(poly, -1, axis=0) - poly, axis=1).sum())
    return 2 * area / (math.sqrt(3) * d * d) + perimeter / (2 * d) + 1 >= k


def draw_pose(rng: np.random.Generator) -> CameraPose:
    """One camera pose from the drawn (pre-constraint) distributions."""
    u = rng.random(3)
    return CameraPose(
        distance=DISTANCE_RANGE[0] + u[0] * (DISTANCE_RANGE[1] - DISTANCE_RANGE[0]),
        azimuth_deg=AZIMUTH_RANGE_DEG[0] + u[1] * (AZIMUTH_RANGE_DEG[1] - AZIMUTH_RANGE_DEG[0]),
        polar_deg=POLAR_RANGE_DEG[0] + u[2] * (POLAR_RANGE_DEG[1] - POLAR_RANGE_DEG[0]),
    )


# --- the scene ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SceneGeometry:
    """Everything a renderer needs about one video, and its visibility ground truth."""

    n: int
    shape: str
    color: str
    seed: int
    pose: CameraPose
    positions: np.ndarray
    """(n, 2) object centres in the plane, after jitter."""
    yaw: np.ndarray
    """(n,) rotation about z in radians."""
    noise_w: np.ndarray
    """(n,) per-instance noise realisation, U(-20, 20)."""
    noise_rotation: np.ndarray
    """(n, 3) per-instance noise mapping rotation, U(-pi, pi)^3."""
    elevation_offsets_deg: np.ndarray
    """(5,) elevation offsets at the keyframes."""
    azimuth_offsets_deg: np.ndarray
    """(5,) azimuth offsets at the keyframes."""
    pose_attempts: int = 1
    """Camera poses drawn until one admitted 60 positions."""
    candidate_cap: int = CANDIDATE_CAP
    region: np.ndarray = field(default_factory=lambda: np.zeros((4, 2)))
    """The admissible region the positions were drawn in."""
    camera_attempts: int = 1
    """Camera-key draws until every object was in frame in some rendered frame."""
    reading: str = READING
    """How the camera offsets and object origins are read (:data:`READINGS`)."""

    # -- camera animation
    @cached_property
    def _curves(self) -> tuple[BezierCurve, BezierCurve, BezierCurve | None]:
        rx = [math.radians(self.pose.polar_deg + e) for e in self.elevation_offsets_deg]
        keys = [float(k) for k in KEYFRAMES]
        if self.reading == "appendix-euler":
            rz = [math.radians(self.pose.azimuth_deg + a) + math.pi / 2 for a in self.azimuth_offsets_deg]
            return auto_clamped(keys, rx), auto_clamped(keys, rz), None
        rz = [math.radians(self.pose.azimuth_deg) + math.pi / 2] * len(KEYFRAMES)
        pan = [math.radians(a) for a in self.azimuth_offsets_deg]
        return auto_clamped(keys, rx), auto_clamped(keys, rz), auto_clamped(keys, pan)

    def euler(self, frames: Any) -> np.ndarray:
        """(len(frames), 2) camera Euler X and Z (radians) at the given frames."""
        cx, cz, _ = self._curves
        f = np.atleast_1d(np.asarray(frames, dtype=float))
        return np.stack([cx(f), cz(f)], -1)

    def pan(self, frames: Any) -> np.ndarray:
        """(len(frames),) pan about the camera's own up axis (radians; 0 for ``appendix-euler``)."""
        f = np.atleast_1d(np.asarray(frames, dtype=float))
        cp = self._curves[2]
        return cp(f) if cp is not None else np.zeros_like(f)

    def rotation(self, frame: float) -> np.ndarray:
        """Camera-to-world rotation at one frame."""
        rx, rz = self.euler([frame])[0]
        return euler_to_matrix(float(rx), float(rz), float(self.pan([frame])[0]))

    def rotations(self, frames: Any) -> list[np.ndarray]:
        """Camera-to-world rotations at the given frames (the curves evaluated once)."""
        return list(self._rotation_stack(frames))

    def _rotation_stack(self, frames: Any) -> np.ndarray:
        """(len(frames), 3, 3) rotations, built elementwise as :func:`euler_to_matrix` does."""
        e, p = self.euler(frames), self.pan(frames)
        cx, sx, cz, sz = np.cos(e[:, 0]), np.sin(e[:, 0]), np.cos(e[:, 1]), np.sin(e[:, 1])
        zero = np.zeros_like(cx)
        r = np.stack(
            [np.stack([cz, -sz * cx, sz * sx], -1), np.stack([sz, cz * cx, -cz * sx], -1), np.stack([zero, sx, cx], -1)],
            -2,
        )
        if self._curves[2] is None:
            return r
        cp, sp = np.cos(p), np.sin(p)
        ry = np.stack(
            [np.stack([cp, zero, sp], -1), np.stack([zero, zero + 1.0, zero], -1), np.stack([-sp, zero, cp], -1)], -2
        )
        return r @ ry

    # -- objects
    @property
    def origin_height(self) -> float:
        """Height of the objects' origins under this reading (0 = base, 1 = centre)."""
        return ORIGIN_HEIGHT[self.reading]

    def centres(self, origin_height: float | None = None) -> np.ndarray:
        """(n, 3) object origins in the world (``origin_height`` only for diagnostics)."""
        h = self.origin_height if origin_height is None else origin_height
        return np.column_stack([self.positions, np.full(self.n, float(h))])

    def project(
        self, points: np.ndarray, frame: float, width: int = WIDTH, height: int = HEIGHT,
        *, rotation: np.ndarray | None = None,
    ) -> np.ndarray:
        """(m, 3) normalised camera coordinates (u, v, depth) of world points at ``frame``.

        ``u`` grows to the right and ``v`` upwards, [0, 1]^2 being the image (as Blender's
        ``world_to_camera_view``); pixel x = u W, pixel y = (1 - v) H.
        """
        R = self.rotation(frame) if rotation is None else rotation
        pc = (np.asarray(points, dtype=float) - self.pose.position) @ R  # world -> camera axes
        depth = -pc[:, 2]
        sw, sh = sensor_size(width, height)
        with np.errstate(divide="ignore", invalid="ignore"):
            u = 0.5 + FOCAL_MM * pc[:, 0] / (depth * sw)
            v = 0.5 + FOCAL_MM * pc[:, 1] / (depth * sh)
        return np.column_stack([u, v, depth])

    def pixel_points(self, frame: float, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
        """(n, 2) object centres (height 1, whatever the reading's origins) in pixels of a
        ``width`` x ``height`` frame."""
        uvd = self.project(self.centres(OBJECT_HEIGHT), frame, width, height)
        return np.column_stack([uvd[:, 0] * width, (1 - uvd[:, 1]) * height])

    def in_frame(self, frames: Any = RENDERED_FRAMES, *, origin_height: float | None = None) -> np.ndarray:
        """(len(frames), n) booleans: origin inside [0, 1]^2 with positive depth.

        ``origin_height`` moves the tested points off the objects' origins (the calibration's
        diagnostic readings); the ground truth always uses the reading's origins.
        """
        pts = self.centres(origin_height)
        frames = list(frames)
        R = self._rotation_stack(frames)
        pc = np.einsum("nk,fkj->fnj", pts - self.pose.position, R)  # world -> camera axes
        depth = -pc[..., 2]
        sw, sh = sensor_size()
        with np.errstate(divide="ignore", invalid="ignore"):
            u = 0.5 + FOCAL_MM * pc[..., 0] / (depth * sw)
            v = 0.5 + FOCAL_MM * pc[..., 1] / (depth * sh)
        return ((depth > 0) & (u >= 0) & (u <= 1) & (v >= 0) & (v <= 1)).reshape(len(frames), self.n)

    def visibility(self, sampled: tuple[int, ...] = SAMPLED_FRAMES) -> dict[str, Any]:
        """Per-video visibility statistics over the rendered frames and the sampled ones."""
        vis = self.in_frame(RENDERED_FRAMES)
        idx = [RENDERED_FRAMES.index(f) for f in sampled]
        vs = vis[idx]
        per_frame = vis.sum(axis=1)
        return {
            "objects_leaving_frame": int((~vis.all(axis=0)).sum()),
            "min_in_frame": int(per_frame.min()),
            "max_in_frame": int(per_frame.max()),
            "frames_with_all_in_frame": int((per_frame == self.n).sum()),
            "in_frame_sampled": [int(c) for c in vs.sum(axis=1)],
            "objects_unseen_in_sampled": int((~vs.any(axis=0)).sum()),
            "objects_unseen_in_rendered": int((~vis.any(axis=0)).sum()),
        }

    def as_meta(self) -> dict[str, Any]:
        """JSON-ready description (manifest ``meta``): enough to re-render the video."""
        return {
            "camera": {k: round(v, 6) for k, v in self.pose.as_dict().items()},
            "shape": self.shape,
            "color": self.color,
            "seed": self.seed,
            "pose_attempts": self.pose_attempts,
            "camera_attempts": self.camera_attempts,
            "candidate_cap": self.candidate_cap,
            "camera_reading": self.reading,
            "elevation_offsets_deg": [round(float(x), 6) for x in self.elevation_offsets_deg],
            "azimuth_offsets_deg": [round(float(x), 6) for x in self.azimuth_offsets_deg],
            "objects": [
                [round(float(x), 6), round(float(y), 6), round(float(a), 6)]
                for (x, y), a in zip(self.positions, self.yaw, strict=True)
            ],
        }


def _placement_rng(seed: int, attempt: int) -> np.random.Generator:
    """The candidate stream of one pose attempt: its own stream, so an attempt's outcome
    depends on (seed, attempt) only and shortcuts that skip an attempt change nothing else."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1_000_000, attempt)))


def generate_geometry(
    n: int, shape: str, color: str, seed: int, *, candidate_cap: int = CANDIDATE_CAP, reading: str = READING
) -> SceneGeometry:
    """The geometry of one video, deterministic from ``seed`` (see the module docstring).

    ``reading`` picks how the camera's azimuth offsets and the objects' origins are read
    (:data:`READINGS`); the pose and the placement do not depend on it."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {', '.join(READINGS)}, got {reading!r}")
    if shape not in JITTER:
        raise ValueError(f"shape must be one of {sorted(JITTER)}, got {shape!r}")
    if not 1 <= n <= POSITIONS_GENERATED:
        raise ValueError(f"n must be in 1..{POSITIONS_GENERATED}, got {n}")
    pose_ss, obj_ss, cam_ss = np.random.SeedSequence(seed).spawn(3)
    pose_rng = np.random.default_rng(pose_ss)
    for attempt in range(1, MAX_POSE_ATTEMPTS + 1):
        pose = draw_pose(pose_rng)
        region = admissible_region(pose)
        pts = sample_positions(region, _placement_rng(seed, attempt), cap=candidate_cap)
        if pts is not None:
            break
    else:  # pragma: no cover - needs an absurdly small cap
        raise RuntimeError(f"no camera pose admitted {POSITIONS_GENERATED} positions")
    obj_rng = np.random.default_rng(obj_ss)
    j = JITTER[shape]
    jitter = obj_rng.uniform(-j, j, size=(POSITIONS_GENERATED, 2))[:n]
    yaw = obj_rng.uniform(0.0, 2 * math.pi, size=POSITIONS_GENERATED)[:n]
    noise_w = obj_rng.uniform(*NOISE_W_RANGE, size=POSITIONS_GENERATED)[:n]
    noise_rot = obj_rng.uniform(-math.pi, math.pi, size=(POSITIONS_GENERATED, 3))[:n]
    template = SceneGeometry(
        n=n,
        shape=shape,
        color=color,
        seed=int(seed),
        pose=pose,
        positions=pts[:n] + jitter,
        yaw=yaw,
        noise_w=noise_w,
        noise_rotation=noise_rot,
        elevation_offsets_deg=np.zeros(len(KEYFRAMES)),
        azimuth_offsets_deg=np.zeros(len(KEYFRAMES)),
        pose_attempts=attempt,
        candidate_cap=candidate_cap,
        region=region,
        reading=reading,
    )
    return _draw_camera(template, np.random.default_rng(cam_ss))


def with_reading(geo: SceneGeometry, reading: str) -> SceneGeometry:
    """The same video (pose, placement, objects) under another reading: the camera keys are
    drawn again from the video's camera stream with that reading's visibility check."""
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {', '.join(READINGS)}, got {reading!r}")
    cam_ss = np.random.SeedSequence(geo.seed).spawn(3)[2]
    return _draw_camera(replace(geo, reading=reading), np.random.default_rng(cam_ss))


def _draw_camera(template: SceneGeometry, cam_rng: np.random.Generator) -> SceneGeometry:
    for camera_attempt in range(1, MAX_CAMERA_ATTEMPTS + 1):
        elev = cam_rng.uniform(*ELEVATION_OFFSET_DEG, size=len(KEYFRAMES))
        azim = cam_rng.uniform(*AZIMUTH_OFFSET_DEG, size=len(KEYFRAMES))
        geo = replace(template, elevation_offsets_deg=elev, azimuth_offsets_deg=azim, camera_attempts=camera_attempt)
        # Visibility check (Section 4.3: "every object is visible in at least some frames"):
        # camera keys that leave an object out of every rendered frame are redrawn. The first
        # draw is kept whenever it passes, so such videos are unchanged.
        if geo.in_frame(RENDERED_FRAMES).any(axis=0).all():
            return geo
    raise RuntimeError(  # pragma: no cover - the region keeps objects near the base view
        f"no camera keys showed every object within {MAX_CAMERA_ATTEMPTS} draws (seed {template.seed})"
    )
