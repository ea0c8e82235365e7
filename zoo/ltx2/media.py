"""LTX-2 image conditioning: the H.264 re-compression the models were trained with.

LTX-2.x image-to-video re-encodes the conditioning frame as a one-frame H.264 video (libx264,
`veryfast`, the given CRF, yuv420p) and decodes it again before resizing, so that the first frame
carries the compression artefacts of the training videos (ltx-pipelines `media_io.preprocess`,
diffusers `apply_image_conditioning_crf`). The CRF is 18 for LTX-2.4+ (Gemma 4 text tower) and 33
before; 0 skips it. LTX-Video 0.9.x does the same with its own CRF: a candidate for `zoo/video_io`
once a second family uses it.
"""

from __future__ import annotations

from io import BytesIO

import numpy as np

CRF_GEMMA4 = 18  # ltx_pipelines LTX_2_4_IMAGE_CRF (LTX-2.4 = 2.5 and later)
CRF_BEFORE = 33  # ltx_pipelines DEFAULT_IMAGE_CRF (LTX-2.0 - 2.3)


def default_crf(text_model_type: str | None) -> int:
    """diffusers `resolve_default_image_crf`: 18 with a Gemma 4 text tower, 33 otherwise."""
    return CRF_GEMMA4 if text_model_type in ("gemma4_unified", "gemma4") else CRF_BEFORE


def recompress_image(image: np.ndarray, crf: int) -> np.ndarray:
    """An RGB uint8 `[H, W, 3]` image through one H.264 frame at `crf` (cropped to even sides), as
    diffusers' `apply_image_conditioning_crf` (same encoder, preset and pixel format)."""
    if crf == 0:
        return image
    import av

    image = np.ascontiguousarray(image[: image.shape[0] // 2 * 2, : image.shape[1] // 2 * 2])
    with BytesIO() as buffer:
        container = av.open(buffer, "w", format="mp4")
        try:
            stream = container.add_stream("libx264", rate=1, options={"crf": str(crf), "preset": "veryfast"})
            stream.height, stream.width = image.shape[:2]
            frame = av.VideoFrame.from_ndarray(image, format="rgb24").reformat(format="yuv420p")
            container.mux(stream.encode(frame))
            container.mux(stream.encode())
        finally:
            container.close()
        data = buffer.getvalue()
    with BytesIO(data) as buffer:
        container = av.open(buffer)
        try:
            stream = next(s for s in container.streams if s.type == "video")
            decoded = next(container.decode(stream))
        finally:
            container.close()
        return decoded.to_ndarray(format="rgb24")
