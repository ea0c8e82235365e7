"""Tiled VAE decode and encode with the linear cross-fade of diffusers' video autoencoders
(`AutoencoderKLLTXVideo`, `AutoencoderKLLTX2Video`: `tiled_decode`, `_temporal_tiled_decode` and their
encode twins), run as a host loop over one compiled tile body.

Tiles sit where the reference puts them: spatial tiles every `stride` pixels, `tile` pixels large, the
last ones cut short by the edge; temporal tiles every `stride_frames` frames, `frames + 1` frames long.
A compiled unit has one shape, so every tile runs padded to the largest tile and the body is told how
much of it is real (`Extent`). Before each convolution `fix_edges` writes, just past the real edge, what
the reference's own padding puts there (zeros, a reflection, the edge frame repeated); a kernel-3
convolution reads one position past its output, so the real part of a padded tile equals the
reference's cut-short tile. The body's garbage beyond the edge never reaches the real part.

Blending runs on the host in the reference's order and with its in-place semantics: a tile fades in
from its already blended neighbours above and to the left (`blend` output rows / columns), keeps its
first `stride` rows and columns; a temporal chunk (all spatial tiles of a frame window, stitched) drops
its last frame (decode; its first latent frame in encode), fades in from the previous blended chunk
and keeps its first `stride_frames`. The device holds the VAE, one padded input, one tile's working set
and two tiles' outputs (the next tile runs while the host blends the last).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Counts = tuple[Any, Any, Any]  # the real (frames, height, width) at one resolution (traced ints)


@dataclasses.dataclass(frozen=True)
class TileSizes:
    """Tile and stride sizes in output pixels and frames (decode; the encoder's input in encode).

    Defaults are diffusers' `AutoencoderKLLTXVideo` / `AutoencoderKLLTX2Video` ones
    (`tile_sample_min_*`, `tile_sample_stride_*`); `spatial` is its `use_tiling`, `temporal` its
    `use_framewise_decoding` (which gates encode too).
    """

    height: int = 512
    width: int = 512
    frames: int = 16
    stride_height: int = 448
    stride_width: int = 448
    stride_frames: int = 8
    spatial: bool = True
    temporal: bool = True

    def check(self, spatial_ratio: int, temporal_ratio: int) -> None:
        sizes = (self.height, self.width, self.stride_height, self.stride_width)
        if any(s % spatial_ratio or s <= 0 for s in sizes) or self.frames % temporal_ratio or \
                self.stride_frames % temporal_ratio or self.stride_frames <= 0:
            raise ValueError(f"VAE tiles must be positive multiples of the compression ({spatial_ratio} px, "
                             f"{temporal_ratio} frames), got {self}")
        if self.stride_height > self.height or self.stride_width > self.width or self.stride_frames > self.frames:
            raise ValueError(f"VAE tile strides exceed the tiles (gaps between tiles): {self}")


# ---------------------------------------------------------------------------------------------
# The real part of a padded tile, as the body sees it


@dataclasses.dataclass(frozen=True)
class Extent:
    """How much of a padded tile is real: `counts` (traced int32 `[3]`: frames, height, width) of the
    tile body's input, whose static size is `sizes`. `at(shape)` gives the counts at another
    resolution of the network (sizes scale by powers of two; frames as `1 + r (F - 1)`)."""

    sizes: tuple[int, int, int]
    counts: jax.Array

    def at(self, shape: Sequence[int]) -> Counts:
        f, h, w = shape
        sf, sh, sw = self.sizes
        c = self.counts
        if f == 1:
            t = jnp.int32(1)
        elif f - 1 >= sf - 1 > 0:
            t = (c[0] - 1) * ((f - 1) // (sf - 1)) + 1
        else:
            t = (c[0] - 1) // ((sf - 1) // (f - 1)) + 1
        return t, _scaled(c[1], h, sh), _scaled(c[2], w, sw)


def _scaled(count, n: int, size: int):
    return count * (n // size) if n >= size else count // (size // n)


jax.tree_util.register_dataclass(Extent, data_fields=["counts"], meta_fields=["sizes"])


def fix_edges(x: jax.Array, counts: Counts, *, time: str | None, space: str) -> jax.Array:
    """Channels-last `x` `[B, F, H, W, C]` with the position just past each real edge set to what the
    reference's padding of a tile that ends there holds: `time` "replicate" (the last real frame; None:
    a causal axis, nothing to fix), `space` "zeros" or "reflect" (the row two before)."""
    t, h, w = counts
    if time == "replicate":
        x = _replace(x, 1, t, 1)
    for axis, n in ((2, h), (3, w)):
        if space == "zeros":
            x = jnp.where(_at(x, axis, n), jnp.zeros((), x.dtype), x)
        elif space == "reflect":
            x = _replace(x, axis, n, 2)
        else:
            raise ValueError(f"unknown spatial padding {space!r}")
    return x


def _at(x: jax.Array, axis: int, index) -> jax.Array:
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return jax.lax.broadcasted_iota(jnp.int32, shape, axis) == index


def _replace(x: jax.Array, axis: int, index, back: int) -> jax.Array:
    """`x` with position `index` along `axis` replaced by position `index - back` (no-op past the end)."""
    return jnp.where(_at(x, axis, index), jnp.roll(x, back, axis=axis), x)


# ---------------------------------------------------------------------------------------------
# Tile plans


@dataclasses.dataclass(frozen=True)
class Tile:
    """One tile: its start and real size at the body's input."""

    start: tuple[int, int, int]
    counts: tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class _Axis:
    starts: tuple[int, ...]
    length: int  # tile length at the input (frames: including the extra one)
    total: int

    def count(self, start: int) -> int:
        return min(self.length, self.total - start)

    @property
    def body(self) -> int:
        return min(self.length, self.total)


