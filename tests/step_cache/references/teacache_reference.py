"""The TeaCache reference algorithm (ali-vilab/TeaCache's per-model forwards) around a diffusers DiT's
block loop, written here in torch independently of vidax: the oracle of tests/step_cache/test_teacache.py.

The DiT's `blocks` ModuleList is swapped for one whose iteration (one per DiT call) yields callables:
the first computes the call's modulated input, takes the decision (warm-up and final steps run; else
the polynomial-rescaled relative L1 change accumulates and a step skips while the sum stays under the
threshold) and either runs block 0 or returns its input plus the branch's last residual of all
blocks; the others run their block or pass the hidden state through; the last records the residual.
Calls alternate over `branches` (Wan: cond, uncond) and each branch keeps its own accumulator.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch


class TeaCacheBlocks(torch.nn.ModuleList):
    def __init__(self, blocks, modulated: Callable, coefficients, threshold: float, warmup: int, final: int,
                 steps: int, branches: int):
        super().__init__(list(blocks))
        self.modulated, self.coefficients, self.threshold = modulated, coefficients, threshold
        self.warmup, self.final, self.steps, self.branches = warmup, final, steps, branches
        self.calls, self.decisions, self.changes = 0, [], []
        self.state = [{"acc": 0.0, "prev": None, "residual": None} for _ in range(branches)]

    def __iter__(self):
        blocks = list(self._modules.values())
        call, self.calls = self.calls, self.calls + 1
        state, step = self.state[call % self.branches], call // self.branches
        box = {}

        def run(index, *args, **kwargs):
            if "hidden_states" in kwargs:  # LTX-Video calls its blocks by keyword, Wan by position
                hidden, rest = kwargs.pop("hidden_states"), args
            else:
                hidden, rest = args[0], args[1:]
            if index == 0:
                modulated = self.modulated(blocks[0], hidden, rest, kwargs)
                box["full"], box["input"] = self._decide(state, step, modulated), hidden
                if not box["full"]:
                    return hidden + state["residual"]
            if not box["full"]:
                return hidden
            out = blocks[index](hidden, *rest, **kwargs)
            if index == len(blocks) - 1:
                state["residual"] = out - box["input"]
            return out

        return iter([lambda *a, i=i, **k: run(i, *a, **k) for i in range(len(blocks))])

    def _decide(self, state, step: int, modulated: torch.Tensor) -> bool:
        modulated = modulated.float()
        change = None
        if state["prev"] is not None:
            change = ((modulated - state["prev"]).abs().mean() / state["prev"].abs().mean()).item()
        state["prev"] = modulated.clone()
        self.changes.append(change)
        if step < self.warmup or step >= self.steps - self.final:
            full, state["acc"] = True, 0.0
        else:
            state["acc"] += float(np.poly1d(self.coefficients)(change))
            full = state["acc"] >= self.threshold
            if full:
                state["acc"] = 0.0
        self.decisions.append(full)
        return full


def install(owner: torch.nn.Module, name: str, **kwargs) -> TeaCacheBlocks:
    """Swap `owner.<name>` (the DiT's block list) for the TeaCache loop; returns it (decisions, changes)."""
    blocks = TeaCacheBlocks(getattr(owner, name), **kwargs)
    setattr(owner, name, blocks)
    return blocks


def restore(owner: torch.nn.Module, name: str, blocks: TeaCacheBlocks) -> None:
    setattr(owner, name, torch.nn.ModuleList(list(blocks._modules.values())))


def wan_time_inputs(transformer) -> tuple[dict, Callable]:
    """(the last call's {"e": temb, "e0": timestep_proj}, a hook that fills it) off Wan's condition embedder."""
    seen = {}

    def hook(module, inputs, outputs):
        seen["e"], seen["e0"] = outputs[0], outputs[1]

    return seen, transformer.condition_embedder.register_forward_hook(hook)


def ltx_first_block_modulated(block, hidden, rest, kwargs) -> torch.Tensor:
    """TeaCache4LTX-Video's modulated input: block 0's norm1 of the hidden state under its shift and scale."""
    temb = kwargs["temb"]
    ada = block.scale_shift_table[None, None] + temb.reshape(hidden.size(0), temb.size(1), 6, -1)
    return block.norm1(hidden) * (1 + ada[:, :, 1]) + ada[:, :, 0]
