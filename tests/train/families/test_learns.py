"""It learns (issue 63, item 6): for each family `vidax-train` added, a tiny run on CPU whose LoRA moves the frames
`vidax-gen` makes in the intended direction. Each family's tiny pipeline (its tests' tiny perturbed DiT, VAE and
text towers, saved with `save_pretrained`) is trained on one clip (one caption, a red-and-green striped picture)
and then generates that caption from the same noise with and without the LoRA.

With random weights the VAE cannot draw the clip itself, so the detector's target is what the model can make of it:
the clip's own latents (as training encoded them) decoded by the same VAE. The LoRA must move the video towards it:
the change it makes points at the target (cosine > 0.4: a LoRA that did nothing, or pushed the other way, fails)
and leaves the frames at least 8% nearer to it (100 steps of rank 8 at lr 3e-2, 6 sampling steps; measured:
cosines 0.55 to 0.63, 14% to 22% nearer). The runs happen in the test's process at its backend level 0 (333
programs, most of them small: 41 s against 55 s in a child at XLA's default level, tests/backend_level.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.hunyuan_video15.pipelines import saved, towers  # noqa: F401  (the tiny HunyuanVideo-1.5 pipeline)

STEPS, LR, RANK, SAMPLING_STEPS = 100, 3e-2, 8, 6
# LTX-2 and generation: a single guidance pass, no STG at the registry's block 29 of a 2-block DiT, no audio decode
LTX2 = {"stg_scale": 0.0, "modality_scale": 1.0, "audio_guidance": 1.0, "audio_stg_scale": 0.0,
        "audio_modality_scale": 1.0, "guidance_rescale": 0.0, "audio_guidance_rescale": 0.0, "audio": False,
        "stg_blocks": "1"}
# family: (model name, height, width, frames, caption, the family's own settings)
RUNS = {
    "hunyuan_video15": ("hunyuanvideo-1.5", 32, 48, 9, "a red kite over a grey sea", {}),
    "ltx2": ("ltx-2", 32, 64, 9, "w1 w2 w3 w4", LTX2),
    "cogvideox": ("cogvideox-5b", 32, 48, 9, "a small boat drifts on calm water", {}),
}


def striped_clip(height: int, width: int, frames: int) -> np.ndarray:
    """`[F, H, W, 3]` in [0, 1]: red with green vertical stripes, the same every frame."""
    clip = np.zeros((frames, height, width, 3), np.float32)
    clip[..., 0] = 0.9
    clip[..., 1] = ((np.arange(width) // 6) % 2 * 0.8)[None, None, :]
    clip[..., 2] = 0.1
    return clip


def _decodable(family, s, latents):
    """The sampler's state of clean latents (LTX-2's joins the video tokens with silent audio tokens)."""
    if family.entry.family != "ltx2":
        return latents
    import jax.numpy as jnp

    from vidax.zoo.ltx2 import latents as lat

    _, c, length, mel = family.audio_shape(s)
    return lat.join_tokens(lat.pack_video(latents), jnp.zeros((1, length, c * mel)))


def learn(folder: str, model: str, weights: str, height: int, width: int, frames: int, caption: str,
          extra: dict) -> tuple[float, float, float]:
    """(distance of the frames to the target without the LoRA, with it, cosine of the LoRA's change with the
    direction to the target), mean absolute over every pixel."""
    import jax.numpy as jnp

    from vidax.train.run import TrainOptions, prepare, train_lora
    from vidax.zoo.generator.generation import generate_video
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.generator.stages import Run
    from vidax.zoo.registry import make_pipeline
    from vidax.zoo.video_io import write_mp4

    data = Path(folder) / model
    data.mkdir(parents=True)
    write_mp4(data / "clip.mp4", striped_clip(height, width, frames), 8)
    (data / "clip.txt").write_text(caption)
    size = dict(height=height, width=width, frames=frames)
    options = TrainOptions(model=model, weights=weights, data=data, out=data / "lora.safetensors", rank=RANK,
                           steps=STEPS, lr=LR, dtype="float32", seed=1, extra=extra, **size)
    prep = prepare(options)
    train_lora(options, prep=prep)

    def generate(loras, prompt=caption):
        request = GenerateOptions(model=model, weights=weights, prompt=prompt, steps=SAMPLING_STEPS, guidance=1.0,
                                  seed=3, dtype="float32", lora=loras, extra=extra, **size)
        return make_pipeline(model, request), request

    family, request = generate(())
    base = generate_video(family, request).frames
    tuned = generate_video(*generate((str(options.out),))).frames
    s = family.resolve_settings(request)
    latents = jnp.asarray(prep.encoded[0].latents[None])
    target = family.decode(Run(family, request), s, _decodable(family, s, latents)).frames
    change, wanted = (tuned - base).ravel(), (target - base).ravel()
    cosine = float(change @ wanted / (np.linalg.norm(change) * np.linalg.norm(wanted)))
    return float(np.abs(base - target).mean()), float(np.abs(tuned - target).mean()), cosine


def learn_all(folder: str, runs: dict) -> dict:
    return {family: learn(folder, *run) for family, run in runs.items()}


@pytest.fixture(scope="module")
def learned(saved, tmp_path_factory):  # noqa: F811
    from diffusers import LTX2Pipeline

    from tests.cogvideox.pipelines import pipeline as cogvideox_pipeline
    from tests.ltx2.references.pipelines import components

    root = tmp_path_factory.mktemp("learns")
    LTX2Pipeline(**components(root)).save_pretrained(root / "ltx2")
    cogvideox_pipeline(root / "cogvideox", "5b", scheduler="ddim")
    weights = {"hunyuan_video15": str(saved[1]), "ltx2": str(root / "ltx2"), "cogvideox": str(root / "cogvideox")}
    runs = {family: (name, weights[family], *rest) for family, (name, *rest) in RUNS.items()}
    return learn_all(str(root / "runs"), runs)


@pytest.mark.parametrize("family", sorted(RUNS))
def test_the_lora_moves_the_frames_towards_its_clip(learned, family):
    without, with_lora, cosine = learned[family]
    assert cosine > 0.4, learned[family]
    assert with_lora < 0.92 * without, learned[family]
