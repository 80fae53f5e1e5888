"""The Blender renderer (optional extra ``blender``: ``bpy==5.0.1``), Appendix B settings.

Same geometry as every other renderer (``SceneGeometry``): camera position, keyframed orientation
(Bezier, auto-clamped), object positions, yaws and noise parameters. What Blender adds: Cycles
path tracing with the paper's settings, rigid-body settling baked before rendering, MP4 output.

Assets: the paper's object and ground materials (BlenderKit, not redistributable) and its HDRI
(Poly Haven "Limpopo Golf Course") are replaced by procedural stand-ins: a Principled BSDF whose
base colour is modulated +-8 % by a 4-D noise texture (W = the instance's realisation, mapping
rotation = the instance's rotation), a white ground with grey brick-texture lines every 2 units,
and a uniform grey world at strength 0.4. ``bpy`` is imported only inside these functions.
Blender writes caches under ``~/.cache``; ``XDG_CACHE_HOME`` is pointed under the output folder.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from countgym.errors import MissingExtraError

from .geometry import (
    CUBE_BEVEL,
    CUBE_EDGE,
    FIRST_RENDERED,
    FOCAL_MM,
    FPS,
    KEYFRAMES,
    LAST_RENDERED,
    OBJECT_HEIGHT,
    SENSOR_MM,
    SPHERE_RADIUS,
    SceneGeometry,
)

ENGINES = ("CYCLES", "BLENDER_EEVEE", "BLENDER_WORKBENCH")
COLORS_LINEAR: dict[str, tuple[float, float, float]] = {
    "red": (0.60, 0.01, 0.01),
    "blue": (0.01, 0.06, 0.70),
    "green": (0.01, 0.32, 0.02),
    "yellow": (0.92, 0.60, 0.01),
    "purple": (0.21, 0.02, 0.47),
}
"""Linear base colours (the fast renderer's display colours, linearised)."""
BEVEL_SEGMENTS = 100
SIM_END = 200


def require_bpy() -> Any:
    """Import ``bpy`` or raise ``MissingExtraError`` naming the ``blender`` extra."""
    try:
        import bpy
    except ImportError:
        raise MissingExtraError("bpy", "blender") from None
    return bpy


def render_blender(
    geom: SceneGeometry,
    frames: Sequence[int],
    size: tuple[int, int],
    out_dir: Path,
    *,
    engine: str = "CYCLES",
    fmt: str = "png",
    video_path: Path | None = None,
    cache_dir: Path | None = None,
    samples: int = 32,
    device: str = "auto",
    bevel_segments: int = BEVEL_SEGMENTS,
) -> list[Path]:
    """Render ``frames`` of one video into ``out_dir/f<frame>.<fmt>``; optionally the MP4 clip.

    ``device``: ``auto`` (GPU when Cycles finds one, else CPU), ``cpu`` or ``gpu``.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cache = Path(cache_dir) if cache_dir is not None else out_dir / ".blender-cache"
    cache.mkdir(parents=True, exist_ok=True)
    os.environ["XDG_CACHE_HOME"] = str(cache.resolve())
    bpy = require_bpy()
    scene, _ = build_scene(
        geom, size, engine=engine, samples=samples, device=device, bevel_segments=bevel_segments
    )
    paths = []
    img = scene.render.image_settings
    img.file_format = "PNG" if fmt == "png" else "JPEG"
    if fmt != "png":
        img.quality = 92
    for f in frames:
        scene.frame_set(int(f))
        path = out_dir / f"f{int(f):03d}.{fmt}"
        scene.render.filepath = str(path)
        bpy.ops.render.render(write_still=True)
        paths.append(path)
    if video_path is not None:
        _render_mp4(bpy, scene, Path(video_path))
    return paths


def build_scene(
    geom: SceneGeometry,
    size: tuple[int, int],
    *,
    engine: str = "CYCLES",
    samples: int = 32,
    device: str = "auto",
    bevel_segments: int = BEVEL_SEGMENTS,
) -> tuple[Any, list[Any]]:
    """A fresh Blender scene for ``geom`` with the rigid-body cache baked: (scene, objects)."""
    bpy = require_bpy()
    bpy.ops.wm.read_factory_settings(use_empty=True)
    scene = bpy.context.scene
    _settings(bpy, scene, engine, size, samples, device)
    _world(bpy, scene)
    _lights(bpy, scene)
    ground = _ground(bpy, scene)
    _camera(bpy, scene, geom)
    objs = _objects(bpy, scene, geom, bevel_segments)
    _physics(bpy, scene, ground, objs)
    return scene, objs


# --------------------------------------------------------------------------- scene parts


def _settings(
    bpy: Any, scene: Any, engine: str, size: tuple[int, int], samples: int, device: str
) -> None:
    r = scene.render
    r.engine = engine
    r.resolution_x, r.resolution_y = int(size[0]), int(size[1])
    r.resolution_percentage = 100
    r.fps = FPS
    scene.frame_start, scene.frame_end = 1, SIM_END
    if engine == "CYCLES":
        c = scene.cycles
        c.samples = samples
        c.use_adaptive_sampling = True
        c.adaptive_threshold = 0.2
        c.use_light_tree = True
        c.max_bounces = 4
        c.diffuse_bounces, c.glossy_bounces = 2, 2
        c.transmission_bounces, c.volume_bounces = 4, 2
        c.sample_clamp_direct = c.sample_clamp_indirect = 5.0
        c.use_denoising = False
        c.device = _cycles_device(bpy, device)
    vs = scene.view_settings
    scene.display_settings.display_device = "sRGB"
    _set_view_transform(vs)
    vs.exposure, vs.gamma = 0.0, 1.0
    if hasattr(vs, "use_white_balance"):
        vs.use_white_balance = False


def _set_view_transform(vs: Any) -> None:
    """Filmic with the High Contrast look (the paper's); AgX's High Contrast where Filmic is gone."""
    for transform, looks in (
        ("Filmic", ("Filmic - High Contrast", "High Contrast")),
        ("AgX", ("AgX - High Contrast", "High Contrast")),
    ):
        try:
            vs.view_transform = transform
        except TypeError:
            continue
        for look in looks:
            try:
                vs.look = look
                return
            except TypeError:
                continue
        return


def _cycles_device(bpy: Any, device: str) -> str:
    if device == "cpu":
        return "CPU"
    try:
        prefs = bpy.context.preferences.addons["cycles"].preferences
        for kind in ("OPTIX", "CUDA", "HIP", "METAL", "ONEAPI"):
            try:
                prefs.compute_device_type = kind
            except TypeError:
                continue
            devs = (
                prefs.get_devices_for_type(kind) if hasattr(prefs, "get_devices_for_type") else []
            )
            gpus = [d for d in devs if d.type != "CPU"]
            if gpus:
                for d in devs:
                    d.use = True
                return "GPU"
    except (KeyError, AttributeError, RuntimeError):
        pass
    if device == "gpu":
        raise RuntimeError("Cycles found no GPU")
    return "CPU"


def _world(bpy: Any, scene: Any) -> None:
    world = bpy.data.worlds.new("world")
    scene.world = world
    world.use_nodes = True
    bg = world.node_tree.nodes["Background"]
    bg.inputs["Color"].default_value = (0.8, 0.8, 0.8, 1.0)  # stand-in for the HDRI
    bg.inputs["Strength"].default_value = 0.4


def _lights(bpy: Any, scene: Any) -> None:
    """Five area lights: one overhead, four at the scene border angled inward."""
    specs = [((0.0, 0.0, 30.0), 3000.0, 24.0)]
    for k in range(4):
        a = k * math.pi / 2
        specs.append(((40.0 * math.cos(a), 40.0 * math.sin(a), 18.0), 2000.0, 16.0))
    for i, (loc, energy, size) in enumerate(specs):
        data = bpy.data.lights.new(f"area{i}", type="AREA")
        data.energy, data.size = energy, size
        obj = bpy.data.objects.new(f"area{i}", data)
        obj.location = loc
        obj.rotation_euler = _look_at(loc, (0.0, 0.0, 0.0))
        scene.collection.objects.link(obj)


def _look_at(
    src: tuple[float, float, float], dst: tuple[float, float, float]
) -> tuple[float, float, float]:
    """Euler XYZ that points an object's -Z axis from ``src`` to ``dst`` (no roll)."""
    dx, dy, dz = (d - s for s, d in zip(src, dst, strict=True))
    horiz = math.hypot(dx, dy)
    rx = math.atan2(horiz, -dz)
    rz = math.atan2(dy, dx) + math.pi / 2 if horiz > 0 else 0.0
    return (rx, 0.0, rz)


def _ground(bpy: Any, scene: Any) -> Any:
    mesh = bpy.data.meshes.new("ground")
    s = 200.0
    mesh.from_pydata([(-s, -s, 0), (s, -s, 0), (s, s, 0), (-s, s, 0)], [], [(0, 1, 2, 3)])
    obj = bpy.data.objects.new("ground", mesh)
    scene.collection.objects.link(obj)
    mat = bpy.data.materials.new("ground")
    mat.use_nodes = True
    nt = mat.node_tree
    bsdf = nt.nodes["Principled BSDF"]
    coord = nt.nodes.new("ShaderNodeTexCoord")
    brick = nt.nodes.new("ShaderNodeTexBrick")
    brick.offset = 0.0
    brick.squash = 1.0
    brick.inputs["Color1"].default_value = (0.92, 0.92, 0.92, 1)
    brick.inputs["Color2"].default_value = (0.92, 0.92, 0.92, 1)
    brick.inputs["Mortar"].default_value = (0.45, 0.45, 0.45, 1)
    brick.inputs["Scale"].default_value = 0.5  # one cell per 2 units
    brick.inputs["Mortar Size"].default_value = 0.035
    brick.inputs["Brick Width"].default_value = 1.0
    brick.inputs["Row Height"].default_value = 1.0
    nt.links.new(coord.outputs["Object"], brick.inputs["Vector"])
    nt.links.new(brick.outputs["Color"], bsdf.inputs["Base Color"])
    bsdf.inputs["Roughness"].default_value = 0.8
    obj.data.materials.append(mat)
    return obj


def _camera(bpy: Any, scene: Any, geom: SceneGeometry) -> None:
    cam = bpy.data.cameras.new("camera")
    cam.lens, cam.sensor_width, cam.sensor_fit = FOCAL_MM, SENSOR_MM, "AUTO"
    cam.clip_end = 1000.0
    obj = bpy.data.objects.new("camera", cam)
    scene.collection.objects.link(obj)
    scene.camera = obj
    obj.location = tuple(float(v) for v in geom.pose.position)
    pan = geom.reading != "appendix-euler"
    # base-pan: mode YXZ applies Y first, so R = Rz Rx Ry: the azimuth offset pans the camera
    # about its own up axis. appendix-euler: the offset is added to Euler Z (mode XYZ).
    obj.rotation_mode = "YXZ" if pan else "XYZ"
    for k, e, a in zip(
        KEYFRAMES, geom.elevation_offsets_deg, geom.azimuth_offsets_deg, strict=True
    ):
        obj.rotation_euler = (
            math.radians(geom.pose.polar_deg + float(e)),
            math.radians(float(a)) if pan else 0.0,
            math.radians(geom.pose.azimuth_deg + (0.0 if pan else float(a))) + math.pi / 2,
        )
        obj.keyframe_insert(data_path="rotation_euler", frame=k)
    for fc in _fcurves(obj):
        # Classic auto handles, as the ground truth's ``fcurve.py`` computes them.
        fc.auto_smoothing = "NONE"
        for kp in fc.keyframe_points:
            kp.interpolation = "BEZIER"
            kp.handle_left_type = kp.handle_right_type = "AUTO_CLAMPED"
        fc.update()


def _fcurves(obj: Any) -> list[Any]:
    """An object's F-curves, with the legacy or the layered (4.4+) action API."""
    ad = obj.animation_data
    act = ad.action
    legacy = getattr(act, "fcurves", None)
    if legacy is not None:
        return list(legacy)
    from bpy_extras import anim_utils

    bag = anim_utils.action_get_channelbag_for_slot(act, ad.action_slot)
    return list(bag.fcurves)


def _objects(bpy: Any, scene: Any, geom: SceneGeometry, bevel_segments: int) -> list[Any]:
    cube = geom.shape == "cube"
    if cube:
        bpy.ops.mesh.primitive_cube_add(size=CUBE_EDGE)
    else:
        bpy.ops.mesh.primitive_uv_sphere_add(segments=64, ring_count=32, radius=SPHERE_RADIUS)
    proto = bpy.context.active_object
    mesh = proto.data
    # Mesh origins stay at the objects' centres in every reading: Blender centres primitive
    # rigid-body shapes (BOX) on the origin, so an origin at the base would sink the shape half
    # into the ground. The base-pan reading's origin is the point OBJECT_HEIGHT below it.
    if not cube:
        for poly in mesh.polygons:
            poly.use_smooth = True
    bpy.data.objects.remove(proto, do_unlink=True)
    mesh.materials.clear()
    mesh.materials.append(None)  # one slot; each object links its own material to it
    objs = []
    for i in range(geom.n):
        obj = bpy.data.objects.new(f"obj{i:02d}", mesh)  # shared mesh: instanced geometry
        scene.collection.objects.link(obj)
        x, y = (float(v) for v in geom.positions[i])
        obj.location = (x, y, OBJECT_HEIGHT)
        obj.rotation_euler = (0.0, 0.0, float(geom.yaw[i]))
        if cube:
            bev = obj.modifiers.new("bevel", "BEVEL")
            bev.width, bev.segments = CUBE_BEVEL, bevel_segments
        obj.material_slots[0].link = "OBJECT"  # material per instance on a shared mesh
        obj.material_slots[0].material = _material(bpy, geom, i)
        objs.append(obj)
    return objs


def _material(bpy: Any, geom: SceneGeometry, i: int) -> Any:
    """Base colour x (0.92 .. 1.08 by a 4-D noise: W = realisation, mapping = rotation)."""
    mat = bpy.data.materials.new(f"mat{i:02d}")
    mat.use_nodes = True
    nt = mat.node_tree
    bsdf = nt.nodes["Principled BSDF"]
    bsdf.inputs["Roughness"].default_value = 0.45
    coord = nt.nodes.new("ShaderNodeTexCoord")
    mapping = nt.nodes.new("ShaderNodeMapping")
    mapping.inputs["Rotation"].default_value = tuple(float(v) for v in geom.noise_rotation[i])
    noise = nt.nodes.new("ShaderNodeTexNoise")
    noise.noise_dimensions = "4D"
    noise.inputs["W"].default_value = float(geom.noise_w[i])
    noise.inputs["Scale"].default_value = 2.5
    rng = nt.nodes.new("ShaderNodeMapRange")
    rng.inputs["To Min"].default_value = 0.92
    rng.inputs["To Max"].default_value = 1.08
    mul = nt.nodes.new("ShaderNodeVectorMath")
    mul.operation = "MULTIPLY"
    mul.inputs[0].default_value = COLORS_LINEAR[geom.color]
    nt.links.new(coord.outputs["Object"], mapping.inputs["Vector"])
    nt.links.new(mapping.outputs["Vector"], noise.inputs["Vector"])
    nt.links.new(noise.outputs["Fac"], rng.inputs["Value"])
    nt.links.new(rng.outputs["Result"], mul.inputs[1])
    nt.links.new(mul.outputs["Vector"], bsdf.inputs["Base Color"])
    return mat


def _physics(bpy: Any, scene: Any, ground: Any, objs: list[Any]) -> None:
    """Rigid bodies (Table 3), then bake the cache so frames can be rendered in any order."""
    with bpy.context.temp_override(scene=scene):
        bpy.ops.rigidbody.world_add()
    rbw = scene.rigidbody_world
    rbw.point_cache.frame_start, rbw.point_cache.frame_end = 1, SIM_END
    for obj, kind in [(ground, "PASSIVE"), *((o, "ACTIVE") for o in objs)]:
        with bpy.context.temp_override(
            object=obj, active_object=obj, selected_objects=[obj], scene=scene
        ):
            bpy.ops.rigidbody.object_add(type=kind)
        rb = obj.rigid_body
        rb.collision_shape = "BOX"
        rb.friction, rb.restitution = 1.0, 0.3
        if kind == "ACTIVE":
            rb.mass = 1.0 * CUBE_EDGE  # "1.0 x object size"; both shapes are 2 units across
            rb.linear_damping = rb.angular_damping = 0.6
    with bpy.context.temp_override(scene=scene):
        bpy.ops.ptcache.bake_all(bake=True)


def _render_mp4(bpy: Any, scene: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = scene.render.image_settings
    if hasattr(img, "media_type"):  # Blender 5 separates images from video outputs
        img.media_type = "VIDEO"
    img.file_format = "FFMPEG"
    ff = scene.render.ffmpeg
    ff.format, ff.codec = "MPEG4", "H264"
    scene.frame_start, scene.frame_end = FIRST_RENDERED, LAST_RENDERED
    scene.render.filepath = str(path)
    scene.render.use_file_extension = False
    bpy.ops.render.render(animation=True)
