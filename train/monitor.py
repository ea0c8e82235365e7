"""What a run shows besides its steps, in `<out stem>.train/`: `losses.jsonl` (a line per step; a line per
validation), `loss.png` (both losses against the step: `vidax.train.plot`), and `samples/` (videos generated with
the LoRA as it stands).

Validation (`--validation DIR`, every `--validation-every` steps) follows MaxDiffusion's Wan trainer: every
held-out sample is scored at fixed noise levels (`--validation-sigmas`) with fixed noise (one draw per sample and
level, from the seed, the same at every evaluation), the mean taken per level and then over the levels, so only
the LoRA changes between evaluations. With Wan2.2 A14B's two experts each level is scored by the expert whose
range holds it (the model a generation runs).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from vidax.train import data
from vidax.train.objective import eval_loss
from vidax.train.plot import write_loss_png

VALIDATION_STREAM = 2  # the key stream of the validation noise (1: the steps')


def validation_noise(seed: int, sample: int, level: int, shape: tuple[int, ...]) -> jax.Array:
    key = jax.random.fold_in(jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), VALIDATION_STREAM), sample),
                             level)
    return jax.random.normal(key, shape, jnp.float32)


def validation_loss(prep, states, options) -> tuple[float, dict[str, float]]:
    """(the mean over levels of the mean over held-out samples, {level: its mean}) (module docstring)."""
    from vidax.train.placement import mesh_context, place_batch

    per_level = {}
    for j, sigma in enumerate(options.validation_sigmas):
        index = next((i for i, d in enumerate(prep.denoisers) if d.objective.low <= sigma < d.objective.high), 0)
        d, (lora, _) = prep.denoisers[index], states[index]
        losses = []
        for i, encoded in enumerate(prep.validation):
            # a row per data-parallel device (the same sample and noise: the same loss), so any mesh scores it
            batch = data.collate([encoded], [0] * options.dp, [False] * options.dp, None, ())
            batch["first_frame"] = np.zeros(options.dp, np.float32)
            extras = prep.family.extras(batch, np.random.default_rng([options.seed, VALIDATION_STREAM, i, j]),
                                        prep.settings)
            batch.update({k: np.broadcast_to(v[:1], v.shape) for k, v in extras.items()})
            noise = validation_noise(options.seed, i, j, (1, *encoded.latents.shape))
            noise = jnp.broadcast_to(noise, (options.dp, *encoded.latents.shape))
            with mesh_context(prep.mesh, prep.rules):
                loss = eval_loss(d.model, d.inputs, d.objective, d.base, lora, place_batch(prep.mesh, batch), noise,
                                 jnp.full((options.dp,), sigma, jnp.float32))
            losses.append(float(loss))
        per_level[f"{sigma:g}"] = float(np.mean(losses))
    return float(np.mean(list(per_level.values()))), per_level


class Monitor:
    """The run folder's log, plot, validation and samples (module docstring)."""

    def __init__(self, options, prep, config, folder: Path, save, report=None, resumed_at: int = 0):
        """`save(states, paths)` writes the LoRA file(s) a sample generation loads."""
        self.options, self.prep, self.config, self.folder, self.save = options, prep, config, Path(folder), save
        self.report = report or (lambda line: None)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log = self.folder / "losses.jsonl"
        self.train, self.validation = self._read_log(resumed_at)
        self._rewrite_log()

    def _read_log(self, until: int) -> tuple[list, list]:
        """The earlier run's losses up to `until` (a resumed run continues its log; a fresh one starts it)."""
        train, validation = [], []
        if until and self.log.is_file():
            for line in self.log.read_text().splitlines():
                entry = json.loads(line)
                if entry["step"] <= until:
                    (validation if "validation" in entry else train).append(entry)
        return train, validation

    def _rewrite_log(self) -> None:
        from vidax.translator.output import write_file

        lines = sorted(self.train + self.validation, key=lambda e: (e["step"], "validation" in e))
        write_file(self.log, "".join(json.dumps(e) + "\n" for e in lines).encode())

    def _append(self, entry: dict) -> None:
        with open(self.log, "a") as fh:
            fh.write(json.dumps(entry) + "\n")

    def step(self, step: int, loss: float, expert: str) -> None:
        entry = {"step": step, "loss": loss, **({"expert": expert} if expert else {})}
        self.train.append(entry)
        self._append(entry)

    def _due(self, step: int, every: int) -> bool:
        return bool(every) and step % every == 0

    def after(self, step: int, states) -> None:
        """Validation and samples when due (the last step's come from `finish`)."""
        if step == self.options.steps:
            return
        if self.prep.validation and self._due(step, self.validation_every):
            self.validate(step, states)
        if self._due(step, self.options.sample_every) and self.options.sample_prompts is not None:
            self.samples(step, states)

    @property
    def validation_every(self) -> int:
        return self.options.validation_every or max(1, self.options.steps // 10)

    def finish(self, step: int, states) -> None:
        if self.prep.validation:
            self.validate(step, states)
        if self.options.sample_prompts is not None and self.options.sample_every:
            self.samples(step, states)
        self.plot()

    def validate(self, step: int, states) -> float:
        loss, per_level = validation_loss(self.prep, states, self.options)
        entry = {"step": step, "validation": loss, "per_sigma": per_level}
        self.validation.append(entry)
        self._append(entry)
        self.plot()
        self.report(f"step {step}: validation loss {loss:.4f} (" +
                    ", ".join(f"σ {k}: {v:.4f}" for k, v in per_level.items()) + ")")
        return loss

    def plot(self) -> Path:
        title = f"{self.options.model}, rank {self.config.rank}, lr {self.options.lr:g}"
        return write_loss_png(self.folder / "loss.png", [(e["step"], e["loss"]) for e in self.train],
                              [(e["step"], e["validation"]) for e in self.validation], title)

    def samples(self, step: int, states) -> list[Path]:
        """A video per `--sample-prompts` line with the LoRA(s) as they stand (written under `samples/`)."""
        from vidax.zoo.api import generate
        from vidax.zoo.generator.options import GenerateOptions

        folder = self.folder / "samples"
        folder.mkdir(exist_ok=True)
        names = [f"step{step:06d}" + (f"_{d.expert.name}" if d.expert.name else "") for d in self.prep.denoisers]
        files = self.save(states, [folder / f"{name}.safetensors" for name in names])
        loras = {d.expert.component: f for d, f in zip(self.prep.denoisers, files)}
        prompts = [p.strip() for p in Path(self.options.sample_prompts).read_text().splitlines() if p.strip()]
        s = self.prep.settings
        written = []
        for i, prompt in enumerate(prompts):
            out = folder / f"step{step:06d}_{i}.mp4"
            generate(GenerateOptions(
                model=self.options.model, prompt=prompt, weights=self.options.weights, height=s.height, width=s.width,
                frames=s.frames, steps=self.options.sample_steps, seed=self.options.seed, out=out,
                extra=dict(self.options.extra),
                lora=tuple(str(loras[c]) for c in ("transformer",) if c in loras),
                lora_2=tuple(str(loras[c]) for c in ("transformer_2",) if c in loras)))
            written.append(out)
            self.report(f"step {step}: sample {out}")
        return written


def read_log(folder: Path) -> list[dict[str, Any]]:
    """The entries of a run folder's `losses.jsonl`."""
    return [json.loads(line) for line in (Path(folder) / "losses.jsonl").read_text().splitlines()]