@dataclasses.dataclass(frozen=True)
class TilePlan:
    """The reference's tiles over an input of `shape` (frames, height, width), for `decode` (latents in)
    or encode (pixels in), with the sizes of the body every tile runs padded to.

    Args:
      shape: the input's (frames, height, width).
      sizes: the tiles (in output pixels for decode, input pixels for encode).
      spatial_ratio, temporal_ratio: the VAE's compression.
      decode: True for latents -> pixels.
    """

    shape: tuple[int, int, int]
    sizes: TileSizes
    spatial_ratio: int
    temporal_ratio: int
    decode: bool = True

    def __post_init__(self):
        self.sizes.check(self.spatial_ratio, self.temporal_ratio)

    # sizes of the input side (latents when decoding, pixels when encoding)
    def _in(self, pixels: int, ratio: int) -> int:
        return pixels // ratio if self.decode else pixels

    @property
    def temporal(self) -> bool:
        f = self.shape[0]
        return self.sizes.temporal and f > self._in(self.sizes.frames, self.temporal_ratio)

    @property
    def spatial(self) -> bool:
        _, h, w = self.shape
        s, r = self.sizes, self.spatial_ratio
        return s.spatial and (h > self._in(s.height, r) or w > self._in(s.width, r))

    @property
    def axes(self) -> tuple[_Axis, _Axis, _Axis]:
        f, h, w = self.shape
        s, rs, rt = self.sizes, self.spatial_ratio, self.temporal_ratio
        if self.temporal:
            frames = _Axis(tuple(range(0, f, self._in(s.stride_frames, rt))), self._in(s.frames, rt) + 1, f)
        else:
            frames = _Axis((0,), f, f)
        if self.spatial:
            rows = _Axis(tuple(range(0, h, self._in(s.stride_height, rs))), self._in(s.height, rs), h)
            cols = _Axis(tuple(range(0, w, self._in(s.stride_width, rs))), self._in(s.width, rs), w)
        else:
            rows, cols = _Axis((0,), h, h), _Axis((0,), w, w)
        return frames, rows, cols

    @property
    def body(self) -> tuple[int, int, int]:
        """The padded tile every tile runs as (frames, height, width at the input)."""
        return tuple(a.body for a in self.axes)

    @property
    def single(self) -> bool:
        """No tiling applies: the untiled computation (a first window as long as the video still tiles:
        the reference decodes the later, shorter windows too and cross-fades them in)."""
        return not (self.temporal or self.spatial)

    @property
    def padded(self) -> tuple[int, int, int]:
        """The input size padded so that every tile's body-sized window fits."""
        return tuple(max(a.starts[-1] + a.body, a.total) for a in self.axes)

    def chunks(self) -> list[list[Tile]]:
        """Tiles grouped by temporal chunk, in the reference's order; chunks that keep nothing (a last
        window of one frame, dropped whole) are left out."""
        frames, rows, cols = self.axes
        out = []
        for fi in frames.starts:
            nf = frames.count(fi)
            if fi > 0 and nf == 1:
                continue
            out.append([Tile((fi, hi, wi), (nf, rows.count(hi), cols.count(wi)))
                        for hi in rows.starts for wi in cols.starts])
        return out

    def out_counts(self, counts: tuple[int, int, int]) -> tuple[int, int, int]:
        """The real output size of a tile of `counts`."""
        f, h, w = counts
        rs, rt = self.spatial_ratio, self.temporal_ratio
        if self.decode:
            return (f - 1) * rt + 1, h * rs, w * rs
        return (f - 1) // rt + 1, h // rs, w // rs

    @property
    def out_shape(self) -> tuple[int, int, int]:
        return self.out_counts(self.shape)

    def run(self, body: Callable[[Tile], Any]) -> np.ndarray:
        """`body(tile)` -> the tile's output (a device array: dispatched one tile ahead of the host's
        blending), channels-last `[B, F, H, W, C]` of at least its real size; returns the blended output
        `[B, F', H', W', C]` (float32, on the host)."""
        s = self.sizes
        rs, rt = self.spatial_ratio, self.temporal_ratio
        if self.decode:  # blend and keep sizes on the output side
            spatial = (s.height - s.stride_height, s.width - s.stride_width, s.stride_height, s.stride_width)
            blend_f, keep_f = s.frames - s.stride_frames, s.stride_frames
        else:
            spatial = ((s.height - s.stride_height) // rs, (s.width - s.stride_width) // rs, s.stride_height // rs,
                       s.stride_width // rs)
            blend_f, keep_f = (s.frames - s.stride_frames) // rt, s.stride_frames // rt
        chunks = self.chunks()
        outputs = _one_ahead(body, [tile for chunk in chunks for tile in chunk])
        pieces, previous = [], None
        for chunk in chunks:
            stitched = self._stitch(outputs, spatial)
            if self.temporal and chunk[0].start[0] > 0:  # the reference drops one frame of a later window
                stitched = stitched[:, :-1] if self.decode else stitched[:, 1:]
            if previous is not None:
                stitched = blend(previous, stitched, blend_f, axis=1)
                pieces.append(stitched[:, :keep_f])
            else:
                pieces.append(stitched[:, :keep_f + 1] if self.temporal else stitched)
            previous = stitched
        return np.concatenate(pieces, axis=1)[:, : self.out_shape[0]]

    def _stitch(self, outputs, sizes) -> np.ndarray:
        """One temporal chunk from `outputs` (tile, output): each spatial tile cropped to its real size
        and blended with its already blended neighbours above and to the left."""
        blend_h, blend_w, keep_h, keep_w = sizes
        _, rows_axis, cols_axis = self.axes
        above: list[np.ndarray] = []
        rows = []
        for i in range(len(rows_axis.starts)):
            row: list[np.ndarray] = []
            for j in range(len(cols_axis.starts)):
                tile, out = next(outputs)
                f, h, w = self.out_counts(tile.counts)
                out = np.asarray(out, np.float32)[:, :f, :h, :w]
                if i > 0:
                    out = blend(above[j], out, blend_h, axis=2)
                if j > 0:
                    out = blend(row[j - 1], out, blend_w, axis=3)
                row.append(out)
            rows.append(np.concatenate([t[:, :, :keep_h, :keep_w] for t in row], axis=3) if self.spatial else row[0])
            above = row
        out_h, out_w = self.out_shape[1:]
        return (np.concatenate(rows, axis=2) if len(rows) > 1 else rows[0])[:, :, :out_h, :out_w]


def _one_ahead(body: Callable[[Tile], Any], tiles: Sequence[Tile]):
    """(tile, body(tile)) in order, each next tile's body dispatched before the current output is read
    back, so that the device computes while the host blends."""
    pending = None
    for tile in tiles:
        out = body(tile)
        if pending is not None:
            yield pending
        pending = (tile, out)
    if pending is not None:
        yield pending


def blend(previous, tile, extent: int, axis: int):
    """diffusers `blend_v` / `blend_h` / `blend_t`: the first `extent` positions of `tile` fade in from
    the last `extent` of `previous`, weights `y / extent` taken in float64 and rounded to the tile's
    dtype (torch multiplies by Python floats). Host NumPy arrays or device jax arrays alike."""
    extent = min(previous.shape[axis], tile.shape[axis], extent)
    if extent <= 0:
        return tile
    xp = np if isinstance(tile, np.ndarray) else jnp
    shape = [1] * tile.ndim
    shape[axis] = extent
    ramp = np.arange(extent) / extent
    fade_in, fade_out = (w.astype(tile.dtype).reshape(shape) for w in (ramp, 1 - ramp))

    def part(x, start, stop):
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, stop)
        return x[tuple(index)]

    n = previous.shape[axis]
    mixed = part(previous, n - extent, n) * fade_out + part(tile, 0, extent) * fade_in
    return xp.concatenate([mixed, part(tile, extent, tile.shape[axis])], axis=axis)


