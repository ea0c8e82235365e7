"""Stage 0: the 2-layer UMT5 alone, supervised: a linear head on every real token's output (the
closing `</s>` included) reads all four attributes of the caption (shape colour, shape, direction,
background colour).

    .venv/bin/python -m wan_tiny_recipe.pretrain_text   # -> wan_tiny_recipe/out/text_encoder, seconds of CPU

Trained on the training combinations' captions in all three templates and checked on the held-out
ones (new combinations of known words: the colour before the shape word against the one before
"background"). Each token then carries the whole caption, so the DiT's cross-attention reads the
prompt whichever token it lands on; stage 2 keeps this encoder frozen.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from wan_tiny_recipe import data
from wan_tiny_recipe.common import RUN, setup_torch
from wan_tiny_recipe.models import make_text_encoder
from wan_tiny_recipe.text import build_tokenizer, token_batch

SEED = 3
FIELDS = {"colour": list(data.PALETTE), "shape": list(data.SHAPES), "direction": list(data.DIRECTIONS),
          "background": list(data.PALETTE)}


def captions_and_labels(combos) -> tuple[list[str], np.ndarray]:
    """Every combination in every template, with its four attribute indices `[N, 4]`."""
    captions, labels = [], []
    for combo in combos:
        for template in range(len(data.TEMPLATES)):
            captions.append(combo.caption(template))
            labels.append([values.index(getattr(combo, field)) for field, values in FIELDS.items()])
    return captions, np.asarray(labels)


def token_logits(torch, encoder, head, tok, captions):
    """`(logits [B, L, classes], mask [B, L])` of the head on every token's features."""
    ids, mask = token_batch(tok, captions)
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask)
    return head(encoder(input_ids=ids, attention_mask=mask).last_hidden_state), mask


def field_losses_and_hits(torch, logits, mask, labels):
    """Cross-entropy over real tokens summed over the fields, and per field the share of captions whose
    every real token reads it right."""
    labels = torch.from_numpy(labels)
    real = mask.bool()
    loss, hits, start = 0.0, {}, 0
    for index, (field, values) in enumerate(FIELDS.items()):
        field_logits = logits[..., start:start + len(values)]
        target = labels[:, index, None].expand(real.shape)
        loss = loss + torch.nn.functional.cross_entropy(field_logits[real], target[real])
        right = (field_logits.argmax(-1) == target) | ~real
        hits[field] = right.all(dim=1).float().mean().item()
        start += len(values)
    return loss, hits


def main(steps: int, lr: float) -> None:
    torch = setup_torch(SEED)
    tok = build_tokenizer(RUN / "tokenizer")
    train, held_out = data.split()
    captions, labels = captions_and_labels(train)
    held_captions, held_labels = captions_and_labels(held_out)
    encoder = make_text_encoder(tok.get_vocab_size())
    head = torch.nn.Linear(encoder.config.d_model, sum(len(v) for v in FIELDS.values()))
    optimizer = torch.optim.AdamW(list(encoder.parameters()) + list(head.parameters()), lr=lr, weight_decay=0.01)
    for step in range(steps):
        rng = np.random.default_rng([SEED, step])
        rows = rng.choice(len(captions), size=128, replace=False)
        logits, mask = token_logits(torch, encoder, head, tok, [captions[r] for r in rows])
        loss, _ = field_losses_and_hits(torch, logits, mask, labels[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    summary = {"steps": steps, "cpu_seconds": round(time.process_time(), 1)}
    with torch.no_grad():
        for name, (c, l) in {"training": (captions, labels), "held_out": (held_captions, held_labels)}.items():
            loss, hits = field_losses_and_hits(torch, *token_logits(torch, encoder, head, tok, c), l)
            summary[name] = {"captions": len(c), "loss": round(loss.item(), 4), "every_token_right": hits}
            print(f"{name} captions ({len(c)}): loss {loss.item():.4f}; every token right: "
                  + ", ".join(f"{f} {h:.1%}" for f, h in hits.items()), flush=True)
    encoder.save_pretrained(RUN / "text_encoder")
    (RUN / "text_pretrain.json").write_text(json.dumps(summary, indent=1))
    print(f"text encoder: {steps} steps, {summary['cpu_seconds']} CPU-seconds", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()
    main(args.steps, args.lr)
