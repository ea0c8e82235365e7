"""Test-side stand-ins that let the metric oracles (vbench, the `clip` package, cd-fvd) import here.

Why: PyPI's torchvision does not import beside the pinned torch 2.13.0 CPU wheel ("operator
torchvision::nms does not exist"), and setuptools 81+ no longer ships `pkg_resources`. The oracles import
both at module level but, on the paths these tests run, use only:

- vbench's `clip_transform` / `dino_transform` on float `[T, C, H, W]` tensors: `Resize(n, BICUBIC or
  BILINEAR, antialias=False)`, `CenterCrop(n)`, `Lambda`, `Normalize`. torchvision's tensor resize of a float
  image is `torch.nn.functional.interpolate(img, size, mode, align_corners=False, antialias=antialias)` with the
  shorter side set to n and the longer to `int(n * long / short)`; its `CenterCrop` takes the corner
  `int(round((h - n) / 2))`, `int(round((w - n) / 2))`; `Normalize` is `(x - mean) / std` per channel. Those are
  written here on torch's own ops and nothing else (`test_standins.py` checks each against the definition);
- `clip.clip`'s `packaging.version` check (`pkg_resources.packaging` is the `packaging` package);
- cd-fvd's `torchvision.datasets.video_utils.VideoClips`, named by its data loader, which the FVD test
  never calls (it raises if it is).

Everything else in the stand-in raises, so an oracle path that needs more of torchvision fails loudly.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import types

import torch
import torch.nn.functional as F


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"


def resized_size(height: int, width: int, size) -> tuple[int, int]:
    if isinstance(size, (list, tuple)):
        return tuple(size) if len(size) == 2 else resized_size(height, width, size[0])
    short, long = (height, width) if height <= width else (width, height)
    new_short, new_long = size, int(size * long / short)
    return (new_short, new_long) if height <= width else (new_long, new_short)


class Resize:
    def __init__(self, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
        if max_size is not None:
            raise NotImplementedError("stand-in Resize: max_size")
        self.size, self.mode, self.antialias = size, InterpolationMode(interpolation).value, antialias

    def __call__(self, img):
        if not (isinstance(img, torch.Tensor) and img.is_floating_point()):
            raise NotImplementedError("stand-in Resize: float tensors only")
        size = resized_size(img.shape[-2], img.shape[-1], self.size)
        squeeze = img.ndim == 3
        out = F.interpolate(img[None] if squeeze else img, size=size, mode=self.mode, align_corners=False,
                            antialias=self.antialias)
        return out[0] if squeeze else out


class CenterCrop:
    def __init__(self, size):
        self.size = (size, size) if isinstance(size, int) else tuple(size)

    def __call__(self, img):
        h, w = img.shape[-2:]
        th, tw = self.size
        if th > h or tw > w:
            raise NotImplementedError("stand-in CenterCrop: padding")
        top, left = int(round((h - th) / 2.0)), int(round((w - tw) / 2.0))
        return img[..., top:top + th, left:left + tw]


class Normalize:
    def __init__(self, mean, std, inplace=False):
        self.mean, self.std = torch.as_tensor(mean), torch.as_tensor(std)

    def __call__(self, img):
        return (img - self.mean.to(img.dtype)[:, None, None]) / self.std.to(img.dtype)[:, None, None]


class Lambda:
    def __init__(self, function):
        self.function = function

    def __call__(self, img):
        return self.function(img)


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, img):
        for transform in self.transforms:
            img = transform(img)
        return img


class _Unused:
    """A name an oracle imports but these tests never call."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} is a test stand-in that is never called")


@contextlib.contextmanager
def installed():
    """The stand-ins in `sys.modules` while the oracles are imported, and gone afterwards (the imported oracle
    modules keep what they took): other tests in the process see no torchvision, as before."""
    import packaging.version

    transforms = types.ModuleType("torchvision.transforms")
    for name, value in dict(Compose=Compose, Resize=Resize, CenterCrop=CenterCrop, Normalize=Normalize,
                            Lambda=Lambda, InterpolationMode=InterpolationMode).items():
        setattr(transforms, name, value)
    for name in ("ToTensor", "ToPILImage", "RandomResizedCrop"):
        setattr(transforms, name, type(name, (_Unused,), {}))
    transforms.functional = types.ModuleType("torchvision.transforms.functional")
    video_utils = types.ModuleType("torchvision.datasets.video_utils")
    video_utils.VideoClips = type("VideoClips", (_Unused,), {})
    datasets = types.ModuleType("torchvision.datasets")
    datasets.video_utils = video_utils
    root = types.ModuleType("torchvision")
    root.transforms, root.datasets = transforms, datasets
    added = {"torchvision": root, "torchvision.transforms": transforms,
             "torchvision.transforms.functional": transforms.functional, "torchvision.datasets": datasets,
             "torchvision.datasets.video_utils": video_utils,
             "pkg_resources": types.SimpleNamespace(packaging=packaging)}
    clashes = sorted(name for name in added if name in sys.modules)
    if clashes:
        raise RuntimeError(f"stand-ins would shadow imported modules: {clashes}")
    sys.modules.update(added)
    try:
        yield
    finally:
        for name in added:
            sys.modules.pop(name, None)


def oracles() -> types.SimpleNamespace:
    """The oracle modules, imported once with the stand-ins in place."""
    global _ORACLES
    if _ORACLES is None:
        with installed():
            import cdfvd.fvd
            import clip.model
            import vbench.aesthetic_quality
            import vbench.background_consistency
            import vbench.subject_consistency
            import vbench.temporal_flickering
            import vbench.utils

        _ORACLES = types.SimpleNamespace(cdfvd=cdfvd.fvd, clip_model=clip.model, vbench=vbench, utils=vbench.utils,
                                         subject=vbench.subject_consistency, background=vbench.background_consistency,
                                         aesthetic=vbench.aesthetic_quality, flicker=vbench.temporal_flickering)
    return _ORACLES


_ORACLES = None
