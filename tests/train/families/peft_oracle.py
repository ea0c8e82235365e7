"""The torch side of the per-family training parity tests: a tiny perturbed diffusers DiT with a PEFT LoRA on the
family's default targets (PEFT's own A, B set nonzero so every gradient term matters), read into vidax through a
PEFT-format file (`vidax.train.export.read_peft`), and the gradients PyTorch computes for it, in vidax's layout."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import torch
from flax import traverse_util
from peft import LoraConfig as PeftLoraConfig
from peft import inject_adapter_in_model
from peft.utils import get_peft_model_state_dict
from safetensors.torch import save_file

from tests.oracle import save_diffusers
from vidax.train.export import read_peft
from vidax.train.lora import dense_layers, diffusers_name, targeted
from vidax.translator import convert

RANK, ALPHA = 4, 8.0


def converted(ref, root: Path, spec: str, model_of):
    """(vidax model, fp32 params) of `ref` saved in the diffusers layout and converted through `spec`;
    `model_of(config dict)` builds the vidax module."""
    save_diffusers(ref, root / "transformer")
    model = model_of(json.loads((root / "transformer" / "config.json").read_text()))
    tree = convert(spec, root, model.param_shapes(), dtype="float32")
    return model, traverse_util.unflatten_dict(dict(tree), sep="/")


def with_lora(ref, targets, root: Path, params, block_list: str = "transformer_blocks", seed: int = 1):
    """`ref` with a PEFT LoRA on the block layers `targets` name (B nonzero, only the LoRA trainable), and the same
    LoRA as vidax reads it. PEFT is given the layers' full names: a short name would also reach layers outside
    the blocks (HunyuanVideo-1.5's token refiner), which vidax does not train."""
    layers = targeted(params["blocks"], tuple(targets))
    depth = len(jax.tree.leaves(params["blocks"])[0])
    names = [f"{block_list}.{i}.{diffusers_name(m)}" for m in layers for i in range(depth)]
    torch.manual_seed(seed)
    peft = inject_adapter_in_model(PeftLoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=names), ref)
    gen = torch.Generator().manual_seed(seed + 1)
    for name, p in peft.named_parameters():
        p.requires_grad_("lora_" in name)
        if "lora_B" in name:
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    state = {f"transformer.{k}": v.contiguous() for k, v in get_peft_model_state_dict(peft).items()}
    save_file(state, root / "lora.safetensors")
    paths = {diffusers_name(m): m for m in dense_layers(params["blocks"])}
    lora, _ = read_peft(root / "lora.safetensors", paths)
    return peft, lora, paths


def torch_grads(ref, paths) -> dict:
    """{(param path, "A"|"B"): [L, ...] in vidax's layout} of the PEFT LoRA's gradients."""
    out = {}
    for name, p in ref.named_parameters():
        if "lora_" in name:
            parts = name.split(".")  # <block list>.{i}.<module>.lora_A.default.weight
            role = "A" if parts[-3] == "lora_A" else "B"
            grad = np.zeros(p.shape, np.float32) if p.grad is None else p.grad.numpy()  # a layer the loss never reads
            out.setdefault((paths[".".join(parts[2:-3])], role), {})[int(parts[1])] = grad.T
    return {key: np.stack([v[i] for i in sorted(v)]) for key, v in out.items()}


def rel(got, want) -> float:
    """Relative error of a whole tensor (its norm): elementwise rtol is meaningless for entries near zero."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def assert_step_matches(loss, grads, want_loss: float, ref, paths, modules: int) -> None:
    """The loss and every LoRA gradient within 1e-5 of torch's (relative to each tensor's norm), every one live."""
    assert rel(loss, want_loss) < 1e-5, (float(loss), want_loss)
    torch_side = torch_grads(ref, paths)
    assert len(grads) == modules, sorted(grads)
    assert set(torch_side) == {(m, r) for m in grads for r in ("A", "B")}
    for (module, role), g in torch_side.items():
        assert np.abs(g).max() > 1e-7, (module, role)  # every gradient is a real one
        assert rel(grads[module][role], g) < 1e-5, (module, role, rel(grads[module][role], g))


def t(x) -> torch.Tensor:
    return torch.from_numpy(np.array(x, np.float32))


def step(model, inputs, objective, params, lora, batch, noise, sigmas):
    """vidax's loss and LoRA gradients, as one compiled program (as `train_step` runs them)."""
    from vidax.train.objective import loss_and_grad

    return jax.jit(loss_and_grad, static_argnums=(0, 1, 2))(model, inputs, objective, params, lora, batch, noise, sigmas)
