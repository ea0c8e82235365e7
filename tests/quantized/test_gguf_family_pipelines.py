"""`vidax-gen MODEL --transformer FILE.gguf` through the whole pipeline for the other families city96-style
GGUF files are published for (HunyuanVideo 1.0 `hyvid`, LTX-Video `ltxv`, Cosmos-Predict2.5 `cosmos`),
against the diffusers pipeline run on the file's weights dequantized in fp32.

Each family's tiny perturbed pipeline (the one its own generator tests use) is saved with `save_pretrained`;
its DiT is then written as a GGUF in city96's layout: ORIGINAL keys of the family (prefix stripped, the keys
city96 drops gone), matrices cycling through Q8_0, Q4_K and Q6_K (Q4_K / Q6_K and 5-D convolutions flattened
to rows of 256 with `comfy.gguf.orig_shape`), vectors F32, the rest F16. The reference pipeline then runs on
`gguf.quants.dequantize` of those blocks, carried back to diffusers' keys element by element (the official
layout fuses and reorders tensors: each diffusers element is tagged with a unique float64 number, the
family's own diffusers -> official mapping moves the tags, and the tags say where each official element came
from). The saved folder keeps the unquantized DiT, so a run that ignored `--transformer` cannot match
(the Q4_K error alone moves the weights far more; checked per family).
"""

from __future__ import annotations


import numpy as np
import pytest
import torch

from tests.quantized.gguf_files import dequantized, encode, write_gguf
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

# fp32 both sides at highest matmul precision on bit-identical weights: what remains is summation order, as
# in each family's own generator test (measured there 5e-6 .. 1e-5).
FRAME_ATOL = 2e-5
CITY96_DROPPED = ("_extra_state", "accum_")
TAG = 2.0 ** 24  # tag = (diffusers key index + 1) * TAG + element index: exact in float64


def _tags(state: dict) -> tuple[dict, list]:
    keys = sorted(state)
    tags = {k: torch.arange(state[k].numel(), dtype=torch.float64).reshape(state[k].shape) + (i + 1) * TAG
            for i, k in enumerate(keys)}
    return tags, keys


def _kind(index: int, data: np.ndarray) -> tuple[str, bool]:
    """(ggml type, flattened): matrices cycle through Q8_0, Q4_K and Q6_K; the rest F32 / F16."""
    if data.ndim >= 2 and data.size % 256 == 0:
        kind = ("Q8_0", "Q4_K", "Q6_K")[index % 3]
        return kind, kind != "Q8_0" or data.shape[-1] % 32 != 0 or data.ndim > 4
    return ("F32", False) if data.ndim <= 1 or data.ndim > 4 else ("F16", False)


def _city96(official: dict) -> dict:
    for prefix in ("model.diffusion_model.", "net."):
        if any(k.startswith(prefix) for k in official):
            official = {k[len(prefix):]: v for k, v in official.items() if k.startswith(prefix)}
            break
    return {k: v for k, v in official.items() if not any(d in k for d in CITY96_DROPPED)}


