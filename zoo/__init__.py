"""vidax.zoo: video generators in JAX. What a program needs to generate without the CLI:

    from vidax.zoo import GenerateOptions, generate

    result = generate(GenerateOptions(model="wan-tiny", prompt="a red circle moves left", out="circle.mp4"))
    result.frames                     # [F, H, W, 3] float32 in [0, 1]; circle.mp4 and circle.json written

- `generate(options, progress=None, *, cache=None) -> GenerateResult`: what `vidax-gen` runs (layout chosen
  by the memory planner, the video, its sidecar and, asked, the latents written).
- `make_pipeline(name, options)` then `generate_video(family, options)`: the frames, nothing written.
- `GenerateOptions` (every setting; None: the model's native default), `GenerateResult`, `Progress` (hooks
  for progress display), `StageCache` (placed weights kept between calls), `PipelineError` (a request that
  cannot be honoured; one line), `registered_models()`, `plan_layouts(family, options)` (`--plan`'s table).

The names load on first use: `import vidax.zoo` imports no jax. docs/ARCHITECTURE.md describes the rooms
below this face ("Floors and rooms").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the same names, for readers and type checkers (and the house's import check)
    from vidax.zoo.api import generate
    from vidax.zoo.compute.progress import Progress
    from vidax.zoo.errors import PipelineError
    from vidax.zoo.generator.generation import generate_video
    from vidax.zoo.generator.options import GenerateOptions, GenerateResult
    from vidax.zoo.generator.stages import StageCache
    from vidax.zoo.plan.layouts import plan_layouts
    from vidax.zoo.registry import make_pipeline, registered_models

# public name -> the module that defines it
PUBLIC = {
    "generate": "vidax.zoo.api",
    "generate_video": "vidax.zoo.generator.generation",
    "GenerateOptions": "vidax.zoo.generator.options",
    "GenerateResult": "vidax.zoo.generator.options",
    "Progress": "vidax.zoo.compute.progress",
    "StageCache": "vidax.zoo.generator.stages",
    "PipelineError": "vidax.zoo.errors",
    "make_pipeline": "vidax.zoo.registry",
    "registered_models": "vidax.zoo.registry",
    "plan_layouts": "vidax.zoo.plan.layouts",
}
__all__ = sorted(PUBLIC)


def __getattr__(name: str):
    if name not in PUBLIC:
        raise AttributeError(f"module 'vidax.zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(PUBLIC[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(PUBLIC))
