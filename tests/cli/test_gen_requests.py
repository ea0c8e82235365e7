"""`vidax-gen`'s request checks before any work: bad values, an unwritable or full output folder,
`--latents` that is not an array, `--variant`; and `--plan` (stdout, the size it planned for, the layout
flags honoured or refused, a non-zero exit when nothing fits, idle devices said).

Checks that must come before any work replace `make_pipeline` with a function that fails the test:
the request is refused before a model is even looked at.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vidax.cli.gen import app

PROMPT = "a red kite over a grey sea"


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _one_line_error(result, fragment: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output  # no traceback
    assert lines[0].startswith("error:") and fragment in lines[0], lines[0]


@pytest.fixture
def no_work(monkeypatch):
    """Any model work fails the test: the checks must refuse the request first."""
    def started(*args, **kwargs):
        raise AssertionError("work started before the request was refused")

    monkeypatch.setattr("vidax.zoo.registry.make_pipeline", started)


@pytest.mark.parametrize("flags, fragment", [
    (("--seed", "-1"), "--seed must be an integer from 0 to 18446744073709551615, got -1"),
    (("--seed", str(2**64)), "--seed must be an integer"),
    (("--fps", "nan"), "--fps must be a finite number, got nan"),
    (("--fps", "0"), "--fps must be positive, got 0"),
    (("--guidance", "nan"), "--guidance must be a finite number, got nan"),
    (("--shift", "-inf"), "--shift must be a finite number, got -inf"),
    (("--guidance-2", "inf"), "--guidance-2 must be a finite number, got inf"),  # a family's own float flag
    (("--tp", "0"), "--tp must be a positive integer, got 0"),
    (("--dp", "-2"), "--dp must be a positive integer, got -2"),
])
def test_bad_values_are_one_line_before_any_work(tmp_path, no_work, flags, fragment):
    _one_line_error(_invoke("wan-tiny", "--prompt", PROMPT, "--out", str(tmp_path / "v.mp4"), *flags), fragment)
    assert list(tmp_path.iterdir()) == []


def test_the_options_check_is_the_librarys():
    """One validator: building `GenerateOptions` (as vidax-gen and the server do) runs it."""
    from vidax.zoo.generator.options import GenerateOptions
    from vidax.zoo.errors import PipelineError

    with pytest.raises(PipelineError, match="--guidance must be a finite number"):
        GenerateOptions(model="wan-tiny", prompt="", guidance=float("nan"))
    with pytest.raises(PipelineError, match="--stg must be a finite number"):
        GenerateOptions(model="ltx-video-2b", prompt="", extra={"stg": float("inf")})
    with pytest.raises(PipelineError, match="--seed must be an integer"):
        GenerateOptions(model="wan-tiny", prompt="", seed=True)


def test_an_unwritable_out_folder_is_refused_before_any_work(tmp_path, no_work):
    if os.geteuid() == 0:  # root writes through permissions: a pseudo filesystem refuses new files even to root
        folder = "/sys/vidax-out"
    else:
        folder = str(tmp_path / "read-only")
        os.mkdir(folder, 0o555)
    _one_line_error(_invoke("wan-tiny", "--prompt", PROMPT, "--out", f"{folder}/v.mp4"), f"cannot write in")


def test_an_out_path_that_is_a_folder_is_refused(tmp_path, no_work):
    (tmp_path / "v.mp4").mkdir()
    _one_line_error(_invoke("wan-tiny", "--prompt", PROMPT, "--out", str(tmp_path / "v.mp4")), "is a folder")


def test_a_disk_without_room_for_the_output_is_refused_before_sampling(tmp_path, monkeypatch):
    import shutil

    from vidax.zoo.generator.contract import Family

    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr("vidax.zoo.video_io.shutil.disk_usage", lambda path: usage._replace(free=64 << 10))
    monkeypatch.setattr(Family, "sample", lambda *a, **k: pytest.fail("sampling started"))
    out = tmp_path / "v.npy"
    result = _invoke("wan-tiny", "--prompt", PROMPT, "--out", str(out), "--height", "480", "--width", "832", "--frames",
                     "9", "--fps", "16")
    _one_line_error(result, f"{out}: {tmp_path} has 0.1 MiB free, this output needs about 42.5 MiB")  # 9 float32 frames 480x832
    assert list(tmp_path.iterdir()) == []


def test_latents_that_are_not_an_array_are_one_clear_line(tmp_path):
    (tmp_path / "notes.npy").write_text("these are not latents\n")
    result = _invoke("wan-tiny", "--prompt", PROMPT, "--out", str(tmp_path / "v.mp4"), "--latents",
                     str(tmp_path / "notes.npy"))
    _one_line_error(result, "notes.npy: not a .npy file of numbers (write the latents with numpy.save")
    assert "allow_pickle" not in result.output


def test_variant_as_the_readme_and_list_write_it():
    """`vidax-gen hunyuanvideo-1.5 --variant 480p_t2v` (README, --list): the variant's own size and shift."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "`hunyuanvideo-1.5 --variant 480p_t2v`" in readme
    sizes = {}
    for variant in ("480p_t2v", "720p_t2v"):
        result = _invoke("hunyuanvideo-1.5", "--variant", variant, "--plan", "--devices", "4", "--device-memory", "80")
        assert result.exit_code == 0, result.output
        sizes[variant] = result.stdout.split(" at ", 1)[1].split(":", 1)[0]
    assert sizes == {"480p_t2v": "848x480, 121 frames", "720p_t2v": "1280x720, 121 frames"}
    _one_line_error(_invoke("hunyuanvideo-1.5", "--variant", "480p_t2x", "--plan"), "did you mean 480p_t2v")
    _one_line_error(_invoke("wan-tiny", "--variant", "480p_t2v", "--plan"), "model wan-tiny has no variants")


