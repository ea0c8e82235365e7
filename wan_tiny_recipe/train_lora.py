"""A LoRA for the trained `wan-tiny`: rank-4 PEFT adapters on the DiT that draw every background as
horizontal stripes (the background colour and white; black on a white one), prompts unchanged.

    nice -n 15 .venv/bin/python -m wan_tiny_recipe.train_lora   # -> zoo/wan/tiny_lora/stripes.safetensors

It trains against the shipped folder (`zoo/wan/tiny_model/`): its DiT and text encoder stay frozen,
its VAE encodes the clips, and the latents are normalised by its VAE config's mean and std, so only
the adapters train, by the same flow matching as stage 2. The file
holds diffusers/PEFT names (`transformer.<module>.lora_A.weight`) with lora_alpha = rank, so
`vidax-gen wan-tiny --lora FILE` merges it at scale 1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from wan_tiny_recipe import data
from wan_tiny_recipe.common import RUN, LossLog, setup_torch
from wan_tiny_recipe.export import TARGET as MODEL
from wan_tiny_recipe.models import TINY_MAX_TEXT
from wan_tiny_recipe.text import build_tokenizer, compact_text, token_batch, use_compact_text
from wan_tiny_recipe.train_dit import DROP_CAPTION, SHIFT, encode_clips, flow_batch

SEED = 4
RANK = 4
TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]  # both attentions of every block
# striped clips per training combination, by background: white stripes on blue and green stay faint
# on the DiT with one striped clip each (wan_tiny_recipe/README.md, the LoRA example), so those backgrounds
# get more of the data
STRIPED_CLIPS = {"blue": 4, "green": 3}
OUT = Path(__file__).resolve().parents[1] / "zoo" / "wan" / "tiny_lora" / "stripes.safetensors"


def striped_latents(torch):
    """(captions, latent means, stds) of `STRIPED_CLIPS` striped clips per training combination
    (one for backgrounds it does not name), cached; a cache made with other counts is made again."""
    cache = RUN / "lora_latents.npz"
    counts = json.dumps(STRIPED_CLIPS, sort_keys=True)
    if cache.is_file():
        saved = np.load(cache)
        if "striped_clips" in saved and str(saved["striped_clips"]) == counts:
            return list(saved["captions"]), saved["mean"], saved["std"]
    train, _ = data.split()
    rng = np.random.default_rng(SEED)
    items = [(c, *data.random_placement(rng, c)) for c in train for _ in range(STRIPED_CLIPS.get(c.background, 1))]
    captions = [c.caption(int(rng.choice(len(data.TEMPLATES)))) for c, *_ in items]
    mean, std = encode_clips(torch, MODEL / "vae", [data.render(*item, stripes=True) for item in items])
    np.savez(cache, captions=np.asarray(captions), mean=mean, std=std, striped_clips=np.asarray(counts))
    return captions, mean, std


def main(steps: int, batch: int, lr: float, shift: float = SHIFT) -> None:
    torch = setup_torch(SEED)
    from diffusers import WanTransformer3DModel
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file
    from transformers import UMT5EncoderModel

    tok = build_tokenizer()
    captions, latents_mean, latents_std = striped_latents(torch)
    vae_config = json.loads((MODEL / "vae" / "config.json").read_text())
    stats = (np.asarray(vae_config["latents_mean"]), np.asarray(vae_config["latents_std"]))
    encoder = UMT5EncoderModel.from_pretrained(MODEL / "text_encoder").eval().requires_grad_(False)
    dit = WanTransformer3DModel.from_pretrained(MODEL / "transformer").requires_grad_(False)
    dit.add_adapter(LoraConfig(r=RANK, lora_alpha=RANK, target_modules=TARGETS, init_lora_weights=True))
    cross_attention = use_compact_text(dit)
    params = [p for p in dit.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    log = LossLog(RUN / "lora_loss.jsonl", resume=False)
    for step in range(steps):
        rng = np.random.default_rng([SEED, step])
        rows, noisy, timestep, target = flow_batch(torch, rng, latents_mean, latents_std, stats, batch, shift)
        prompts = ["" if rng.uniform() < DROP_CAPTION else str(captions[r]) for r in rows]
        with torch.no_grad():
            text, cross_attention.bias = compact_text(torch, encoder, *token_batch(tok, prompts), TINY_MAX_TEXT)
        loss = ((dit(noisy, timestep, text, return_dict=False)[0] - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        log.add(step, loss=loss.item())
    weights = {f"transformer.{name}": tensor.contiguous() for name, tensor in get_peft_model_state_dict(dit).items()}
    OUT.parent.mkdir(exist_ok=True)
    save_file(weights, OUT)
    print(f"wrote {OUT} ({len(weights)} tensors)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--train-shift", type=float, default=SHIFT,
                        help="the shift of the training noise levels (default 3, as train_dit.py's --train-shift)")
    args = parser.parse_args()
    main(args.steps, args.batch, args.lr, args.train_shift)
