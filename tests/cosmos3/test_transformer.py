"""Cosmos3 MoT DiT against diffusers `Cosmos3OmniTransformer`, through the real spec, for both released
backbones (Nano: SwiGLU + text q/k norms + attention biases; Edge: relu2 + `k_norm_und_for_gen`).

The reference runs one packed sample per call; ours runs classifier-free guidance's two prompts as one
batch, right-padded to one length (sample 0: 7 tokens, image-conditioned on latent frame 0; sample
1: 5 tokens, no conditioning frame). Positions come from the pipeline's own mRoPE builders with fps
modulation (fps 16); t = 700 as the scheduler's integer timestep. Compared per stage (embed, layer
0, end to end) in fp32.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import (
    get_3d_mrope_ids_text_tokens,
    get_3d_mrope_ids_vae_tokens,
)
from vidax.translator import AccountingError, convert, load_spec
from vidax.zoo.cosmos3 import Cosmos3Transformer, Cosmos3TransformerConfig
from vidax.zoo.cosmos3 import rope as cosmos3_rope
from vidax.zoo.cosmos3.transformer import Streams

from tests.oracle import recorded, save_diffusers, spec_without_rule, state_of

from .cosmos3_spec_fixtures import dit_reference, text_model_prefixed

ATOL = 2e-5  # fp32 through ~10 matmuls and two softmaxes per layer
SPEC = "cosmos3/transformer"
LENGTHS, T, H, W, FPS, TIMESTEP = (7, 5), 3, 4, 6, 16.0, 700
NOISY = np.array([[0, 1, 1], [1, 1, 1]], np.float32)


class Case:
    def __init__(self, variant, tmp):
        self.reference = dit_reference(variant)
        root = tmp / variant
        save_diffusers(self.reference, root / "transformer")
        self.model = Cosmos3Transformer(Cosmos3TransformerConfig.from_hf_config(dict(self.reference.config)))
        tree = convert(load_spec(SPEC), root, self.model.param_shapes(), dtype="float32")
        self.params = jax.tree.map(np.asarray, __import__("flax").traverse_util.unflatten_dict(dict(tree), sep="/"))
        self.root = root


@pytest.fixture(scope="module", params=["nano", "edge"])
def case(request, tmp_path_factory):
    return Case(request.param, tmp_path_factory.mktemp("cosmos3"))


def make_inputs(seed: int = 1, size=(T, H, W)):
    g = torch.Generator().manual_seed(seed)
    ids = [torch.randint(0, 64, (n,), generator=g) for n in LENGTHS]
    latents = torch.randn(2, 4, *size, generator=g)
    return ids, latents


def grid(size) -> tuple[int, int, int]:
    """The pipeline's post-patch grid (`_prepare_vision_segment`: odd latent sides rounded up)."""
    t, h, w = size
    return t, math.ceil(h / 2), math.ceil(w / 2)


def reference_positions(length: int, cfg, size=(T, H, W)) -> torch.Tensor:
    """The pipeline's `_prepare_text_segment` + `_prepare_vision_segment` positions."""
    text, offset = get_3d_mrope_ids_text_tokens(length, 0, use_float_positions=cfg.enable_fps_modulation)
    vision, _ = get_3d_mrope_ids_vae_tokens(*grid(size), offset + cfg.unified_3d_mrope_temporal_modality_margin,
                                            reset_spatial_indices=True, fps=FPS, base_fps=float(cfg.base_fps),
                                            temporal_compression_factor=4)
    return torch.cat([text, vision], dim=1)


def run_reference(case, ids, latents, sample: int):
    ref = case.reference
    length = LENGTHS[sample]
    t, ph, pw = grid(latents.shape[2:])
    n_tokens = t * ph * pw
    noisy = torch.tensor([i for i in range(t) if NOISY[sample, i]])
    per_frame = ph * pw
    mse = torch.cat([torch.arange(length + f * per_frame, length + (f + 1) * per_frame) for f in noisy.tolist()])
    with recorded(ref.layers[0]) as seen, torch.no_grad():
        out = ref(input_ids=ids[sample], text_indexes=torch.arange(length),
                  position_ids=reference_positions(length, ref.config, latents.shape[2:]), und_len=length,
                  sequence_length=length + n_tokens, vision_tokens=[latents[sample:sample + 1]],
                  vision_token_shapes=[(t, ph, pw)],
                  vision_sequence_indexes=torch.arange(length, length + n_tokens), vision_mse_loss_indexes=mse,
                  vision_timesteps=torch.full((len(mse),), TIMESTEP), vision_noisy_frame_indexes=[noisy],
                  return_dict=False)[0][0]
    return out.numpy(), seen


