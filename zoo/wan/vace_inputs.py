"""Wan VACE's conditioning inputs: reading clips and frame folders, and preparing them as diffusers'
`WanVACEPipeline` does (`preprocess_conditions`, `prepare_video_latents`' mask split, `prepare_masks`).

- `read_frames`: a `--video` / `--mask` / `--extend` PATH: a video file (or `.npy` of frames) through
  `vidax.zoo.parts.conditioning_media.read_clip`, or a folder of PNG/JPEG frames sorted by name; uint8 RGB.
- `video_size`: the size the pipeline gives a control video (its frames' size floored to the VAE's 8 pixels,
  scaled down to fit the requested area, floored to the VAE x patch grid).
- `lanczos_frames`: `VideoProcessor.preprocess_video` of PIL frames (Lanczos to the size, `x / 255 * 2 - 1`).
- `reference_canvas`: a reference image as the pipeline places it: floored to 8 pixels (Lanczos), resized
  keeping its aspect with torch's bilinear interpolation, centred on a white canvas of the video's size.
- `mask_latents`: the mask folded 8 x 8 into 64 channels and resampled to the latent frames (nearest-exact).
- `extension_video`: `--extend`'s source clip and mask (the clip's last K frames kept under black, grey frames
  under white to generate) and `blend_extension`, the longer clip with the overlap crossfaded once.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from vidax.zoo.generator.contract import Flag
from vidax.zoo.errors import PipelineError

FRAME_SUFFIXES = (".png", ".jpg", ".jpeg")
VAE_PIXELS = 8  # the Wan VAE's spatial factor (the video processor's vae_scale_factor)
GREY = 128  # the frames to generate in a source clip (diffusers' VACE example: (128, 128, 128))

FLAGS = (
    Flag("--video", "video", Path, "VACE: the control or source clip (a video file, or a folder of PNG/JPEG frames "
         "sorted by name)"),
    Flag("--mask", "mask", Path, "VACE: a mask clip like --video, white = generate, black = keep (needs --video)"),
    Flag("--reference-image", "reference_images", Path, "VACE: a reference image (repeatable)", multiple=True),
    Flag("--conditioning-scale", "conditioning_scale", str,
         "VACE: the control's scale, one value or a comma list with one per VACE layer (default 1)"),
    Flag("--extend", "extend", Path, "VACE: continue this clip (video file or frame folder); --frames is the "
         "generated window, overlap included"),
    Flag("--extend-overlap", "extend_overlap", int, "VACE --extend: the clip's last K frames kept and blended "
         "(default 1)"),
)
FIELDS = tuple(flag.field for flag in FLAGS)


def read_frames(path: str | Path) -> np.ndarray:
    """uint8 RGB frames `[F, H, W, 3]` of a clip file or a folder of PNG/JPEG frames (sorted by name)."""
    from vidax.zoo.parts.conditioning_media import read_clip
    from vidax.zoo.video_io import read_image

    path = Path(path)
    if not path.is_dir():
        return read_clip(path)
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in FRAME_SUFFIXES)
    if not files:
        raise PipelineError(f"{path}: no PNG or JPEG frames in this folder")
    frames = [read_image(p) for p in files]
    sizes = {f.shape for f in frames}
    if len(sizes) > 1:
        raise PipelineError(f"{path}: frames of different sizes ({', '.join(f'{w}x{h}' for h, w, _ in sorted(sizes))})")
    return np.stack(frames)


def parse_scale(text: str | None, layers: int) -> tuple[float, ...]:
    """`--conditioning-scale`: one value (every layer) or one per VACE layer."""
    if text is None:
        return (1.0,) * layers
    try:
        values = tuple(float(v) for v in str(text).split(","))
    except ValueError:
        raise PipelineError(f"--conditioning-scale takes numbers separated by commas, got {text!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise PipelineError(f"--conditioning-scale must be finite numbers, got {text!r}")
    if len(values) == 1:
        return values * layers
    if len(values) != layers:
        raise PipelineError(f"--conditioning-scale has {len(values)} values; this model has {layers} VACE layers "
                            f"(give one value or {layers})")
    return values


def video_size(frame_hw: tuple[int, int], height: int, width: int, grid: int) -> tuple[int, int]:
    """(height, width) `WanVACEPipeline.preprocess_conditions` gives a video of `frame_hw` for a request of
    `height` x `width`: never scaled up."""
    h, w = (n - n % VAE_PIXELS for n in frame_hw)
    if h * w > height * width:
        scale = min(width / w, height / h)
        h, w = int(h * scale), int(w * scale)
    return h // grid * grid, w // grid * grid


def lanczos_frames(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """`[3, F, H, W]` float32 in [-1, 1]: each frame resized with PIL's Lanczos filter, as the video processor."""
    from PIL import Image

    out = [np.asarray(Image.fromarray(f).resize((width, height), Image.LANCZOS), np.float32) / np.float32(255.0)
           for f in frames]
    return (2.0 * np.stack(out) - 1.0).astype(np.float32).transpose(3, 0, 1, 2)