def write_city96_gguf(state: dict, to_official, arch: str, path) -> dict[str, torch.Tensor]:
    """The DiT `state` (diffusers keys) as a city96-style GGUF at `path`; returns the fp32 dequantized weights
    under diffusers' keys (every element placed once)."""
    tags, keys = _tags(state)
    values = _city96(to_official({k: v.detach().float() for k, v in state.items()}))
    where = _city96(to_official(tags))
    out = {k: np.full(state[k].shape, np.nan, np.float32) for k in keys}
    tensors, flatten, kinds = [], [], set()
    for index, name in enumerate(sorted(values)):
        data = values[name].numpy().astype(np.float32)
        kind, flat = _kind(index, data)
        tensors.append((name, data, kind))
        flatten += [name] if flat else []
        kinds.add(kind)
        back = dequantized(encode(data.reshape(-1, 256) if flat else data, kind), kind, data.shape).reshape(-1)
        tag = where[name].numpy().reshape(-1)
        if tag.min() < TAG:  # a buffer the official file adds (Cosmos' positional tables): no diffusers weight
            continue
        owner, element = (tag // TAG).astype(np.int64) - 1, (tag % TAG).astype(np.int64)
        for i in np.unique(owner):
            out[keys[i]].reshape(-1)[element[owner == i]] = back[owner == i]
    assert kinds >= {"Q8_0", "Q4_K", "Q6_K"} and flatten
    assert not any(np.isnan(v).any() for v in out.values())
    write_gguf(path, arch, tensors, flatten=tuple(flatten))
    return {k: torch.from_numpy(v) for k, v in out.items()}


def _far_from(state: dict, dequant: dict) -> float:
    return max(float((state[k].detach().float() - dequant[k]).abs().max()) for k in dequant)


# ---- HunyuanVideo 1.0 -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hunyuan(tmp_path_factory):
    import tests.hunyuan_video.pipelines as tiny
    from tests.hunyuan_video.hunyuan_video_spec_fixtures import official_dit_state

    root = tmp_path_factory.mktemp("gguf_hv")
    pipe = tiny.t2v_pipeline(root, tiny.towers(root))
    state = {k: v.detach().clone() for k, v in pipe.transformer.state_dict().items()}
    dequant = write_city96_gguf(state, official_dit_state, "hyvid", root / "hv-mix.gguf")
    np.save(root / "noise.npy", tiny.latents(0))
    with torch.no_grad():
        pipe.transformer.load_state_dict(dequant, strict=True)
        frames = pipe(prompt=tiny.PROMPT, latents=torch.from_numpy(np.load(root / "noise.npy")), height=tiny.HEIGHT,
                      width=tiny.WIDTH, num_frames=tiny.FRAMES, num_inference_steps=tiny.STEPS,
                      output_type="np").frames[0]
    options = GenerateOptions(model="hunyuanvideo", prompt=tiny.PROMPT, weights=str(root / "model"),
                              height=tiny.HEIGHT, width=tiny.WIDTH, frames=tiny.FRAMES, steps=tiny.STEPS,
                              latents=root / "noise.npy", out=root / "v.npy", compile_cache=False, dtype="float32",
                              transformer=root / "hv-mix.gguf")
    return options, frames, _far_from(state, dequant)


def test_hunyuan_video_gguf_pipeline_matches_diffusers(hunyuan):
    options, expected, moved = hunyuan
    assert moved > 50 * FRAME_ATOL  # the folder's DiT is not the file's
    result = generate(options)
    assert result.frames.shape == expected.shape
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


# ---- LTX-Video --------------------------------------------------------------------------------------------

LTX = dict(height=64, width=96, frames=9, steps=3, guidance=3.0, latent=(1, 8, 2, 2, 3), seed=7,
           knobs=dict(guidance_rescale=0.3, decode_timestep=0.05, decode_noise_scale=0.025))


@pytest.fixture(scope="module")
def ltx(tmp_path_factory):
    from diffusers import LTXPipeline

    from tests.ltx_video.references.ltx_spec_fixtures import official_dit_state
    from tests.ltx_video.references.pipelines import NEGATIVE, PROMPT, Replay, components, dynamic_scheduler, pack

    root = tmp_path_factory.mktemp("gguf_ltx")
    pipe = LTXPipeline(scheduler=dynamic_scheduler(), **components(11, root))
    pipe.save_pretrained(root / "model")
    state = {k: v.detach().clone() for k, v in pipe.transformer.state_dict().items()}
    dequant = write_city96_gguf(state, official_dit_state, "ltxv", root / "ltx-mix.gguf")
    noise = torch.randn(LTX["latent"], generator=torch.Generator().manual_seed(1))
    np.save(root / "latents.npy", noise.numpy())
    replay = Replay(LTX["seed"])
    replay.record(2, 0, LTX["latent"])  # the decode noise
    with torch.no_grad():
        pipe.transformer.load_state_dict(dequant, strict=True)
        frames = pipe(PROMPT, negative_prompt=NEGATIVE, latents=pack(noise), height=LTX["height"], width=LTX["width"],
                      num_frames=LTX["frames"], frame_rate=25, num_inference_steps=LTX["steps"],
                      guidance_scale=LTX["guidance"], generator=torch.Generator().manual_seed(LTX["seed"]),
                      output_type="np", **LTX["knobs"]).frames[0]
    options = GenerateOptions(model="ltx-video-13b-distilled", prompt=PROMPT, negative_prompt=NEGATIVE,
                              weights=str(root / "model"), height=LTX["height"], width=LTX["width"],
                              frames=LTX["frames"], steps=LTX["steps"], guidance=LTX["guidance"],
                              latents=root / "latents.npy", out=root / "v.npy", dtype="float32", compile_cache=False,
                              transformer=root / "ltx-mix.gguf", extra=dict(LTX["knobs"]))
    return options, frames, replay, _far_from(state, dequant)


def test_ltx_video_gguf_pipeline_matches_diffusers(ltx, monkeypatch):
    options, expected, replay, moved = ltx
    assert moved > 50 * FRAME_ATOL
    replay.install(monkeypatch)
    result = generate(options)
    assert result.frames.shape == expected.shape
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)


# ---- Cosmos-Predict2.5 ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cosmos(tmp_path_factory):
    import tests.cosmos.reference as ref
    from tests.cosmos.cosmos_spec_fixtures import official_state_dict
    from tests.cosmos.helpers import randn

    root = tmp_path_factory.mktemp("gguf_cosmos")
    pipe = ref.build(root)
    state = {k: v.detach().clone() for k, v in pipe.transformer.state_dict().items()}
    dequant = write_city96_gguf(state, official_state_dict, "cosmos", root / "cosmos-mix.gguf")
    noise = randn(*ref.LATENT_SHAPE, seed=11)
    np.save(root / "noise.npy", noise.numpy())
    with torch.no_grad():
        pipe.transformer.load_state_dict(dequant, strict=True)
        frames = pipe(prompt=ref.PROMPT, latents=noise.clone(), height=ref.HEIGHT, width=ref.WIDTH,
                      num_frames=ref.FRAMES, num_inference_steps=ref.STEPS, output_type="np").frames[0]
    options = GenerateOptions(model="cosmos-predict2.5-2b", prompt=ref.PROMPT, weights=str(root / "diffusers"),
                              height=ref.HEIGHT, width=ref.WIDTH, frames=ref.FRAMES, steps=ref.STEPS,
                              latents=root / "noise.npy", out=root / "v.npy", dtype="float32", compile_cache=False,
                              transformer=root / "cosmos-mix.gguf")
    return options, frames, _far_from(state, dequant)


def test_cosmos_gguf_pipeline_matches_diffusers(cosmos):
    options, expected, moved = cosmos
    assert moved > 50 * FRAME_ATOL
    result = generate(options)
    assert result.frames.shape == expected.shape
    np.testing.assert_allclose(result.frames, expected, atol=FRAME_ATOL, rtol=0)
