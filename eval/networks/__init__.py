"""The networks the metrics read features with, in Flax, their weights through `conversion_specs/eval/`.

| module | network | reference | spec |
|---|---|---|---|
| `i3d` | Inception-v1 I3D, Kinetics-400 logits (FVD) | cd-fvd's `InceptionI3d` (piergiaj's port; TATS' `i3d_pretrained_400.pt`) | `eval/i3d` |
| `clip` | CLIP ViT-B/32 and ViT-L/14 image and text towers (OpenAI layout, open_clip's too) | the `clip` package's `CLIP` | `eval/clip` |
| `dino` | DINO ViT-B/16 (subject consistency) | DINO's `vit_base` as torch.hub loads it | `eval/dino` |
| `aesthetic` | LAION's aesthetic predictor v1 head (linear on normalised CLIP ViT-L/14 features) | `torch.nn.Linear(768, 1)` | `eval/aesthetic` |
| `raft` | RAFT optical flow, the large model (dynamic degree) | VBench's `third_party/RAFT` (`raft-things.pth`) | `eval/raft` |
"""
