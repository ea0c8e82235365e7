"""`wan-tiny`: an embedded Wan2.1-architecture T2V model that needs no download.

Its weights were trained on this project's procedural clips (one shape of one colour moving left,
right, up or down over a plain background; `wan_tiny_recipe/` in the repository holds the recipe) and ship
in the package as an ordinary diffusers-layout folder, `tiny_model/`: transformer, VAE and UMT5 text
encoder of the real models' classes at small widths, a word-level tokenizer made with `tokenizers`,
and Wan's UniPC scheduler. The ordinary Wan pipeline loads it through the translator like any
checkpoint. Ask it for what it learned: "a red circle moves left on a blue background" (colours red,
green, blue, yellow, white, black; shapes circle, square, triangle).
"""

from __future__ import annotations

import json
import string
from pathlib import Path

from vidax.zoo.weights.source import WeightsSource

NAME = "wan-tiny"

# the character-level tokenizer below serves the Wan pipeline tests' own tiny checkpoints
SPECIALS = ["<pad>", "</s>", "<unk>"]  # T5's ids 0, 1, 2


# --- tokenizer ---------------------------------------------------------------------------------


def build_tokenizer(folder: Path) -> int:
    """A character-level Unigram tokenizer with T5's specials and metaspace splitting; returns the vocab size."""
    from vidax.zoo.parts.synthetic_tokenizer import t5_style_unigram

    pieces = SPECIALS + ["▁"] + [f"▁{c}" for c in string.ascii_lowercase] + list(string.ascii_lowercase + string.digits)
    pieces += list(".,!?'-:;()")
    tok = t5_style_unigram([(p, 0.0 if p in SPECIALS else -float(len(p) == 1)) for p in pieces])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "T5Tokenizer", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>",
              "padding_side": "right", "model_max_length": 512}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    return tok.get_vocab_size()


# --- the trained folder ---------------------------------------------------------------------


TRAINED = Path(__file__).parent / "tiny_model"


def source() -> WeightsSource:
    """The shipped trained folder as a weights source (diffusers layout: converted on load)."""
    return WeightsSource("folder", TRAINED)
