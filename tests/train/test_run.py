"""`vidax-train lora` end to end on the embedded wan-tiny (issue 49, items 1 and 2): a folder of two images and
a clip with captions, encoded once and cached; the command's one-line errors; a run resumed from its checkpoint
ends bit for bit where the uninterrupted run ends; dp x tp x sp on fake CPU devices equals one device."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from flax import traverse_util
from typer.testing import CliRunner

from tests.train.tiny import rel
from vidax.cli.train import app
from vidax.train import data
from vidax.train.lora import init_lora
from vidax.train.objective import loss_and_grad, step_noise
from vidax.train.run import TrainOptions, batch_arrays, checkpoint_path, mesh_context, prepare, step_key, train_lora
from vidax.translator.formats.safetensors_io import SafetensorsFile

SIZE = dict(height=32, width=32, frames=5)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from PIL import Image

    from vidax.zoo.video_io import write_mp4

    root = tmp_path_factory.mktemp("clips")
    rng = np.random.default_rng(0)
    for i, caption in enumerate(["a red circle moves left on a blue background", "a white square moves up"]):
        Image.fromarray(rng.integers(0, 255, (40, 48, 3), dtype=np.uint8)).save(root / f"image{i}.png")
        (root / f"image{i}.txt").write_text(caption)
    write_mp4(root / "clip.mp4", rng.random((9, 32, 40, 3)).astype(np.float32), 16)
    (root / "clip.txt").write_text("a green triangle moves right on a black background")
    return root


def options(folder, out, **kw) -> TrainOptions:
    base = dict(model="wan-tiny", data=folder, out=out, rank=4, steps=4, batch=2, lr=1e-3, dtype="float32", **SIZE)
    return TrainOptions(**{**base, **kw})


def tensors(path) -> dict:
    file = SafetensorsFile(path)
    return {k: np.array(file.array(k)) for k in file.tensors}


def test_cli_trains_and_writes_a_comfy_lora(folder, tmp_path):
    out = tmp_path / "style.safetensors"
    result = CliRunner().invoke(app, ["lora", "wan-tiny", "--data", str(folder), "--out", str(out), "--rank", "4",
                                      "--steps", "2", "--batch", "2", "--height", "32", "--width", "32", "--frames", "5",
                                      "--format", "comfy", "--alpha", "2", "--targets", "to_q,ffn.net.2"])
    assert result.exit_code == 0, result.output
    got = tensors(out)
    assert sorted({k.split(".", 3)[3].rsplit(".", 2)[0] for k in got if k.endswith("lora_down.weight")}) == \
        ["cross_attn.q", "ffn.2", "self_attn.q"]
    assert all(float(v) == 2.0 for k, v in got.items() if k.endswith(".alpha"))
    assert np.abs(got["diffusion_model.blocks.0.self_attn.q.lora_up.weight"]).max() > 0  # B moved off zero


@pytest.mark.parametrize("args, message", [
    (["--data", "missing"], "not a folder"),
    (["--rank", "0"], "--rank must be at least 1"),
    (["--format", "kohya"], "--format must be one of peft, comfy"),
    (["--targets", "to_x"], "--targets to_x name no layer"),
    (["--batch", "3", "--dp", "2"], "multiple of --dp"),
])
def test_bad_requests_are_one_line(folder, tmp_path, args, message):
    argv = ["lora", "wan-tiny", "--data", str(folder), "--out", str(tmp_path / "x.safetensors"), "--steps", "1",
            "--height", "32", "--width", "32", "--frames", "5", *args]
    if args[0] == "--data":
        argv[3] = str(tmp_path / "missing")
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.safetensors").exists()


def test_encodings_are_cached_by_content_and_settings(folder, tmp_path):
    samples = data.plan_samples(data.find_items([folder]), data.Framing(**SIZE))
    calls = []

    def encode(sample, pixels):
        calls.append(pixels.shape)
        return {"latents": np.zeros((1, 4, 1 + (pixels.shape[2] - 1) // 4, 4, 4), np.float32),
                "text": np.zeros((1, 3, 8), np.float32)}

    settings = {"model": "m"}
    first = data.encode_samples(samples, settings, tmp_path, encode)
    assert [c[2] for c in calls] == [5, 1, 1]  # the clip's first 5 frames (it has 9), one frame per image
    assert [e.latents.shape[1] for e in first] == [2, 1, 1]
    data.encode_samples(samples, settings, tmp_path, encode)
    assert len(calls) == 3  # a rerun encodes nothing
    data.encode_samples(samples, {**settings, "weights": "other"}, tmp_path, encode)
    assert len(calls) == 6  # other settings encode everything again
    smaller = data.plan_samples(data.find_items([folder]), data.Framing(16, 16, 5))
    data.encode_samples(smaller, settings, tmp_path, encode)
    assert len(calls) == 9  # and so does another size


def test_resume_continues_bit_for_bit(folder, tmp_path):
    straight = options(folder, tmp_path / "a.safetensors", checkpoint_every=2)
    prep = prepare(straight)
    train_lora(straight, prep=prep)
    half = options(folder, tmp_path / "b.safetensors", steps=2)
    train_lora(half, prep=prep)
    two = tensors(half.out)
    resumed = dataclasses.replace(half, steps=4, resume=checkpoint_path(half.out))
    train_lora(resumed, prep=prep)
    a, b = tensors(straight.out), tensors(resumed.out)
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not all(np.array_equal(a[k], two[k]) for k in a)  # the last two steps did move the LoRA
    other = dataclasses.replace(resumed, lr=1e-2)
    with pytest.raises(ValueError, match="made with other settings"):
        train_lora(other, prep=prep)


def first_step(opts, prep, lora):
    """Step 0's loss and LoRA gradients as `train_lora` computes them, on the options' mesh."""
    batch = batch_arrays(prep, opts, 0)
    d = prep.denoisers[0]
    noise, sigmas = step_noise(step_key(opts.seed, 0), batch["latents"].shape, d.objective)
    with mesh_context(prep):
        return jax.jit(loss_and_grad, static_argnums=(0, 1, 2))(d.model, d.inputs, d.objective, d.base, lora, batch,
                                                                 noise, sigmas)


def test_a_mesh_equals_one_device(folder, tmp_path):
    """dp 2 x tp 2 x sp 2 on the 8 fake CPU devices: the loss and every LoRA gradient of a step as on one device
    (the loss within 1e-5, the gradients within 3e-5 of each tensor's norm), and a whole run's losses too. The LoRA
    after AdamW steps is not compared entry by entry: Adam divides each gradient entry by its own magnitude, so an
    entry whose gradient is near zero turns the reductions' fp32 rounding (another order on 8 devices) into a
    visible change."""
    assert len(jax.devices()) >= 8
    one = options(folder, tmp_path / "one.safetensors", steps=2)
    mesh = options(folder, tmp_path / "mesh.safetensors", steps=2, dp=2, tp=2, sp=2)
    preps = {opts.dp: prepare(opts) for opts in (one, mesh)}
    lora = init_lora(jax.random.key(3), preps[1].denoisers[0].base["blocks"], one.lora_config(preps[1].family))
    keys = iter(jax.random.split(jax.random.key(4), len(lora)))
    lora = {m: {"A": p["A"], "B": 0.05 * jax.random.normal(next(keys), p["B"].shape)} for m, p in lora.items()}
    loss, grads = first_step(one, preps[1], lora)
    mesh_loss, mesh_grads = first_step(mesh, preps[2], lora)
    assert rel(mesh_loss, loss) < 1e-5
    # 3e-5: each LoRA gradient is a sum over every token of products of small terms that largely cancel (A's is
    # x^T (dy B^T)), which 8 devices add in another order; the 20 tensors measured 2e-6 to 1.03e-5 of their norms
    # (a missing or doubled reduction is off by O(1)). The loss agrees to 3e-7.
    for module in grads:
        for role in ("A", "B"):
            assert rel(mesh_grads[module][role], grads[module][role]) < 3e-5, (module, role)
    losses = {}
    for opts in (one, mesh):
        seen = losses.setdefault(opts.dp, [])
        train_lora(opts, lambda step, total, value, rate, seen=seen: seen.append(value), prep=preps[opts.dp])
    assert rel(losses[2], losses[1]) < 1e-5


def test_help_names_the_issue_flags():
    """The command's shape is the issue's, so that scripts can rely on it (help prints whole: no markup trap)."""
    result = CliRunner().invoke(app, ["lora", "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0, result.output
    for flag in ("--weights", "--data", "--out", "--rank", "--alpha", "--steps", "--lr", "--batch", "--seed", "--height",
                 "--width", "--frames", "--format", "--targets", "--resume", "--tp", "--sp", "--dp"):
        assert flag in result.output, flag


@pytest.mark.parametrize("model, message", [
    ("cosmos-predict2.5-2b", "vidax-train lora trains Wan 2.1 / 2.2, HunyuanVideo-1.5, LTX-2 and CogVideoX"),
    ("ltx-video-2b", "not ltx_video models"),
    ("wan2.1-vace-1.3b", "does not train VACE models yet"),
])
def test_models_it_cannot_train_are_refused_before_any_work(folder, tmp_path, model, message):
    """From the registry's configs alone (nothing downloaded): other families, Wan's VACE models."""
    result = CliRunner().invoke(app, ["lora", model, "--data", str(folder), "--out", str(tmp_path / "x.safetensors")])
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output, result.output


def test_a_bf16_base_trains_an_fp32_lora(folder, tmp_path):
    """--dtype bfloat16: the frozen base in bf16, the LoRA and AdamW's moments in fp32; the first loss (the LoRA's
    B is zero: the base model's) near the fp32 base's (bf16 weights and activations: 1e-2)."""
    losses = {}
    for dtype in ("float32", "bfloat16"):
        opts = options(folder, tmp_path / f"{dtype}.safetensors", steps=1, dtype=dtype)
        prep = prepare(opts)
        kernels = {leaf.dtype for path, leaf in traverse_util.flatten_dict(prep.denoisers[0].base, sep="/").items()
                   if path.startswith("blocks/") and path.endswith("/kernel")}
        assert kernels == {np.dtype(dtype)}
        seen = losses.setdefault(dtype, [])
        train_lora(opts, lambda step, total, value, rate, seen=seen: seen.append(value), prep=prep)
        with np.load(checkpoint_path(opts.out)) as saved:
            assert {saved[k].dtype for k in saved.files if k.startswith("leaf_") and saved[k].ndim} == {np.dtype("float32")}
    assert abs(losses["bfloat16"][0] - losses["float32"][0]) < 1e-2 * losses["float32"][0]


def test_validation_at_fixed_noise_the_loss_plot_and_samples(folder, tmp_path):
    """`--validation` scored every K steps at fixed noise levels and noise (the same numbers for the same LoRA,
    others once it moved), logged beside the training loss in `losses.jsonl`, drawn in `loss.png`; a sample video
    per `--sample-prompts` line."""
    from PIL import Image

    from vidax.train.monitor import read_log, validation_loss
    from vidax.train.run import fresh_states, run_folder
    from vidax.train.objective import AdamW

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("a red circle moves left on a blue background\n")
    opts = options(folder, tmp_path / "v.safetensors", steps=4, validation=folder, validation_every=2,
                   sample_prompts=prompts, sample_every=4, sample_steps=2)
    prep = prepare(opts)
    lines = []
    train_lora(opts, prep=prep, report=lines.append)
    runs = run_folder(opts.out)
    log = read_log(runs)
    assert [e["step"] for e in log if "loss" in e] == [1, 2, 3, 4]
    scored = [e for e in log if "validation" in e]
    assert [e["step"] for e in scored] == [2, 4] and scored[0]["validation"] != scored[1]["validation"]
    assert set(scored[0]["per_sigma"]) == {"0.1", "0.3", "0.5", "0.7", "0.9"}
    states = fresh_states(prep, opts.lora_config(prep.family), opts.seed, AdamW())
    assert validation_loss(prep, states, opts) == validation_loss(prep, states, opts)  # fixed noise and levels
    with Image.open(runs / "loss.png") as plot:
        assert plot.format == "PNG" and plot.size == (960, 540)
    assert (runs / "samples" / "step000004_0.mp4").is_file()
    assert any("validation loss" in line for line in lines) and any("sample" in line for line in lines)


def test_help_fits_80_columns_in_panels():
    from tests.cli.test_help import DESCRIPTION_BY, description_columns

    result = CliRunner().invoke(app, ["lora", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80
    starts = description_columns(result.output)
    assert len(starts) > 20 and max(starts.values()) <= DESCRIPTION_BY, starts  # no description squeezed
    for panel in ("Model and inputs", "Data", "LoRA", "Optimiser", "Validation and samples", "Output",
                  "Layout and memory"):
        assert panel in result.output, panel
