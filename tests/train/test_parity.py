"""`vidax-train lora`'s step against PyTorch (issue 49, item 4): a tiny perturbed diffusers
`WanTransformer3DModel` with a PEFT LoRA on the default targets, converted through the real spec.

Same batch, noise and timesteps on both sides; the torch LoRA (PEFT's own A, and B set nonzero so every
gradient term matters) reaches vidax through a PEFT-format file, read by `vidax.train.export.read_peft`.
Compared at fp32 with highest matmul precision: the loss, every LoRA gradient, and the LoRA after three
`train_step`s (optax AdamW) against three `torch.optim.AdamW` steps.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from peft import LoraConfig as PeftLoraConfig
from peft import inject_adapter_in_model
from peft.utils import get_peft_model_state_dict
from safetensors.torch import save_file

from tests.train.tiny import CONFIG, build, rel
from vidax.train.export import read_peft
from vidax.train.families.wan import WanInputs
from vidax.train.lora import DEFAULT_TARGETS, LoraConfig, dense_layers, diffusers_name, init_lora
from vidax.train.objective import AdamW, Objective, loss_and_grad, step_noise, train_step
LATENT = (2, 4, 3, 4, 6)  # batch 2, 4 channels, 3 x 4 x 6 latents -> 18 tokens per clip
RANK, ALPHA = 4, 8.0
ADAMW = AdamW(lr=1e-3, weight_decay=0.01)
INPUTS = WanInputs("float32", (2, 2), per_token=False, condition=False, image=False)  # text-to-video


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("wan")
    ref, model, params = build(root)
    torch.manual_seed(1)
    peft = inject_adapter_in_model(PeftLoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=list(DEFAULT_TARGETS)), ref)
    gen = torch.Generator().manual_seed(2)
    for name, p in peft.named_parameters():
        p.requires_grad_("lora_" in name)
        if "lora_B" in name:  # PEFT starts B at zero: a nonzero B makes A's gradient and the merge matter
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    state = {f"transformer.{k}": v.contiguous() for k, v in get_peft_model_state_dict(peft).items()}
    save_file(state, root / "lora.safetensors")
    paths = {diffusers_name(m): m for m in dense_layers(params["blocks"])}
    lora, config = read_peft(root / "lora.safetensors", paths)
    return dict(ref=peft, model=model, params=params, lora=lora, paths=paths)


def torch_step(ref, latents, noise, sigmas, text):
    """diffusers' Wan forward at timestep σ·1000 on x_t = (1-σ)·x0 + σ·noise, MSE to noise - x0."""
    t = lambda x: torch.from_numpy(np.array(x, np.float32))  # noqa: E731
    s = t(sigmas).reshape(-1, 1, 1, 1, 1)
    noisy = (1 - s) * t(latents) + s * t(noise)
    pred = ref(hidden_states=noisy, timestep=t(sigmas) * 1000, encoder_hidden_states=t(text), return_dict=False)[0]
    loss = torch.nn.functional.mse_loss(pred, t(noise) - t(latents))
    ref.zero_grad()
    loss.backward()
    return loss


def torch_grads(ref, paths) -> dict:
    """{(param path, "A"|"B"): [L, ...] in vidax's layout} of the PEFT LoRA's gradients (or values)."""
    out = {}
    for name, p in ref.named_parameters():
        if "lora_" in name:
            parts = name.split(".")  # blocks.{i}.<module>.lora_A.default.weight
            module = paths[".".join(parts[2:-3])]
            role = "A" if parts[-3] == "lora_A" else "B"
            out.setdefault((module, role), {})[int(parts[1])] = p.grad.numpy().T
    return {key: np.stack([v[i] for i in sorted(v)]) for key, v in out.items()}


def batch(seed=3):
    rng = np.random.default_rng(seed)
    latents = rng.standard_normal(LATENT).astype(np.float32)
    text = rng.standard_normal((LATENT[0], 9, CONFIG["text_dim"])).astype(np.float32)
    return latents, text


def test_loss_and_lora_gradients_match_peft(setup):
    latents, text = batch()
    noise = np.random.default_rng(4).standard_normal(LATENT).astype(np.float32)
    sigmas = np.asarray([0.3, 0.85], np.float32)
    want = torch_step(setup["ref"], latents, noise, sigmas, text)
    objective = Objective(scale=ALPHA / RANK)
    lora = jax.tree.map(np.array, setup["lora"])
    loss, grads = loss_and_grad(setup["model"], INPUTS, objective, setup["params"], lora,
                                {"latents": latents, "text": text}, noise, sigmas)
    assert rel(loss, want.item()) < 1e-5
    torch_side = torch_grads(setup["ref"], setup["paths"])
    assert set(torch_side) == {(m, r) for m in grads for r in ("A", "B")}
    assert len(grads) == 2 * 4 + 2  # q, k, v, o of attn1 and attn2, both ffn projections
    for (module, role), g in torch_side.items():
        assert rel(grads[module][role], g) < 1e-5, (module, role)
        assert np.abs(g).max() > 1e-6  # every gradient is a real one


