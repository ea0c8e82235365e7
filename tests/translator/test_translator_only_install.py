"""The translator is a package of its own: a fresh virtual environment that installs only `vidax` (no
extras) has no jax, flax, av, tokenizers or pillow, and its `vidax-convert` converts a checkpoint to
the same tree as this environment's translator.

Needs the package index (pip installs the translator's few dependencies); CI has it. No skip: a
broken translator-only install must fail here.
"""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
ZOO_ONLY = ("jax", "flax", "av", "tokenizers", "PIL", "torch")


@pytest.fixture(scope="module")
def translator_venv(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("translator_only") / "venv"
    venv.EnvBuilder(with_pip=True).create(folder)
    python = folder / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
                          capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _tiny_wan_checkpoint(folder: Path) -> None:
    import diffusers

    model = diffusers.WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=8,
                                            in_channels=4, out_channels=4, text_dim=12, freq_dim=16, ffn_dim=24,
                                            num_layers=2, rope_max_seq_len=32)
    model.save_pretrained(folder / "transformer")


def test_translator_installs_and_converts_without_the_zoo(translator_venv, tmp_path):
    python = translator_venv / "bin" / "python"
    probe = "import importlib.util, sys; print(','.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
    found = subprocess.run([str(python), "-c", probe, *ZOO_ONLY], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "", f"the translator-only install pulled in {found.stdout.strip()}"

    _tiny_wan_checkpoint(tmp_path / "model")
    out = tmp_path / "converted"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(translator_venv / "bin" / "vidax-convert"), "wan2.1-t2v-1.3b", "--source",
                           str(tmp_path / "model"), "--components", "transformer", "--dtype", "float32", "--out", str(out)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]

    from vidax.translator import convert, load

    written = load(out / "transformer")
    expected = convert("wan/transformer", tmp_path / "model", dtype="float32")
    assert set(written) == set(expected)
    for path in expected:
        np.testing.assert_array_equal(np.asarray(written[path]), expected[path], err_msg=path)


def test_vidax_gen_says_what_to_install(translator_venv):
    done = subprocess.run([str(translator_venv / "bin" / "vidax-gen"), "wan-tiny", "--prompt", "x"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "pip install 'vidax[zoo]'" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