def test_variant_against_a_converted_folder_of_another(tmp_path):
    (tmp_path / "vidax_model.json").write_text(json.dumps({"model": "hunyuanvideo-1.5", "variant": "720p_i2v"}))
    result = _invoke("hunyuanvideo-1.5", "--variant", "480p_t2v", "--weights", str(tmp_path), "--plan")
    _one_line_error(result, "converted as hunyuanvideo-1.5's variant 720p_i2v, not --variant 480p_t2v")


PLAN = ("wan-tiny", "--plan", "--height", "480", "--width", "832", "--frames", "81")


def test_plan_prints_its_table_to_stdout_and_names_the_size():
    result = _invoke(*PLAN, "--devices", "2", "--device-memory", "1")
    assert result.exit_code == 0, result.output
    assert "wan-tiny at 832x480, 81 frames: GiB per device on 2 x 1.0 GiB" in result.stdout
    assert "dp=1 tp=2 sp=1 resident" in result.stdout and "choice: " in result.stdout
    assert result.stderr == ""


def test_plan_honours_the_layout_flags_or_refuses_them():
    given = _invoke(*PLAN, "--devices", "4", "--device-memory", "1", "--sp", "2")
    assert given.exit_code == 0, given.output
    rows = [line for line in given.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 1 and "dp=1 tp=1 sp=2 resident" in rows[0], given.stdout
    assert "choice: dp=1 tp=1 sp=2 resident" in given.stdout
    assert "2 of the 4 devices would stay idle: the layout given uses 2" in given.stdout
    _one_line_error(_invoke(*PLAN, "--devices", "4", "--tp", "3"), "attention heads cannot be split over tp=3")
    _one_line_error(_invoke(*PLAN, "--devices", "2", "--tp", "2", "--dp", "2"), "= 4 devices; the plan is for 2")


def test_plan_says_which_devices_stay_idle():
    result = _invoke(*PLAN, "--devices", "3", "--device-memory", "1")
    assert result.exit_code == 0, result.output
    assert "1 of the 3 devices would stay idle: layouts use at most 2" in result.stdout


def test_plan_exits_non_zero_when_nothing_fits():
    result = _invoke(*PLAN, "--devices", "1", "--device-memory", "0.001")
    assert result.exit_code == 1, result.output
    assert "dp=1 tp=1 sp=1 resident" in result.stdout and "choice:" not in result.stdout
    assert result.stderr.startswith("error: wan-tiny at this size does not fit: "), result.stderr
    assert "GiB per device even with dp=1 tp=1 sp=1" in result.stderr and "1 device(s) have 0.0 GiB" in result.stderr


@pytest.mark.parametrize("flags, fragment", [
    (("--device-memory", "inf"), "--device-memory must be a finite number, got inf"),
    (("--device-memory", "nan"), "--device-memory must be a finite number, got nan"),
    (("--devices", "0"), "--devices must be a positive integer, got 0"),
])
def test_plan_flags_are_checked(flags, fragment):
    _one_line_error(_invoke(*PLAN, *flags), fragment)
