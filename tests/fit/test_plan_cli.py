"""`vidax-gen --plan` and the planner's layout choice when no mesh flag is given (on wan-tiny)."""

import dataclasses

import pytest
from typer.testing import CliRunner

from vidax.cli.gen import app
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.plan.layouts import choose_layout
from vidax.zoo.compute.planner import Layout, predict
from vidax.zoo.registry import make_pipeline

SIZE = dict(height=64, width=96, frames=9)


@pytest.fixture(scope="module")
def tiny():
    options = GenerateOptions(model="wan-tiny", prompt="", **SIZE)
    return make_pipeline("wan-tiny", options), options


def test_plan_prints_every_layout_and_the_choice():
    result = CliRunner().invoke(app, ["wan-tiny", "--plan", "--devices", "4", "--device-memory", "1",
                                      "--height", "480", "--width", "832", "--frames", "81"])
    assert result.exit_code == 0, result.output
    for layout in ("dp=1 tp=1 sp=1 resident", "dp=1 tp=1 sp=4 resident", "dp=2 tp=2 sp=1 resident"):
        assert layout in result.output
    assert "choice: dp=" in result.output


def test_predicted_dit_weights_are_the_checkpoints_bytes(tiny):
    pipeline, options = tiny
    tree = pipeline.source.load("transformer", "wan/transformer")
    job = pipeline.memory_job(options)
    assert predict(job, Layout()).weights == sum(a.size for a in tree.values()) * job.weight_bytes


def test_flags_given_are_kept(tiny):
    pipeline, options = tiny
    chosen, why = choose_layout(pipeline, dataclasses.replace(options, sp=2))
    assert (chosen.dp, chosen.tp, chosen.sp, chosen.offload_chunk) == (1, 1, 2, None) and why == "as given"


def test_without_flags_the_planner_chooses_and_says_so(tiny):
    pipeline, options = tiny
    chosen, why = choose_layout(pipeline, options)
    assert (chosen.dp, chosen.tp, chosen.sp, chosen.offload_chunk) == (1, 1, 1, None)
    assert "chosen by the memory planner" in why


def test_nothing_fits_is_one_clear_error(tiny, monkeypatch):
    pipeline, options = tiny
    monkeypatch.setattr("vidax.zoo.compute.planner.device_memory_bytes", lambda: (1, 1024))
    with pytest.raises(PipelineError) as refused:
        choose_layout(pipeline, options)
    prediction = planner_prediction(pipeline, options)
    stage = max({"the text encoder": prediction.text_encoder, "the DiT step": prediction.denoise_peak,
                 "the VAE decode": prediction.vae}.items(), key=lambda item: item[1])[0]
    assert str(refused.value) == (f"wan-tiny at this size does not fit: {stage} needs about "
                                  f"{prediction.total / 2**30:.1f} GiB per device even with dp=1 tp=1 sp=1 resident; "
                                  f"1 device(s) have 0.0 GiB of host memory (see --plan; nothing was loaded)")


def planner_prediction(pipeline, options):
    from vidax.zoo.compute.planner import Layout, predict

    return predict(pipeline.memory_job(options), Layout(1, 1, 1, None))


def test_plan_works_offline_for_every_registered_model(tmp_path, monkeypatch):
    """`vidax-gen MODEL --plan` before any download: an empty Hugging Face cache, the Hub offline; the
    sizes come from the registry's `config` tables (the shipped config.json entries)."""
    from vidax.zoo.registry import registered_models

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    names = sorted(registered_models())
    assert len(names) >= 10
    for name in names:
        result = CliRunner().invoke(app, [name, "--plan", "--devices", "4", "--device-memory", "30.75"])
        assert result.exit_code == 0, f"{name}: {result.output}"
        assert "choice: " in result.output or "does not fit: " in result.output, f"{name}: {result.output}"


@pytest.mark.parametrize("sampler, cls", [("euler", "FlowEuler"), ("unipc", "UniPC"), ("dpm++", "DPMSolverPP")])
def test_sampler_flag_picks_the_stepper(tiny, sampler, cls):
    """`--sampler` replaces the folder's scheduler class and keeps the shift; unknown names list the valid ones."""
    pipeline, options = tiny
    s = pipeline.resolve_settings(dataclasses.replace(options, sampler=sampler))
    stepper = pipeline.stepper(s, pipeline.latent_shape(s))
    assert type(stepper).__name__ == cls and stepper.num_steps == s.steps
    with pytest.raises(PipelineError, match=r"unknown sampler 'ddim'.*euler, unipc, dpm\+\+"):
        pipeline.resolve_settings(dataclasses.replace(options, sampler="ddim"))
