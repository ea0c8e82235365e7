"""A tiny perturbed `Cosmos2_5_PredictBasePipeline` (Reason1-like Qwen2.5-VL, tokenizer with Qwen2-VL's chat
template built locally, DiT, Wan2.1 VAE, the shipped Karras UniPC), saved with `save_pretrained` as the
diffusers repo lays it out, and the same weights in the official layout (`base/post-trained/*.pt`,
`tokenizer.pth`, the Reason1 repo in `Cosmos-Reason1-7B/`), registered for vidax through a user registry
file (VIDAX_MODELS) whose `config` tables carry the tiny sizes the official files do not.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import numpy as np
import torch

from tests.oracle import perturb

from .cosmos_spec_fixtures import dit_reference, official_state_dict
from .helpers import install_torchvision_standin
from tests.tiny_references import QWEN2_VL_TEMPLATE, WAN_VAE_21
from tests.wan_vae.wan_vae_spec_fixtures import official_key


PROMPT = "a robot arm stacks red cubes on a table"
HEIGHT, WIDTH, FRAMES, STEPS = 32, 32, 9, 2  # 3 latent frames of 4 x 4 (2 x 2 patches)
LATENT_SHAPE = (1, 16, 3, 4, 4)
TEXT = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 1, 1]})
VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=32, patch_size=2,
              spatial_merge_size=1, temporal_patch_size=1, window_size=4, fullatt_block_indexes=[0])
DIT = dict(in_channels=17, out_channels=16, num_attention_heads=4, attention_head_dim=16,  # tp 2 x sp 2
           crossattn_proj_in_channels=2 * 32, max_size=(16, 32, 32))
VAE = dict(WAN_VAE_21)  # the official VAE layout has 4 levels and 2 resnets per level
# the scheduler diffusers' convert_cosmos_to_diffusers.py ships with Predict2.5
SCHEDULER = dict(use_karras_sigmas=True, use_flow_sigmas=True, prediction_type="flow_prediction", sigma_max=200.0,
                 sigma_min=0.01)


class NoSafetyChecker:
    """The pipeline refuses `safety_checker=None`; vidax has no guardrail (README)."""

    def to(self, *args, **kwargs):
        return self

    def check_text_safety(self, prompt: str) -> bool:
        return True


def install_standins() -> None:
    """torchvision is not installed here: its nearest resize (padding mask) and `to_tensor` (image-to-world)."""
    from diffusers.pipelines.cosmos import pipeline_cosmos2_5_predict as module

    install_torchvision_standin()
    module.torchvision = types.SimpleNamespace(transforms=types.SimpleNamespace(functional=types.SimpleNamespace(
        to_tensor=lambda img: torch.from_numpy(np.asarray(img, np.float32) / 255.0).permute(2, 0, 1))))


def build(root: Path):
    """The reference pipeline, saved in `root/diffusers` (save_pretrained) and `root/official`."""
    import diffusers
    import transformers

    from tests.encoders.test_tokenizer import qwen_like_folder

    install_standins()
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        qwen_like_folder(root / "tokenizer_source", "right", QWEN2_VL_TEMPLATE))
    torch.manual_seed(0)
    text = perturb(transformers.Qwen2_5_VLForConditionalGeneration(
        transformers.Qwen2_5_VLConfig(text_config=TEXT, vision_config=VISION)), seed=1)
    text.config._attn_implementation = "eager"
    vae = perturb(diffusers.AutoencoderKLWan(**VAE), seed=2)
    dit = dit_reference(seed=3, **DIT)
    scheduler = diffusers.UniPCMultistepScheduler(**SCHEDULER)
    pipe = diffusers.Cosmos2_5_PredictBasePipeline(text_encoder=text, tokenizer=tokenizer, transformer=dit, vae=vae,
                                                    scheduler=scheduler, safety_checker=NoSafetyChecker())
    pipe.register_modules(safety_checker=None)  # nothing to save for it
    pipe.save_pretrained(root / "diffusers")
    pipe.register_modules(safety_checker=NoSafetyChecker())
    save_official(pipe, root / "official")
    return pipe


def save_official(pipe, root: Path) -> Path:
    """The official layout of the same weights: the DiT `.pt` (`net.` keys), the VAE as `tokenizer.pth`, and
    the Reason1 repo (transformers' own save) with its tokenizer in `Cosmos-Reason1-7B/`."""
    state = {k: v.detach().contiguous() for k, v in pipe.transformer.state_dict().items()}
    (root / "base" / "post-trained").mkdir(parents=True)
    torch.save(official_state_dict(state), root / "base" / "post-trained" / "tiny_ema_bf16.pt")
    vae = {official_key("wan/vae", k): v.detach().contiguous() for k, v in pipe.vae.state_dict().items()}
    torch.save(vae, root / "tokenizer.pth")
    pipe.text_encoder.save_pretrained(root / "Cosmos-Reason1-7B")
    pipe.tokenizer.save_pretrained(root / "Cosmos-Reason1-7B")
    return root


def user_registry(path: Path, pipe) -> Path:
    """A user's registry file: the tiny model under the official layout, with configs the official files lack."""
    vae = {k: v for k, v in dict(pipe.vae.config).items() if not k.startswith("_")}
    scheduler = {k: v for k, v in dict(pipe.scheduler.config).items() if not k.startswith("_")}
    scheduler = {"_class_name": "UniPCMultistepScheduler", **{k: v for k, v in scheduler.items() if v is not None}}
    lines = [
        '[models."cosmos-tiny-official"]',
        'family = "cosmos"',
        'description = "a tiny Cosmos-Predict2.5 in the official layout (tests)"',
        'repos = { official = "example/cosmos-tiny" }',
        'components.transformer = { spec = "cosmos/transformer" }',
        'components.vae = { spec = "wan/vae" }',
        'components.text_encoder = { spec = "encoders/decoder", mount = { official = "Cosmos-Reason1-7B" }, '
        'copy = "config.json" }',
        'components.tokenizer = { mount = { official = "Cosmos-Reason1-7B" }, copy = "*" }',
        f'settings = {{ height = {HEIGHT}, width = {WIDTH}, frames = {FRAMES}, steps = {STEPS}, guidance = 7.0, '
        'fps = 16 }',
        f'config.vae = {_toml(vae)}',
        f'config.scheduler = {_toml(scheduler)}',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _toml(table: dict) -> str:
    items = {k: list(v) if isinstance(v, tuple) else v for k, v in table.items() if v is not None}
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in items.items()) + " }"
