"""`--cache easycache` on every family, against ComfyUI's EasyCache rule applied by hand to the family's own
DiT calls (fp32, the tiny pipelines of each family's tests, 6 steps).

Each family runs once through `generate` with the cache; every step's DiT inputs and outputs are recorded
by running the step's own prediction again with the whole DiT (tests-side, at the latents the cached run
saw). The rule is then applied here, by hand, to those arrays: the step's noise level against the start
and end percents (mapped as ComfyUI's model sampling of that family maps them, written out below per
family), the prompt branch's input change (batch row 0 of the first call, every 8th position of the last
two axes), the rate and cumulative change against the threshold. vidax's step log must name the same
decisions for every branch, and a skipped step's prediction must be the family's prediction with every
DiT call returning its input plus the last full step's output-minus-input of that call and row (LTX-2:
its video and audio streams both). The window of each family is set so that step 0 runs before it, the
last step after it, and the threshold so that step 3 skips and step 4 runs (the sums noted at `CASES`).
Wan2.2 A14B's second expert starts afresh at the switch (as a second node on the second model would).
"""

from __future__ import annotations

import dataclasses
import json
import math
from functools import partial

import jax
import numpy as np
import pytest
import torch

from vidax.zoo.parts.dit import forward
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.api import generate

STEPS = 6
EXPECTED = [True, True, True, False, True, True]  # before, 4 active (rate from 1-2, skip at 3), past the end
PHASES = ["before", "active", "active", "active", "active", "past_end"]
PREDICTION_ATOL = 1e-5


# --- the families: their tiny pipeline, request, and where the percents fall (ComfyUI's mapping) ---------


def _flow(shift: float, percent: float) -> float:
    """ComfyUI's discrete-flow `percent_to_sigma`: shift * t / (1 + (shift - 1) t), t = 1 - percent."""
    t = 1.0 - percent
    return shift * t / (1 + (shift - 1) * t)


def _flux(mu: float, percent: float) -> float:
    """ComfyUI's Flux `percent_to_sigma` (LTX): e^mu / (e^mu + 1 / t - 1), t = 1 - percent."""
    return math.exp(mu) / (math.exp(mu) + 1 / (1.0 - percent) - 1)


def _sigma(timestep: float) -> float:
    return timestep / 1000


def _scheduler(folder) -> dict:
    return json.loads((folder / "scheduler" / "scheduler_config.json").read_text())


def _dynamic_mu(config: dict, tokens: int, fallbacks=(256, 4096, 0.5, 1.15)) -> float:
    """diffusers' `calculate_shift` of the token count, typed out: a line through (base_len, base_shift)
    and (max_len, max_shift)."""
    names = ("base_image_seq_len", "max_image_seq_len", "base_shift", "max_shift")
    base_len, max_len, base_shift, max_shift = (config.get(n, f) for n, f in zip(names, fallbacks))
    slope = (max_shift - base_shift) / (max_len - base_len)
    return tokens * slope + base_shift - slope * base_len


@dataclasses.dataclass(frozen=True)
class Family:
    """A family's run: the request (`options(out, **cache)`), its cache contexts, and where its steps and
    the percents fall as ComfyUI's model sampling of that model places them: `point(timestep)` and
    `percent_point(percent, tokens)` (tokens: the first DiT call's video token count, for LTX's shift);
    `latent_arg`: which DiT input holds the latents (Cosmos3 passes its text ids first)."""

    options: object
    branches: tuple[str, ...]
    point: object
    percent_point: object
    latent_arg: int = 0


