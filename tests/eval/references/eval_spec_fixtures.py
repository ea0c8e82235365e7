"""Test checkpoints of the metric networks' specs (conversion_specs/eval/) and the trees they must convert to,
computed from the state dicts alone (numpy transposes and splits), never through the specs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny  # noqa: E402
from oracle import state_of, to_np  # noqa: E402

from vidax.translator.testing import SpecCase, register_spec_fixture

NORM = {"weight": "scale", "bias": "bias"}


def _layers(state: dict, pattern: str) -> int:
    return len({m.group(1) for k in state if (m := re.fullmatch(pattern, k))})


def _stack(values: list[np.ndarray]) -> np.ndarray:
    return np.ascontiguousarray(np.stack(values))


def _blocks(state: dict, source: str, target: str, names: dict, fused: str, out: str, fc: tuple[str, str]) -> dict:
    """A ViT's stacked blocks: fused q/k/v split, linears transposed, norms' weight -> scale."""
    tree = {}
    n = _layers(state, rf"{re.escape(source)}\.(\d+)\..*")
    for param in ("weight", "bias"):
        fused_values = [np.split(state[f"{source}.{i}.{fused}_{param}" if fused.endswith("in_proj") else f"{source}.{i}.{fused}.{param}"], 3)
                        for i in range(n)]
        for j, part in enumerate("qkv"):
            leaf = [v[j].T if param == "weight" else v[j] for v in fused_values]
            tree[f"{target}/self_attn/{part}_proj/{'kernel' if param == 'weight' else 'bias'}"] = _stack(leaf)
        kind = "kernel" if param == "weight" else "bias"
        tree[f"{target}/self_attn/out_proj/{kind}"] = _stack(
            [state[f"{source}.{i}.{out}.{param}"].T if param == "weight" else state[f"{source}.{i}.{out}.{param}"] for i in range(n)])
        for src, dst in names.items():
            tree[f"{target}/{dst}/{NORM[param]}"] = _stack([state[f"{source}.{i}.{src}.{param}"] for i in range(n)])
        for src, dst in zip(fc, ("fc1", "fc2")):
            values = [state[f"{source}.{i}.{src}.{param}"] for i in range(n)]
            tree[f"{target}/mlp/{dst}/{kind}"] = _stack([v.T for v in values] if param == "weight" else values)
    return tree


def clip_tree(state: dict) -> dict:
    s = {k: to_np(v) for k, v in state.items() if k != "logit_scale"}
    v, t = "visual/vision_model/", "textual/text_model/"
    tree = {
        v + "embeddings/patch_embedding/kernel": np.ascontiguousarray(s["visual.conv1.weight"].transpose(2, 3, 1, 0)),
        v + "embeddings/class_embedding": s["visual.class_embedding"],
        v + "embeddings/position_embedding/embedding": s["visual.positional_embedding"],
        "visual/visual_projection/kernel": s["visual.proj"],
        t + "embeddings/token_embedding/embedding": s["token_embedding.weight"],
        t + "embeddings/position_embedding/embedding": s["positional_embedding"],
        "textual/text_projection/kernel": s["text_projection"],
    }
    for p in ("weight", "bias"):
        tree[f"{v}pre_layrnorm/{NORM[p]}"] = s[f"visual.ln_pre.{p}"]
        tree[f"{v}post_layernorm/{NORM[p]}"] = s[f"visual.ln_post.{p}"]
        tree[f"{t}final_layer_norm/{NORM[p]}"] = s[f"ln_final.{p}"]
    norms = {"ln_1": "layer_norm1", "ln_2": "layer_norm2"}
    tree |= _blocks(s, "visual.transformer.resblocks", v + "encoder/layers", norms, "attn.in_proj", "attn.out_proj", ("mlp.c_fc", "mlp.c_proj"))
    tree |= _blocks(s, "transformer.resblocks", t + "encoder/layers", norms, "attn.in_proj", "attn.out_proj", ("mlp.c_fc", "mlp.c_proj"))
    return tree


def dino_tree(state: dict) -> dict:
    s = {k: to_np(v) for k, v in state.items()}
    tree = {
        "embeddings/class_embedding": s["cls_token"].reshape(-1),
        "embeddings/position_embedding": s["pos_embed"][0],
        "embeddings/patch_embedding/kernel": np.ascontiguousarray(s["patch_embed.proj.weight"].transpose(2, 3, 1, 0)),
        "embeddings/patch_embedding/bias": s["patch_embed.proj.bias"],
        "post_layernorm/scale": s["norm.weight"], "post_layernorm/bias": s["norm.bias"],
    }
    return tree | _blocks(s, "blocks", "encoder/layers", {"norm1": "layer_norm1", "norm2": "layer_norm2"}, "attn.qkv",
                          "attn.proj", ("mlp.fc1", "mlp.fc2"))


def i3d_tree(state: dict) -> dict:
    names = {"weight": "scale", "bias": "bias", "running_mean": "mean", "running_var": "var"}
    tree = {}
    for key, value in state.items():
        unit, kind, param = key.rsplit(".", 2)
        if param == "num_batches_tracked":
            continue
        path = unit.replace(".", "/")
        if kind == "conv3d":
            tree[f"{path}/conv3d/{'kernel' if param == 'weight' else 'bias'}"] = (
                np.ascontiguousarray(to_np(value).transpose(2, 3, 4, 1, 0)) if param == "weight" else to_np(value))
        else:
            tree[f"{path}/bn/{names[param]}"] = to_np(value)
    return tree


@register_spec_fixture("eval/clip")
def clip_cases(tmp_path):
    model = tiny.tiny_clip(seed=3, vision_layers=1, transformer_layers=1)
    expected = clip_tree(state_of(model))
    return [SpecCase("openai-torchscript", tiny.save_clip(model, tmp_path / "ts", torchscript=True), expected),
            SpecCase("state-dict", tiny.save_clip(model, tmp_path / "sd", torchscript=False), expected)]


@register_spec_fixture("eval/dino")
def dino_cases(tmp_path):
    model = tiny.tiny_dino(seed=4, num_hidden_layers=1)
    return [SpecCase("dino-hub", tiny.save_dino(model, tmp_path), dino_tree(tiny.dino_hub_state(model)))]


@register_spec_fixture("eval/i3d")
def i3d_cases(tmp_path):
    model = tiny.tiny_i3d(seed=5)
    return [SpecCase("cdfvd", tiny.save_i3d(model, tmp_path), i3d_tree(state_of(model)))]


@register_spec_fixture("eval/aesthetic")
def aesthetic_cases(tmp_path):
    model = tiny.tiny_aesthetic(16, seed=6)
    state = state_of(model)
    expected = {"kernel": np.ascontiguousarray(to_np(state["weight"]).T), "bias": to_np(state["bias"])}
    return [SpecCase("laion", tiny.save_aesthetic(model, tmp_path), expected)]


def raft_tree(state: dict) -> dict:
    names = {"weight": "scale", "bias": "bias", "running_mean": "mean", "running_var": "var"}
    tree = {}
    for key, value in state.items():
        module, param = key.removeprefix("module.").rsplit(".", 1)
        if param == "num_batches_tracked" or re.fullmatch(r"cnet\.layer\d\.0\.downsample\.1", module):
            continue  # the step counters; downsample.1 is norm3 under a second name
        path = re.sub(r"\.(\d+)", r"_\1", module).replace(".", "/")
        value = to_np(value)
        if value.ndim == 4:
            tree[f"{path}/kernel"] = np.ascontiguousarray(value.transpose(2, 3, 1, 0))
        elif ".norm" in module:
            tree[f"{path}/{names[param]}"] = value
        else:
            tree[f"{path}/bias"] = value
    return tree


@register_spec_fixture("eval/raft")
def raft_cases(tmp_path):
    model = tiny.tiny_raft(seed=7)
    return [SpecCase("raft-things", tiny.save_raft(model, tmp_path), raft_tree(
        {f"module.{k}": v for k, v in state_of(model).items()}))]
