"""A CPU run of a `vidax-convert` folder keeps the DiT's blocks as the folder's file pages
(`layouts.blocks_stay_in_files`), so the planner counts two of them, not all, against the host's memory; anything
that copies the blocks (a cast, a LoRA merged, 8-bit weights, a DiT file beside the folder, weights that are not a
converted folder) counts them all."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from vidax.cli.convert import app as convert_app
from vidax.zoo.compute import planner, runtime
from vidax.zoo.errors import PipelineError
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.plan.layouts import blocks_stay_in_files, choose_layout, plan_layouts
from vidax.zoo.registry import make_pipeline

SIZE = dict(height=16, width=16, frames=1)  # a small video: the DiT's weights outweigh its activations


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("paged") / "wan-tiny"
    result = CliRunner().invoke(convert_app, ["wan-tiny", "--synthetic", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _request(folder, **change):
    weights = None if folder is None else str(folder)
    options = GenerateOptions(model="wan-tiny", prompt="", weights=weights, **SIZE, **change)
    return make_pipeline("wan-tiny", options), options


def test_only_a_converted_folder_read_as_it_is_stays_in_files(folder, tmp_path):
    from vidax.translator import load

    assert blocks_stay_in_files(*_request(folder))
    assert not blocks_stay_in_files(*_request(None))  # the embedded model: converted as it is read
    assert not blocks_stay_in_files(*_request(folder, weights_dtype="int8"))
    assert not blocks_stay_in_files(*_request(folder, lora=(str(tmp_path / "style.safetensors"),)))
    (tmp_path / "dit.safetensors").touch()  # only named: the plan reads no weights
    assert not blocks_stay_in_files(*_request(folder, transformer=tmp_path / "dit.safetensors"))
    stored = {leaf.dtype.name for leaf in load(folder / "transformer").values()}
    assert blocks_stay_in_files(*_request(folder, dtype="float32")) == (stored == {"float32"}), stored


def test_a_host_smaller_than_the_dit_runs_it_from_the_folder(folder, monkeypatch):
    """With the host's memory below the DiT's weights but above the rest, the converted folder's run is planned
    resident (its blocks read from the disk as they run) and says so; the same request without the folder, or
    with a LoRA merged into the blocks (copies), is refused before any work."""
    monkeypatch.setattr(runtime, "LAYERED_CPU_BYTES", 0)  # wan-tiny's DiT runs a block at a time, as a large one does
    family = type(make_pipeline("wan-tiny", GenerateOptions(model="wan-tiny", prompt="")))
    whole_job = family.memory_job
    # wan-tiny's VAE and encoder outweigh its DiT; a large model's DiT is its largest stage: only the DiT counted here
    monkeypatch.setattr(family, "memory_job", lambda self, options: dataclasses.replace(
        whole_job(self, options), text_encoder_params=0, vae_params=0, vae_peak_activation_bytes=0))
    pipeline, options = _request(folder)
    plain = plan_layouts(pipeline, options, devices=1, device_bytes=1 << 40)  # not host-is-device: every block counted
    paged = plan_layouts(pipeline, options)
    assert paged.job.blocks_in_files and not plain.job.blocks_in_files
    one = next(row for row in paged.rows if row[0] == planner.Layout())
    need, whole = paged.peak(*one[:2]), plain.peak(*plain.rows[0][:2])
    room = (need + one[1].weights) // 2
    assert need < room < one[1].weights <= whole, (need, room, one[1], whole)
    monkeypatch.setattr(planner, "device_memory_bytes", lambda: (1, room))
    chosen, why = choose_layout(pipeline, options)
    assert (chosen.tp, chosen.sp, chosen.dp, chosen.offload_chunk) == (1, 1, 1, None)
    assert "the DiT's blocks stay the folder's file pages" in why
    for refused in (_request(None), _request(folder, lora=(str(folder / "style.safetensors"),))):
        with pytest.raises(PipelineError, match="does not fit"):
            choose_layout(*refused)