def clip_frames(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """`[F, H, W, 3]` float32 in [0, 1]: a clip at the output size (PIL's Lanczos filter where it differs)."""
    from PIL import Image

    out = [f if f.shape[:2] == (height, width) else np.asarray(Image.fromarray(f).resize((width, height), Image.LANCZOS))
           for f in frames]
    return np.stack(out).astype(np.float32) / np.float32(255.0)


def _bilinear_axis(size_in: int, size_out: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch's bilinear source indices and weights along one axis (align_corners=False, float32)."""
    scale = np.float32(size_in) / np.float32(size_out)
    src = np.maximum(scale * (np.arange(size_out, dtype=np.float32) + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    low = np.floor(src).astype(np.int64)
    lam = np.minimum(src - low.astype(np.float32), np.float32(1))
    high = np.where(low < size_in - 1, low + 1, low)
    return low, high, lam.astype(np.float32)


def torch_bilinear(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """torch's `F.interpolate(x, (height, width), mode="bilinear", align_corners=False)` of `[C, H, W]` float32."""
    h0, h1, lh = _bilinear_axis(x.shape[1], height)
    w0, w1, lw = _bilinear_axis(x.shape[2], width)
    lh, lw = lh[None, :, None], lw[None, None, :]
    top = (1 - lw) * x[:, h0][:, :, w0] + lw * x[:, h0][:, :, w1]
    bottom = (1 - lw) * x[:, h1][:, :, w0] + lw * x[:, h1][:, :, w1]
    return ((1 - lh) * top + lh * bottom).astype(np.float32)


def reference_canvas(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """`[3, height, width]` in [-1, 1]: a reference image as `preprocess_conditions` places it."""
    h8, w8 = (n - n % VAE_PIXELS for n in image.shape[:2])
    if h8 < 1 or w8 < 1:
        raise PipelineError(f"a reference image must be at least {VAE_PIXELS}x{VAE_PIXELS} pixels, got "
                            f"{image.shape[1]}x{image.shape[0]}")
    pixels = lanczos_frames(image[None], h8, w8)[:, 0]  # [3, h8, w8]
    scale = min(height / h8, width / w8)
    new_h, new_w = int(h8 * scale), int(w8 * scale)
    canvas = np.ones((3, height, width), np.float32)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    canvas[:, top:top + new_h, left:left + new_w] = torch_bilinear(pixels, new_h, new_w)
    return canvas


def nearest_exact(size_in: int, size_out: int) -> np.ndarray:
    """torch's `nearest-exact` source indices: `min(floor((dst + 0.5) * (in / out)), in - 1)`."""
    scale = float(np.float32(size_in) / np.float32(size_out))
    return np.minimum(np.floor((np.arange(size_out) + 0.5) * scale).astype(np.int64), size_in - 1)


def mask_latents(mask: np.ndarray, latent_frames: int, references: int) -> np.ndarray:
    """`prepare_masks`: `[3, F, H, W]` in [0, 1] -> `[64, references + F', H / 8, W / 8]` (channel 0, each 8x8
    pixel block's offsets as channels, frames resampled nearest-exact; zeros for the reference frames)."""
    _, f, h, w = mask.shape
    m = mask[0].reshape(f, h // VAE_PIXELS, VAE_PIXELS, w // VAE_PIXELS, VAE_PIXELS)
    m = m.transpose(2, 4, 0, 1, 3).reshape(VAE_PIXELS * VAE_PIXELS, f, h // VAE_PIXELS, w // VAE_PIXELS)
    m = m[:, nearest_exact(f, latent_frames)]
    pad = np.zeros((m.shape[0], references, *m.shape[2:]), np.float32)
    return np.concatenate([pad, m], axis=1).astype(np.float32)


def extension_video(clip: np.ndarray, overlap: int, frames: int) -> tuple[np.ndarray, np.ndarray]:
    """(source frames, mask frames) uint8 `[frames, H, W, 3]` of `--extend`: the clip's last `overlap` frames
    under a black mask (kept), then grey frames under a white one (generated)."""
    h, w = clip.shape[1:3]
    video = np.concatenate([clip[len(clip) - overlap:], np.full((frames - overlap, h, w, 3), GREY, np.uint8)])
    mask = np.zeros_like(video)
    mask[overlap:] = 255
    return video, mask


def blend_extension(clip: np.ndarray, generated: np.ndarray, overlap: int) -> np.ndarray:
    """The longer clip `[len(clip) - overlap + len(generated), H, W, 3]` in [0, 1]: the clip, its last `overlap`
    frames crossfaded into the generated ones (weight of the generated (i + 1) / (overlap + 1)), then the rest."""
    start = len(clip) - overlap
    weight = (np.arange(1, overlap + 1, dtype=np.float32) / np.float32(overlap + 1))[:, None, None, None]
    blended = (1 - weight) * clip[start:] + weight * generated[:overlap]
    return np.concatenate([clip[:start], blended, generated[overlap:]]).astype(np.float32)