def _wan(root, request):
    from tests.step_cache.families.test_wan import FRAMES, GUIDANCE, HEIGHT, NEGATIVE, PROMPT, WIDTH, _reference

    _reference(root / "model")
    np.save(root / "latents.npy", torch.randn((1, 16, 2, HEIGHT // 8, WIDTH // 8),
                                              generator=torch.Generator().manual_seed(3)).numpy())
    shift = _scheduler(root / "model")["flow_shift"]
    options = partial(GenerateOptions, model="wan2.1-t2v-1.3b", prompt=PROMPT, negative_prompt=NEGATIVE,
                      weights=str(root / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, guidance=GUIDANCE,
                      latents=root / "latents.npy", steps=STEPS, dtype="float32", compile_cache=False)
    return Family(options, ("cond", "uncond"), _sigma, lambda p, _: _flow(shift, p))


def _wan_a14b(root, request):
    """Wan2.2 A14B (boundary .875): the low-noise expert takes over at step 2 and starts afresh."""
    import diffusers

    from tests.oracle import perturb

    family = _wan(root, request)
    pipe = diffusers.WanPipeline.from_pretrained(root / "model")
    second = diffusers.WanTransformer3DModel.from_config(pipe.transformer.config).eval()
    perturb(second, 70)
    diffusers.WanPipeline(tokenizer=pipe.tokenizer, text_encoder=pipe.text_encoder, vae=pipe.vae,
                          scheduler=pipe.scheduler, transformer=pipe.transformer, transformer_2=second,
                          boundary_ratio=0.875).save_pretrained(root / "model")
    options = partial(family.options, model="wan2.2-t2v-a14b", extra={"guidance_2": 3.0})
    return dataclasses.replace(family, options=options)


def _cogvideox(root, request):
    from tests.cogvideox import pipelines as tiny
    from tests.cogvideox.pipelines import FRAMES, GUIDANCE, HEIGHT, NEGATIVE, PROMPT, WIDTH

    tiny.pipeline(root / "model", "15", scheduler="ddim", seed=4)
    latents = torch.randn((1, 4, 4, HEIGHT // 8, WIDTH // 8), generator=torch.Generator().manual_seed(3))
    np.save(root / "latents.npy", latents.numpy().transpose(0, 2, 1, 3, 4))
    train = _scheduler(root / "model")["num_train_timesteps"]
    options = partial(GenerateOptions, model="cogvideox1.5-5b", prompt=PROMPT, negative_prompt=NEGATIVE,
                      weights=str(root / "model"), height=HEIGHT, width=WIDTH, frames=FRAMES, steps=STEPS,
                      guidance=GUIDANCE, latents=root / "latents.npy", dtype="float32", compile_cache=False,
                      sampler="ddim", extra={"dynamic_cfg": False})
    # ModelSamplingDiscrete: sigma(timestep (1 - percent) * 999), rising with the timestep: compare timesteps
    return Family(options, ("cond_uncond",), lambda t: t, lambda p, _: (1 - p) * (train - 1))


def _ltx_video(root, request):
    from tests.step_cache.references import ltx_video_reference

    ltx_video_reference.saved_pipeline(root)
    config = _scheduler(root / "model")
    return Family(partial(ltx_video_reference.options, root), ("cond_uncond",), _sigma,
                  lambda p, tokens: _flux(_dynamic_mu(config, tokens), p))


def _ltx2(root, request):
    from diffusers import LTX2Pipeline

    from tests.ltx2.references.pipelines import FPS, NEGATIVE, PROMPT, SIZE, components, initial_noise
    from tests.step_cache.families.test_ltx2 import CFG_ONLY

    pipe = LTX2Pipeline(**components(root))
    pipe.save_pretrained(root / "model")
    video, audio = initial_noise(pipe, 0, **SIZE)
    np.save(root / "noise.npy", video)
    np.save(root / "audio_noise.npy", audio)
    config = _scheduler(root / "model")
    options = partial(GenerateOptions, model="ltx-2", prompt=PROMPT, negative_prompt=NEGATIVE,
                      weights=str(root / "model"), steps=STEPS, fps=FPS, latents=root / "noise.npy",
                      compile_cache=False, dtype="float32", **SIZE, extra={"audio_latents": root / "audio_noise.npy", **CFG_ONLY})
    # LTX2Pipeline's own fallbacks for the dynamic shift: 1024 / 4096 tokens, shift 0.95 / 2.05
    return Family(options, ("cond_uncond",), _sigma,
                  lambda p, tokens: _flux(_dynamic_mu(config, tokens, (1024, 4096, 0.95, 2.05)), p))


def _hunyuan_video(root, request):
    from tests.hunyuan_video import pipelines as tiny

    tiny.t2v_pipeline(root, tiny.towers(root))
    np.save(root / "noise.npy", tiny.latents(0))
    shift = _scheduler(root / "model")["shift"]
    options = partial(GenerateOptions, model="hunyuanvideo", prompt=tiny.PROMPT, weights=str(root / "model"),
                      height=tiny.HEIGHT, width=tiny.WIDTH, frames=tiny.FRAMES, steps=STEPS, latents=root / "noise.npy",
                      compile_cache=False, dtype="float32")
    return Family(options, ("cond",), _sigma, lambda p, _: _flow(shift, p))


def _hunyuan_video15(root, request):
    _, folder = request.getfixturevalue("saved")
    np.save(root / "noise.npy", torch.randn(1, 4, 2, 2, 3, generator=torch.Generator().manual_seed(0)).numpy())
    shift = _scheduler(folder)["shift"]
    options = partial(GenerateOptions, model="hunyuanvideo-1.5", prompt="a neon sign above a door", weights=str(folder),
                      height=32, width=48, frames=5, steps=STEPS, latents=root / "noise.npy", compile_cache=False,
                      dtype="float32")
    return Family(options, ("cond", "uncond"), _sigma, lambda p, _: _flow(shift, p))


def _cosmos(root, request):
    from tests.cosmos import reference as ref
    from tests.cosmos.helpers import randn

    ref.build(root)
    np.save(root / "noise.npy", randn(*ref.LATENT_SHAPE, seed=11).numpy())
    config = _scheduler(root / "diffusers")
    low, high = math.log(config["sigma_min"]), math.log(config["sigma_max"])
    options = partial(GenerateOptions, model="cosmos-predict2.5-2b", prompt=ref.PROMPT, weights=str(root / "diffusers"),
                      height=ref.HEIGHT, width=ref.WIDTH, frames=ref.FRAMES, steps=STEPS, latents=root / "noise.npy",
                      dtype="float32", compile_cache=False)
    # ModelSamplingCosmosRFlow: EDM sigma log-linear over the range; a step's EDM sigma is s / (1 - s), capped
    return Family(options, ("cond", "uncond"), lambda t: min(_sigma(t) / (1 - _sigma(t)), config["sigma_max"]),
                  lambda p, _: math.exp(low + (1 - p) * (high - low)))


def _cosmos3(root, request):
    from tests.cosmos3 import test_generate as c3

    c3.build(root, "nano")
    np.save(root / "noise.npy", c3._noise(13))
    shift = _scheduler(root / "model")["flow_shift"]
    options = lambda out, **cache: c3.options("cosmos3-nano", root / "model", root / "noise.npy", out.parent,  # noqa
                                               steps=STEPS, **cache)
    return Family(options, ("cond", "uncond"), _sigma, lambda p, _: _flow(shift, p), latent_arg=2)


FAMILIES = {"wan": _wan, "wan2.2-a14b": _wan_a14b, "cogvideox": _cogvideox, "ltx_video": _ltx_video, "ltx2": _ltx2,
            "hunyuan_video": _hunyuan_video, "hunyuan_video15": _hunyuan_video15, "cosmos": _cosmos,
            "cosmos3": _cosmos3}


@dataclasses.dataclass(frozen=True)
class Case:
    """A family's knobs: the start and end percents and the threshold (step 3 skips, step 4 runs)."""

    start: float
    end: float
    threshold: float
    expected: tuple = tuple(EXPECTED)
    experts: tuple = (0,) * STEPS  # the denoiser of each step


# wan: sigmas .999 .937 .857 .750 .600 .376; start .964, end .5 (shift 3); sums .239, .735
# wan2.2-a14b: the same sigmas, the second expert from step 2 (.857 < .875): steps 2 and 3 run afresh (no rate
# yet), step 4 skips (.099); kept across the switch, step 3 would already decide
# cogvideox: timesteps 999 832 666 499 332 166; start 899.1, end 249.75; sums .144, .414
# ltx_video: sigmas 1 .878 .734 .563 .356 .1 (12 tokens: mu .588); start .911, end .135 (unshifted: .85 and .08,
# another window); sums .159-.165, .477-.494 (the tiny towers differ a little between processes)
# ltx2: sigmas 1 .878 .734 .563 .356 .1; start .911, end .135 (as LTX-Video); sums .247, .742
# hunyuan_video: sigmas 1 .972 .933 .875 .778 .583; start .984, end .7 (shift 7); sums .141-.156, .503-.556 (the
# tiny towers differ a little between processes)
# hunyuan_video15: sigmas 1 .962 .909 .833 .714 .5; start .978, end .625 (shift 5); sums .055, .189
# cosmos: EDM sigmas 199 61.5 15.9 2.88 .295 .0091; start 74.3, end .119 (.01..200); sums .056, .206
# cosmos3: sigmas .999 .98 .952 .909 .833 .667; start .989, end .769 (shift 10); sums .019, .067
CASES = {"wan": Case(0.1, 0.75, 0.5),
         "wan2.2-a14b": Case(0.1, 0.75, 0.5, (True, True, True, True, False, True), (0, 0, 1, 1, 1, 1)),
         "cogvideox": Case(0.1, 0.75, 0.3), "ltx_video": Case(0.15, 0.92, 0.3), "ltx2": Case(0.15, 0.92, 0.5),
         "hunyuan_video": Case(0.1, 0.75, 0.3), "hunyuan_video15": Case(0.1, 0.75, 0.12),
         "cosmos": Case(0.1, 0.75, 0.13), "cosmos3": Case(0.1, 0.75, 0.04)}


# --- recording a cached run's steps, and the family's DiT calls at each ---------------------------------


@dataclasses.dataclass
class Step:
    """A cached run's step: its prediction, its inputs (on the host: the run frees its arrays) and its
    DiT calls made again with the whole DiT while the weights are placed."""

    predict: object
    expert: int
    inputs: tuple  # (latents, timestep, cond, knobs)
    calls: list
    prediction: np.ndarray


def _record_steps(monkeypatch, latent_arg: int) -> list[Step]:
    from vidax.zoo.step_caches import methods as step_cache

    steps, original = [], step_cache.StepCache._easycache

    def recorded(self, denoiser, predict, step, latents, timestep, cond, knobs):
        out, full = original(self, denoiser, predict, step, latents, timestep, cond, knobs)
        calls = _dit_calls(predict, denoiser.dit, latent_arg, _whole_params(denoiser), latents, timestep, cond, knobs)
        host = jax.tree.map(np.asarray, ((latents, timestep, cond, knobs), calls, out))
        steps.append(Step(predict, self.expert, *host))
        return out, full

    monkeypatch.setattr(step_cache.StepCache, "_easycache", recorded)
    return steps


def _whole_params(denoiser):
    """The denoiser's weights as one tree with each block group stacked: a CPU run places its blocks one
    layer at a time (`denoiser.host_blocks`), which `forward` here takes back as the stack."""
    if denoiser.host_blocks is None:
        return denoiser.params
    stacks = {name: jax.tree.map(lambda *layers: np.concatenate([np.asarray(a) for a in layers]), *host.chunks)
              for name, host in denoiser.host_blocks.items()}
    return {**denoiser.params, **stacks}


def _replaced(latents, output):
    """What a DiT call's output replaces in its latents input (written here apart from vidax's): LTX-2's
    video and audio token streams; else the leading part of the input (Wan's or CogVideoX's noisy latents
    before their conditioning channels)."""
    if isinstance(output, tuple):
        return latents.video, latents.audio
    return latents[tuple(slice(0, n) for n in output.shape)]


@partial(jax.jit, static_argnums=(0, 1, 2))
def _dit_calls(predict, dit, latent_arg, params, latents, timestep, cond, knobs):
    """Every DiT call of the step: (the input part its output replaces, the output)."""
    calls = []

    def run(*inputs):
        out = forward(dit, params, *inputs)
        calls.append((_replaced(inputs[latent_arg], out), out))
        return out

    predict(run, latents, timestep, cond, knobs)
    return calls


@partial(jax.jit, static_argnums=(0, 1))
def _with_cached(predict, latent_arg, diffs, latents, timestep, cond, knobs):
    """The step's prediction with call i returning its input part plus `diffs[i]`."""
    calls = iter(diffs)

    def run(*inputs):
        diff = next(calls)
        part = _replaced(inputs[latent_arg], diff)
        return tuple(p + d for p, d in zip(part, diff)) if isinstance(diff, tuple) else part + diff

    return predict(run, latents, timestep, cond, knobs)


def _lead(tree) -> np.ndarray:
    return np.asarray(tree[0] if isinstance(tree, tuple) else tree, np.float64)


def _prompt_sub(x: np.ndarray) -> np.ndarray:
    return x[:1, ..., ::8, ::8]


# --- the rule, by hand ----------------------------------------------------------------------------------


def _by_hand(case: Case, steps: list[Step], phases: list[str], latent_arg: int):
    """(whether each step runs the DiT, the cumulative change at each decision, the expected prediction of
    each skipped step) from the recorded steps' DiT calls."""
    ran, sums, skipped = [], [], {}
    for i, (step, phase) in enumerate(zip(steps, phases)):
        if i == 0 or step.expert != steps[i - 1].expert:  # a second expert: its own node, nothing kept
            x_prev = out_prev = norm = rate = diffs = None
            cumulative = 0.0
        calls = step.calls
        x = _prompt_sub(_lead(calls[0][0]))
        change = None
        if phase == "active" and x_prev is not None:
            change = np.abs(x - x_prev).mean()
            if rate is not None and norm is not None:
                cumulative += rate * change / norm
                sums.append(cumulative)
                if cumulative < case.threshold:
                    ran.append(False)
                    skipped[i] = _with_cached(step.predict, latent_arg, diffs, *step.inputs)
                    continue
                cumulative = 0.0
        ran.append(True)
        if phase == "past_end":
            continue
        diffs = tuple(jax.tree.map(np.subtract, out, part) for part, out in calls)
        if phase == "active":
            out = _lead(calls[0][1])
            if out_prev is not None and change is not None:
                rate = np.abs(_prompt_sub(out) - out_prev).mean() / change
            x_prev, out_prev, norm = x, _prompt_sub(out), np.abs(out[:1]).mean()
    return ran, sums, skipped


# --- the test -------------------------------------------------------------------------------------------


from tests.hunyuan_video15.pipelines import saved, towers  # noqa: E402,F401  (HunyuanVideo-1.5's module fixtures)


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"easycache_{request.param}")
    return request.param, root, FAMILIES[request.param](root, request)


def test_easycache_takes_the_rule_by_hand(family, monkeypatch):
    name, root, spec = family
    case = CASES[name]
    steps = _record_steps(monkeypatch, spec.latent_arg)
    out = root / "out" / "v.npy"
    out.parent.mkdir(exist_ok=True)
    generate(spec.options(out=out, cache="easycache", cache_threshold=case.threshold,
                          cache_start_percent=case.start, cache_end_percent=case.end))
    log = json.loads(out.with_suffix(".json").read_text())["step_cache_steps"]
    timesteps = [float(np.float32(step.inputs[1])) for step in steps]
    tokens = _lead(steps[0].calls[0][0]).shape[1]
    start, end = (spec.percent_point(p, tokens) for p in (case.start, case.end))
    phases = ["past_end" if not spec.point(t) > end else "active" if spec.point(t) <= start else "before"
              for t in timesteps]
    print(name, "points", [spec.point(t) for t in timesteps], "start", start, "end", end)
    assert phases == PHASES
    ran, sums, skipped = _by_hand(case, steps, phases, spec.latent_arg)
    print(name, "sums", sums)
    assert all(abs(total - case.threshold) > 0.01 * case.threshold for total in sums), sums
    assert [step.expert for step in steps] == list(case.experts)
    assert ran == list(case.expected), sums
    assert [entry["full_dit"] for entry in log] == [{branch: full for branch in spec.branches} for full in ran]
    for i, expected in skipped.items():
        np.testing.assert_allclose(steps[i].prediction, np.asarray(expected), atol=PREDICTION_ATOL, rtol=0)


def test_percent_points_by_hand():
    """The mappings at their edges and one value each: flow (shift 3 at .15: 3 * .85 / 2.7 = .944444; a
    dynamic mu enters as e^mu), Cosmos' EDM range (.01..200 at .5: sqrt(.01 * 200) = 1.414214; a step at
    timestep 500 is EDM sigma 1, 1000 the capped 200), CogVideoX's timesteps ((1 - .25) * 999 = 749.25);
    percent 0 holds every step, percent 1 none that has noise left."""
    from vidax.zoo.step_caches.rules import EasyCacheConfig, PercentScale, easycache_phase, percent_point, step_point

    flow, edm, ddpm = PercentScale("flow", 3.0), PercentScale("rflow_edm", sigma_min=0.01, sigma_max=200.0), \
        PercentScale("discrete")
    assert percent_point(flow, 0.15) == pytest.approx(0.9444444444)
    assert percent_point(PercentScale("flow", math.exp(0.5)), 0.3) == pytest.approx(_flux(0.5, 0.3))
    assert percent_point(edm, 0.5) == pytest.approx(math.sqrt(2.0)) and step_point(edm, 500.0) == pytest.approx(1.0)
    assert step_point(edm, 1000.0) == 200.0
    assert percent_point(ddpm, 0.25) == pytest.approx(749.25) and step_point(ddpm, 749.0) == 749.0
    assert [percent_point(scale, 0.0) > step_point(scale, 1000.0) for scale in (edm, ddpm)] == [True, True]
    assert [percent_point(scale, 1.0) < step_point(scale, 1.0) for scale in (edm, ddpm)] == [True, True]
    config = EasyCacheConfig(start_percent=0.25, end_percent=0.75)  # CogVideoX: active at 749.25 down to > 249.75
    assert [easycache_phase(config, t, ddpm) for t in (999.0, 749.0, 250.0, 249.0)] == [
        "before", "active", "active", "past_end"]
