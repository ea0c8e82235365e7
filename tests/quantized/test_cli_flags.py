"""`--transformer` / `--transformer-2` on both CLIs: parsed into the options, bad files one line, nothing written."""

from __future__ import annotations

from typer.testing import CliRunner

from vidax.cli.convert import app as convert_app
from vidax.cli.gen import app as gen_app


def _one_line_error(result, fragment: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0], result.output


def test_vidax_gen_refuses_a_missing_file_and_a_second_expert_the_model_lacks(tmp_path):
    out = str(tmp_path / "v.mp4")
    _one_line_error(CliRunner().invoke(gen_app, ["wan-tiny", "--prompt", "x", "--out", out, "--transformer",
                                                 str(tmp_path / "missing.gguf")]), "--transformer")
    (tmp_path / "dit.gguf").write_bytes(b"")
    _one_line_error(CliRunner().invoke(gen_app, ["wan-tiny", "--prompt", "x", "--out", out, "--transformer-2",
                                                 str(tmp_path / "dit.gguf")]), "has no transformer_2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dit.gguf"]


def test_vidax_convert_refuses_a_missing_file(tmp_path):
    result = CliRunner().invoke(convert_app, ["wan2.1-t2v-1.3b", "--transformer", str(tmp_path / "missing.gguf"),
                                              "--out", str(tmp_path / "out")])
    _one_line_error(result, "--transformer")
    assert "no such file" in result.output and not (tmp_path / "out").exists()


def test_vidax_gen_weights_dtype_is_parsed_and_checked(tmp_path):
    out = str(tmp_path / "v.mp4")
    _one_line_error(CliRunner().invoke(gen_app, ["wan-tiny", "--prompt", "x", "--out", out, "--weights-dtype", "int4"]),
                    "unknown --weights-dtype 'int4'")
    assert list(tmp_path.iterdir()) == []