def pad_to(x: jax.Array, shape: Sequence[int], axes: Sequence[int]) -> jax.Array:
    """`x` zero-padded at the end of `axes` to `shape` (a tile plan's `padded` input)."""
    widths = [(0, 0)] * x.ndim
    for axis, n in zip(axes, shape):
        widths[axis] = (0, n - x.shape[axis])
    return jnp.pad(x, widths) if any(w != (0, 0) for w in widths) else x


def window(x: jax.Array, start, sizes: Sequence[int], axes: Sequence[int] = (1, 2, 3)) -> jax.Array:
    """The body-sized window of a padded input at `start` (traced ints: one compiled slice for every tile)."""
    starts = [jnp.int32(0)] * x.ndim
    shape = list(x.shape)
    for axis, s, n in zip(axes, start, sizes):
        starts[axis] = jnp.asarray(s, jnp.int32)
        shape[axis] = n
    return jax.lax.dynamic_slice(x, starts, shape)


def tiles_for(setting: bool | None, whole_bytes: int, sizes: TileSizes = TileSizes()) -> TileSizes | None:
    """The tiles a VAE call runs with: `sizes` when `setting` is True (`--vae-tiling`), none when False;
    None (the default): tiles only when the whole-video call (`whole_bytes`: weights and working set)
    would not fit in 90% of one local device (the planner's `device_memory_bytes`)."""
    if setting is None:
        from vidax.zoo.compute.planner import device_memory_bytes

        _, limit = device_memory_bytes()
        setting = whole_bytes > 0.9 * limit
    return sizes if setting else None


