"""TorchScript archives (`torch.jit.save`: OpenAI's CLIP `.pt`, StyleGAN-V's I3D) read without torch as state dicts."""

from __future__ import annotations

import io
import pickle
import zipfile

import numpy as np
import pytest
import torch

from vidax.translator.errors import FormatError
from vidax.translator.formats.torch_zip import TorchZipFile


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(3, 2)
        self.blocks = torch.nn.Sequential(torch.nn.Conv2d(2, 2, 1), torch.nn.BatchNorm2d(2))
        self.register_buffer("table", torch.arange(4.0))

    def forward(self, x):
        return self.blocks(self.proj(x)[..., None, None]) + self.table.sum()


def test_a_traced_archive_reads_as_its_state_dict(tmp_path):
    net = torch.jit.trace(_Net().eval(), torch.zeros(1, 3))
    net.save(str(tmp_path / "net.pt"))
    archive = TorchZipFile(tmp_path / "net.pt")
    state = torch.jit.load(str(tmp_path / "net.pt")).state_dict()
    assert sorted(archive.tensors) == sorted(state)
    for key, value in state.items():
        np.testing.assert_array_equal(archive.array(key), value.numpy(), err_msg=key)
    assert archive.extras["training"] is False  # the module attributes that are not tensors


def _archive(tmp_path, payload: bytes):
    path = tmp_path / "bad.pt"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("bad/data.pkl", payload)
    return path


def test_a_script_object_with_a_custom_state_is_refused(tmp_path):
    # GLOBAL '__torch__ M', EMPTY_TUPLE, NEWOBJ, then BUILD with a tuple state (what a class with
    # __setstate__ pickles): not a module's attribute dict
    payload = b"\x80\x02c__torch__\nM\n)\x81K\x01K\x02\x86b."
    with pytest.raises(FormatError, match="custom state"):
        TorchZipFile(_archive(tmp_path, payload))


def test_other_globals_are_still_refused(tmp_path):
    payload = pickle.dumps(io.BytesIO, protocol=2)
    with pytest.raises(FormatError, match="not allowed"):
        TorchZipFile(_archive(tmp_path, payload))
