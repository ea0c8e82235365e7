"""`--max-sequence-length` (Wan; diffusers' `max_sequence_length`) sets how many UMT5 feature rows the
DiT attends to: the prompt's own, then zeros. `wan-tiny` was trained with 16 (its registry setting),
so its cross-attention is not drowned by 500-odd zero rows. The text path itself is held to diffusers'
`_get_t5_prompt_embeds` at a short length in tests/encoders/test_wan_text.py."""

from __future__ import annotations

import numpy as np
import pytest

from vidax.zoo.generator import generation
from vidax.zoo.generator.options import GenerateOptions
from vidax.zoo.errors import PipelineError
from vidax.zoo.registry import make_pipeline
from vidax.zoo.generator.stages import Run

PROMPT = "a red circle moves left on a blue background"  # 9 words and </s>: 10 tokens


def _text_features(extra: dict) -> np.ndarray:
    options = GenerateOptions(model="wan-tiny", prompt=PROMPT, extra=extra)
    family = make_pipeline("wan-tiny", options)
    request = generation.prepare(family, options)
    return np.asarray(family.encode(Run(family, options), request.settings, request.inputs).text)


@pytest.fixture(scope="module")
def features():
    return {length: _text_features(extra) for length, extra in ((16, {}), (24, {"max_sequence_length": 24}))}


def test_registry_setting_and_flag_set_the_rows(features):
    assert features[16].shape[:2] == (2, 16)  # prompt and negative prompt (guided), the registry's 16 rows
    assert features[24].shape[:2] == (2, 24)


def test_rows_past_the_prompt_are_zero_and_the_prompt_rows_do_not_change(features):
    assert (features[24][0, 10:] == 0).all() and (np.abs(features[24][0, :10]).sum(-1) > 0).all()
    # masked attention never reads the padding: the same features, to fp32 rounding of the longer matmuls
    np.testing.assert_allclose(features[24][:, :16], features[16], rtol=1e-5, atol=1e-5)


def test_a_length_below_one_is_one_line_error():
    with pytest.raises(PipelineError, match="--max-sequence-length must be at least 1"):
        _text_features({"max_sequence_length": 0})