def decode_working_set(frames: int, height: int, width: int, *, spatial_ratio: int, temporal_ratio: int, patch: int,
                       channels: int, out_channels: int, live_maps: float, tiling: TileSizes | None = None) -> int:
    """A decode's device working set beyond its weights (fp32 bytes): `live_maps` maps of the first
    decoder block's `channels` at the patched output size of one compiled decode (the whole video, or
    the padded tile every tile runs as), plus its output (tiles: two, the next tile runs while the host
    stitches the last). Frames, height and width are the output's; each VAE fits its `live_maps` to
    XLA's `memory_analysis()` in its tests."""
    f, h, w, outputs = frames, height, width, 1
    if tiling is not None:
        latent = ((frames - 1) // temporal_ratio + 1, height // spatial_ratio, width // spatial_ratio)
        plan = TilePlan(latent, tiling, spatial_ratio, temporal_ratio)
        if not plan.single:
            (f, h, w), outputs = plan.out_counts(plan.body), 2
    maps = live_maps * f * (h // patch) * (w // patch) * channels * 4
    return int(maps + outputs * f * h * w * out_channels * 4)


def encode_working_set(frames: int, height: int, width: int, *, spatial_ratio: int, temporal_ratio: int, patch: int,
                       channels: int, live_maps: float, tiling: TileSizes | None = None) -> int:
    """An encode's device working set beyond its weights (fp32 bytes), as `decode_working_set`: the
    maps at the patched input size of one compiled encode, plus its RGB input."""
    f, h, w = frames, height, width
    if tiling is not None:
        plan = TilePlan((frames, height, width), tiling, spatial_ratio, temporal_ratio, decode=False)
        if not plan.single:
            f, h, w = plan.body
    return int(live_maps * f * (h // patch) * (w // patch) * channels * 4 + f * h * w * 3 * 4)


def tiled(fn: Callable[[jax.Array], jax.Array], x: jax.Array, tile: int, stride: int, fade: int, keep: int):
    """Run `fn` on overlapping `tile`-sized spatial tiles of channels-last `x`, cross-fade, stitch.

    `stride`, `tile` are in input pixels; `fade` (the cross-fade's width), `keep` in output pixels (the
    reference's `overlap_*`, `tile_*_min_*`, `blend_*`, `row_limit_*`).
    """
    h, w = x.shape[2], x.shape[3]
    rows = [[fn(x[:, :, i : i + tile, j : j + tile]) for j in range(0, w, stride)] for i in range(0, h, stride)]
    stitched = []
    for i, row in enumerate(rows):
        out_row = []
        for j, t in enumerate(row):
            if i > 0:
                t = blend(rows[i - 1][j], t, fade, axis=2)
            if j > 0:
                t = blend(row[j - 1], t, fade, axis=3)
            row[j] = t  # the reference blends in place: later neighbours fade from the blended tile
            out_row.append(t[:, :, :keep, :keep])
        stitched.append(jnp.concatenate(out_row, axis=3))
    return jnp.concatenate(stitched, axis=2)