def our_inputs(case, ids, latents):
    cfg = case.model.cfg
    longest = max(LENGTHS)
    input_ids = np.zeros((2, longest), np.int32)
    mask = np.zeros((2, longest), bool)
    for i, row in enumerate(ids):
        input_ids[i, :len(row)], mask[i, :len(row)] = row.numpy(), True
    positions = cosmos3_rope.batch_positions(cfg, list(LENGTHS), grid(latents.shape[2:]), FPS)
    cos, sin = cosmos3_rope.rope_tables(cfg, positions)
    return (jnp.asarray(input_ids), jnp.asarray(mask), jnp.asarray(latents.numpy()),
            jnp.full((2,), TIMESTEP, jnp.float32), jnp.asarray(NOISY), jnp.asarray(cos), jnp.asarray(sin))


def test_positions_match_the_pipeline(case):
    cfg = case.model.cfg
    for length in LENGTHS:
        ours = cosmos3_rope.sequence_positions(cfg, length, (T, H // 2, W // 2), FPS)
        np.testing.assert_array_equal(ours, reference_positions(length, case.reference.config).numpy())


def test_end_to_end_embed_and_layer_zero(case):
    ids, latents = make_inputs()
    inputs = our_inputs(case, ids, latents)
    out = np.asarray(jax.jit(case.model.__call__)(case.params, *inputs))
    streams, ctx = jax.jit(case.model.embed)(case.params, *inputs)
    block = jax.jit(case.model.block.apply)
    for sample, length in enumerate(LENGTHS):
        expected, seen = run_reference(case, ids, latents, sample)
        und, gen, (cos_und, sin_und, cos_gen, sin_gen) = seen["args"]
        def close(a, b, what, sample=sample):
            np.testing.assert_allclose(np.asarray(a), b.numpy(), atol=ATOL, rtol=1e-5, err_msg=f"sample {sample}: {what}")

        close(streams.und[sample, :length], und, "text stream")
        close(streams.gen[sample], gen, "video stream (time embedding on noisy frames only)")
        close(ctx.und_cos[sample, :length], cos_und, "text rope cos")
        close(ctx.und_sin[sample, :length], sin_und, "text rope sin")
        close(ctx.gen_cos[sample], cos_gen, "video rope cos")
        close(ctx.gen_sin[sample], sin_gen, "video rope sin")
        # Layer 0 on the reference's own inputs (batch of one, no padding).
        layer = jax.tree.map(lambda a: a[0], case.params["blocks"])
        one = jax.tree.map(lambda a, i=sample, n=length: a[i:i + 1, :n] if a.ndim > 1 and a.shape[1] == max(LENGTHS)
                           else a[i:i + 1], ctx)
        got = block({"params": layer}, Streams(jnp.asarray(und.numpy())[None],
                                                                 jnp.asarray(gen.numpy())[None]), one)
        close(got.und[0], seen["out"][0], "layer 0 text stream")
        close(got.gen[0], seen["out"][1], "layer 0 video stream")
        np.testing.assert_allclose(out[sample], expected[0], atol=ATOL, rtol=1e-5, err_msg=f"sample {sample}")
    assert np.all(out[0, :, 0] == 0)  # the conditioning frame's output is zero, as the reference returns it


def test_odd_latent_sides_are_zero_padded_to_the_patch_and_cropped(case):
    """Latents 3 x 5 (a 48 x 80 video): the reference zero-pads them to 4 x 6 before its 2x2 patches and crops
    the velocity back; so do we (before: refused)."""
    ids, latents = make_inputs(seed=2, size=(T, 3, 5))
    out = np.asarray(jax.jit(case.model.__call__)(case.params, *our_inputs(case, ids, latents)))
    assert out.shape == (2, 4, T, 3, 5)
    for sample in range(2):
        expected, _ = run_reference(case, ids, latents, sample)
        np.testing.assert_allclose(out[sample], expected[0], atol=ATOL, rtol=1e-5, err_msg=f"sample {sample}")


def test_text_model_prefix_reads_the_same(case, tmp_path):
    """Checkpoints from before the flat layout keep the text model under `model.`."""
    save_diffusers(case.reference, tmp_path / "transformer", text_model_prefixed(state_of(case.reference)))
    tree = convert(load_spec(SPEC), tmp_path, case.model.param_shapes(), dtype="float32")
    flat = {"/".join(p.key for p in path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(case.params)[0]}
    assert tree.keys() == flat.keys()
    for key, value in flat.items():
        np.testing.assert_array_equal(np.asarray(tree[key]), value, err_msg=key)


def test_broken_spec_fails_loudly(case, tmp_path):
    broken = spec_without_rule(SPEC, "match = '(?:model\\.)?norm_moe_gen\\.weight'", tmp_path)
    with pytest.raises(AccountingError, match="norm_moe_gen"):
        convert(load_spec(broken), case.root, case.model.param_shapes())


def test_bad_inputs_are_clear_errors(case):
    ids, latents = make_inputs()
    inputs = list(our_inputs(case, ids, latents))
    with pytest.raises(ValueError, match="RoPE tables"):
        case.model.embed(case.params, *inputs[:5], inputs[5][:, :-1], inputs[6][:, :-1])
    with pytest.raises(ValueError, match="noisy"):
        case.model.embed(case.params, *inputs[:4], inputs[4][:, :2], *inputs[5:])
