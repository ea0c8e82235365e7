"""Stage 4's export: `wan_tiny_recipe/out/vace/` as the shipped `wan-tiny-vace` folder, `zoo/wan/tiny_vace/`.

    .venv/bin/python -m wan_tiny_recipe.vace.export_vace

transformer/ is train_vace.py's `save_pretrained` folder (wan-tiny's DiT with the trained VACE blocks);
scheduler/ and model_index.json are written here (WanVACEPipeline's index); vae/, text_encoder/ and
tokenizer/ are relative symbolic links to wan-tiny's (`../tiny_model/...`: the same files, shipped once in
the repository); `training.json` records the run. The folder's `__init__.py` (its `source()`, which the
registry's `embedded` names) is not touched.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from wan_tiny_recipe.vace import train_vace
from wan_tiny_recipe.common import RUN, each_step_once
from wan_tiny_recipe.export import SCHEDULER, _copy_weights

TARGET = Path(__file__).resolve().parents[2] / "zoo" / "wan" / "tiny_vace"
LINKED = ("vae", "text_encoder", "tokenizer")  # wan-tiny's own, unchanged
MODEL_INDEX = {"_class_name": "WanVACEPipeline", "boundary_ratio": None,
               "scheduler": ["diffusers", "UniPCMultistepScheduler"], "text_encoder": ["transformers", "UMT5EncoderModel"],
               "tokenizer": ["transformers", "T5TokenizerFast"], "transformer": ["diffusers", "WanVACETransformer3DModel"],
               "transformer_2": [None, None], "vae": ["diffusers", "AutoencoderKLWan"]}


def main(target: Path = TARGET, source: Path = train_vace.FOLDER) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in ("transformer", "scheduler", *LINKED):
        path = target / name
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
    _copy_weights(source / "transformer", target / "transformer")
    (target / "scheduler").mkdir()
    (target / "scheduler" / "scheduler_config.json").write_text(json.dumps(SCHEDULER, indent=1))
    (target / "model_index.json").write_text(json.dumps(MODEL_INDEX, indent=1))
    for name in LINKED:
        (target / name).symlink_to(Path("..") / "tiny_model" / name, target_is_directory=True)
    rows = each_step_once([json.loads(line) for line in (RUN / "vace_loss.jsonl").read_text().splitlines()])
    tail = rows[-50:]
    provenance = {"recipe": "wan_tiny_recipe/vace/train_vace.py (wan_tiny_recipe/README.md, stage 4)", "base": "zoo/wan/tiny_model (frozen)",
                  "vace_layers": train_vace.VACE_LAYERS, "windows": list(train_vace.WINDOWS), "seed": train_vace.SEED,
                  "steps": len(rows), "seconds": rows[-1]["seconds"],
                  "final_loss_mean_of_last_50": sum(r["loss"] for r in tail) / len(tail)}
    (target / "training.json").write_text(json.dumps(provenance, indent=1))
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