def test_three_adamw_steps_match_torch(setup):
    """`train_step` (noise and σ from each step's key) three times against torch.optim.AdamW on the same draws."""
    latents, text = batch(5)
    objective = Objective(scale=ALPHA / RANK, sampling="shift")
    lora = jax.tree.map(np.array, setup["lora"])
    start = jax.tree.map(np.array, lora)
    opt_state = ADAMW.init(lora)
    lora = jax.tree.map(jax.numpy.asarray, lora)
    ref = setup["ref"]
    params = [p for name, p in ref.named_parameters() if "lora_" in name]
    with torch.no_grad():
        before = [p.clone() for p in params]
    optim = torch.optim.AdamW(params, lr=ADAMW.lr, weight_decay=ADAMW.weight_decay)
    for step in range(3):
        key = jax.random.fold_in(jax.random.key(7), step)
        noise, sigmas = step_noise(key, LATENT, objective)
        torch_step(ref, latents, np.asarray(noise), np.asarray(sigmas), text)
        optim.step()
        lora, opt_state, _ = train_step(setup["model"], INPUTS, objective, ADAMW, setup["params"], lora, opt_state,
                                        {"latents": latents, "text": text}, key)
    for (module, role), want in torch_values(ref, setup["paths"]).items():
        assert rel(lora[module][role], want) < 1e-5, (module, role)
        moved = np.asarray(lora[module][role]) - start[module][role]
        assert rel(moved, want - start[module][role]) < 1e-4, (module, role)  # the update itself, not only the sum
    with torch.no_grad():
        for p, b in zip(params, before):
            p.copy_(b)


def torch_values(ref, paths) -> dict:
    out = {}
    for name, p in ref.named_parameters():
        if "lora_" in name:
            parts = name.split(".")
            out.setdefault((paths[".".join(parts[2:-3])], "A" if parts[-3] == "lora_A" else "B"), {})[int(parts[1])] = \
                p.detach().numpy().T.copy()
    return {key: np.stack([v[i] for i in sorted(v)]) for key, v in out.items()}


def test_fresh_lora_is_peft_init(setup):
    """A: PEFT's kaiming-uniform (a = sqrt(5)) bound 1/sqrt(in); B: zero, so step 0 is the base model."""
    lora = init_lora(jax.random.key(0), setup["params"]["blocks"], LoraConfig(rank=RANK))
    for module, pair in lora.items():
        fan_in = pair["A"].shape[1]
        bound = 1 / np.sqrt(fan_in)
        assert float(np.abs(pair["A"]).max()) <= bound and float(np.abs(pair["A"]).max()) > 0.8 * bound
        assert not np.any(np.asarray(pair["B"]))
    assert sorted(lora) == sorted(setup["lora"])


def test_a_bf16_carry_keeps_each_block_input_in_bf16(setup):
    """`Objective(carry_dtype="bfloat16")` (vidax-train's setting for a bf16 base): the scan over blocks carries the
    hidden state in bf16, so the backward keeps bf16 block inputs (half of fp32's: the 1.3B at 480p did not fit
    a 15.75 GiB chip with fp32 ones); the loss stays near the fp32 carry's."""
    latents, text = batch()
    noise = np.random.default_rng(4).standard_normal(LATENT).astype(np.float32)
    sigmas = np.asarray([0.3, 0.85], np.float32)
    lora = jax.tree.map(np.array, setup["lora"])
    carries = {}
    for carry in (None, "bfloat16"):
        objective = Objective(scale=ALPHA / RANK, carry_dtype=carry)
        rows = {"latents": latents, "text": text}
        jaxpr = jax.make_jaxpr(lambda *a: loss_and_grad(setup["model"], INPUTS, objective, *a))(
            setup["params"], lora, rows, noise, sigmas)
        scans = [e for e in jaxpr.jaxpr.eqns if e.primitive.name == "scan"]
        carries[carry] = {str(v.aval.dtype) for e in scans for v in e.outvars[:e.params["num_carry"]]
                          if len(v.aval.shape) == 3}
        loss, _ = loss_and_grad(setup["model"], INPUTS, objective, setup["params"], lora, rows, noise, sigmas)
        carries[carry, "loss"] = float(loss)
    assert carries[None] == {"float32"} and carries["bfloat16"] == {"bfloat16"}, carries
    assert rel(carries["bfloat16", "loss"], carries[None, "loss"]) < 1e-2
