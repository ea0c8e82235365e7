"""Stage 3: the trained parts as one diffusers-layout folder, shipped in the package as `wan-tiny`.

    .venv/bin/python -m wan_tiny_recipe.export   # -> zoo/wan/tiny_model/

transformer/ and text_encoder/ are the stage-2 `save_pretrained` folders, vae/ the stage-1 one with
the latents' per-channel mean and std written into its config, tokenizer/ the word-level tokenizer,
scheduler/ Wan's UniPC flow scheduler at the sampling shift (5, chosen by measurement in README.md), and `training.json` the recipe's
provenance (seeds, steps, times) and the held-out combinations the semantic test asks for.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from wan_tiny_recipe import data
from wan_tiny_recipe.common import RUN, each_step_once

TARGET = Path(__file__).resolve().parents[1] / "zoo" / "wan" / "tiny_model"
SCHEDULER = {"_class_name": "UniPCMultistepScheduler", "prediction_type": "flow_prediction", "use_flow_sigmas": True,
             "flow_shift": 5.0, "num_train_timesteps": 1000, "solver_order": 2, "solver_type": "bh2",
             "lower_order_final": True}
MODEL_INDEX = {"_class_name": "WanPipeline", "boundary_ratio": None, "expand_timesteps": False,
               "scheduler": ["diffusers", "UniPCMultistepScheduler"], "text_encoder": ["transformers", "UMT5EncoderModel"],
               "tokenizer": ["transformers", "T5TokenizerFast"], "transformer": ["diffusers", "WanTransformer3DModel"],
               "transformer_2": [None, None], "vae": ["diffusers", "AutoencoderKLWan"]}
WEIGHTS = ("config.json", "diffusion_pytorch_model.safetensors", "model.safetensors")


def _copy_weights(source: Path, target: Path) -> None:
    target.mkdir(parents=True)
    for name in WEIGHTS:
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)
    config = json.loads((target / "config.json").read_text())
    if config.pop("_name_or_path", None) is not None:  # a resumed run's checkpoint path: this machine's, not the model's
        (target / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def _loss_summary(name: str) -> dict:
    rows = each_step_once([json.loads(line) for line in (RUN / f"{name}_loss.jsonl").read_text().splitlines()])
    tail = rows[-50:]
    return {"steps": len(rows), "seconds": rows[-1]["seconds"], "final_loss_mean_of_last_50": sum(r["loss"] for r in tail) / len(tail)}


def main(target: Path = TARGET) -> None:
    if target.exists():
        shutil.rmtree(target)
    _copy_weights(RUN / "dit" / "transformer", target / "transformer")
    _copy_weights(RUN / "dit" / "text_encoder", target / "text_encoder")
    _copy_weights(RUN / "vae", target / "vae")
    stats = json.loads((RUN / "latent_stats.json").read_text())
    vae_config = json.loads((RUN / "vae" / "config.json").read_text())
    vae_config.update(latents_mean=stats["mean"], latents_std=stats["std"])
    (target / "vae" / "config.json").write_text(json.dumps(vae_config, indent=1))
    shutil.copytree(RUN / "tokenizer", target / "tokenizer")
    (target / "scheduler").mkdir()
    (target / "scheduler" / "scheduler_config.json").write_text(json.dumps(SCHEDULER, indent=1))
    (target / "model_index.json").write_text(json.dumps(MODEL_INDEX, indent=1))
    _, held_out = data.split()
    text = json.loads((RUN / "text_pretrain.json").read_text()) if (RUN / "text_pretrain.json").is_file() else None
    provenance = {"recipe": "wan_tiny_recipe/ (README there)", "text_encoder": text, "vae": _loss_summary("vae"), "dit": _loss_summary("dit"),
                  "held_out": [c.__dict__ for c in held_out], "held_out_prompts": [c.caption() for c in held_out]}
    (target / "training.json").write_text(json.dumps(provenance, indent=1))
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
