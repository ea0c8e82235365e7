"""The streams of a DiT block's hidden state that step caches read and replace: the array itself, or a joint
state's video field (HunyuanVideo's and LTX-2's `video`, Cosmos3's `gen`) and LTX-2's `audio`. The lowest
module of the room: the cache methods, TeaCache and the streamed runs all use it."""

from __future__ import annotations

from typing import Any

import jax

from vidax.zoo.errors import PipelineError


# the video tokens' field in a joint hidden state: HunyuanVideo's and LTX-2's `video`, Cosmos3's `gen`
VIDEO_STREAMS = ("video", "gen")


def video_field(hidden: Any) -> str:
    field = next((name for name in VIDEO_STREAMS if hasattr(hidden, name)), None)
    if field is None:  # e.g. LTX-Video's (hidden, block index) under STG
        raise PipelineError("this --cache reads the DiT's video tokens between blocks: this run's hidden state "
                            f"({type(hidden).__name__}) is not one (use --cache taylorseer)")
    return field


def video_stream(hidden: Any) -> jax.Array:
    """The video token stream of a block's hidden state (an array, or a joint state's video field)."""
    return hidden if isinstance(hidden, jax.Array) else getattr(hidden, video_field(hidden))


def with_video_stream(hidden: Any, video: jax.Array) -> Any:
    return video if isinstance(hidden, jax.Array) else hidden.replace(**{video_field(hidden): video})


def output_streams(hidden: Any) -> dict[str, jax.Array]:
    """The streams of a block's hidden state that become the DiT's outputs (MagCache's residuals): the
    array, or the video field and, where the DiT returns it as well, LTX-2's `audio`."""
    if isinstance(hidden, jax.Array):
        return {"": hidden}
    fields = (video_field(hidden),) + (("audio",) if hasattr(hidden, "audio") else ())
    return {field: getattr(hidden, field) for field in fields}


def with_streams(hidden: Any, streams: dict[str, jax.Array]) -> Any:
    return streams[""] if isinstance(hidden, jax.Array) else hidden.replace(**streams)
