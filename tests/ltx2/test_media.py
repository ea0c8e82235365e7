"""The image re-compression LTX-2 image-to-video applies before encoding, against diffusers'."""

from __future__ import annotations

import numpy as np
import pytest

from vidax.zoo.ltx2.media import default_crf, recompress_image


@pytest.mark.parametrize("crf", [18, 33])
def test_recompression_matches_diffusers(crf):
    from diffusers.pipelines.ltx2.pipeline_ltx2_image2video import apply_image_conditioning_crf

    rng = np.random.default_rng(crf)
    image = rng.integers(0, 256, (33, 66, 3), dtype=np.uint8)  # odd height: cropped to even sides
    ours = recompress_image(image, crf)
    assert ours.shape == (32, 66, 3)
    np.testing.assert_array_equal(ours, apply_image_conditioning_crf(image, crf))
    assert np.abs(ours.astype(int) - image[:32].astype(int)).mean() > 1  # it did compress
    assert recompress_image(image, 0) is image


def test_default_crf_follows_the_text_tower():
    from diffusers.pipelines.ltx2.pipeline_ltx2_image2video import resolve_default_image_crf

    for model_type in ("gemma3", "gemma3_text", "gemma4", "gemma4_unified", None):
        class Config:
            pass

        class Encoder:
            config = Config()

        Encoder.config.model_type = model_type
        assert default_crf(model_type) == resolve_default_image_crf(Encoder())
