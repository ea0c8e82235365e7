"""LTX-Video latent upsampler (follows diffusers `LTXLatentUpsamplerModel`, the official `LatentUpsampler`).

The 0.9.7 / 0.9.8 multi-scale pipeline generates at 2/3 size, upsamples the (un-normalised) latents
x2 in space with this network, and refines at full size. The network and its layers are the ones LTX-2
ships too (`vidax.zoo.parts.latent_upsampler`); LTX-Video's head is always the conv + pixel shuffle one.
"""

from __future__ import annotations

from vidax.zoo.parts.latent_upsampler import LatentUpsamplerModel


class LTXLatentUpsampler(LatentUpsamplerModel):
    """Upsample un-normalised latents `[B, C, F, H, W]` (x2 in space for the released 0.9.7 / 0.9.8 model).

    Args:
      cfg: `UpsamplerConfig.from_hf_config(config_json)` (or `from_official_config`).
      dtype: activation dtype (GroupNorm statistics in fp32).
    """
