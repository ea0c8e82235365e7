"""LTX-2 audio decoding: latents -> mel spectrogram (audio VAE decoder) -> waveform (vocoder).

- `AudioDecoder` follows diffusers `LTX2AudioDecoder` (inside `AutoencoderKLLTX2Audio`): causal 2-D
  convolutions over (time, mel), pixel RMS norms, nearest 2x upsampling; the output is cropped /
  zero-padded to `4 * L - 3` frames and `mel_bins` bins. Activations are channels-last `[B, T, M, C]`.
- `Vocoder` follows diffusers `LTX2Vocoder` (HiFi-GAN-style: transposed-conv upsampling, multi-kernel
  dilated residual stacks averaged) and `LTX2VocoderWithBWE` (LTX-2.3+: snake-beta activations behind
  an anti-aliasing 2x up/down filter pair, then a bandwidth-extension generator run on the first
  stage's re-analysed log-mel spectrogram, added to the first stage's 3x Hann-resampled waveform).
  Activations are `[B, T, C]`. The anti-aliasing and STFT filters are checkpoint buffers (their
  values are read, not recomputed); the Hann resampler's filter is not stored and is built here.
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from vidax.zoo.compute.layers import logical_param
from vidax.zoo.ltx2.config import AudioVAEConfig, VocoderConfig

Params = dict[str, Any]
LATENT_DOWNSAMPLE = 4  # diffusers' LATENT_DOWNSAMPLE_FACTOR


# ---------------------------------------------------------------------------------------------
# Audio VAE decoder


def _pixel_norm(x, eps=1e-6):
    x32 = x.astype(jnp.float32)
    return (x32 / jnp.sqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)).astype(x.dtype)


class GroupNorm(nn.Module):
    """torch `GroupNorm(32, C, eps=1e-6)` on channels-last input (`scale`, `bias`)."""

    @nn.compact
    def __call__(self, x):
        c = x.shape[-1]
        g = x.astype(jnp.float32).reshape(*x.shape[:-1], 32, c // 32)
        axes = tuple(range(1, g.ndim - 2)) + (g.ndim - 1,)
        mean = g.mean(axis=axes, keepdims=True)
        var = jnp.square(g - mean).mean(axis=axes, keepdims=True)
        y = ((g - mean) * jax.lax.rsqrt(var + 1e-6)).reshape(x.shape)
        y = y * logical_param(self, "scale", (c,), ("norm",), nn.initializers.ones)
        return (y + logical_param(self, "bias", (c,), ("norm",), nn.initializers.zeros)).astype(x.dtype)


class Conv2d(nn.Module):
    """A torch `Conv2d` without padding: kernel `[k, k, in, out]`."""

    features: int
    kernel: int

    @nn.compact
    def __call__(self, x):
        k = self.kernel
        w = logical_param(self, "kernel", (k, k, x.shape[-1], self.features), (None, None, "conv_in", "conv_out"))
        b = logical_param(self, "bias", (self.features,), ("conv_out",), nn.initializers.zeros)
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), (1, 1), "VALID",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return y + b.astype(x.dtype)


class CausalConv2d(nn.Module):
    """diffusers `LTX2AudioCausalConv2d` (params under `conv`): pads (time, mel) per `causality_axis`."""

    features: int
    kernel: int = 3
    causality_axis: str | None = "height"

    @nn.compact
    def __call__(self, x):  # [B, T, M, C]
        k = self.kernel
        sym = ((k - 1) // 2, k - 1 - (k - 1) // 2)
        if self.causality_axis == "none":
            pads = (sym, sym)
        elif self.causality_axis == "height":
            pads = ((k - 1, 0), sym)
        else:  # width, width-compatibility
            pads = (sym, (k - 1, 0))
        x = jnp.pad(x, ((0, 0), *pads, (0, 0)))
        return Conv2d(self.features, k, name="conv")(x)


class AudioResnetBlock(nn.Module):
    """diffusers `LTX2AudioResnetBlock` (the decoder has no timestep embedding)."""

    cfg: AudioVAEConfig
    features: int

    def _norm(self, name):
        return GroupNorm(name=name) if self.cfg.norm_type == "group" else _pixel_norm

    @nn.compact
    def __call__(self, x):
        axis = self.cfg.causality_axis
        h = CausalConv2d(self.features, 3, axis, name="conv1")(jax.nn.silu(self._norm("norm1")(x)))
        h = CausalConv2d(self.features, 3, axis, name="conv2")(jax.nn.silu(self._norm("norm2")(h)))
        if x.shape[-1] != self.features:
            x = CausalConv2d(self.features, 1, axis, name="nin_shortcut")(x)
        return x + h


class AudioUpsample(nn.Module):
    """diffusers `LTX2AudioUpsample`: nearest 2x on (time, mel), causal conv, first causal row dropped."""

    cfg: AudioVAEConfig

    @nn.compact
    def __call__(self, x):
        x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
        x = CausalConv2d(x.shape[-1], 3, self.cfg.causality_axis, name="conv")(x)
        if self.cfg.causality_axis == "height":
            return x[:, 1:]
        if self.cfg.causality_axis == "width":
            return x[:, :, 1:]
        return x


class _Mid(nn.Module):
    cfg: AudioVAEConfig

    @nn.compact
    def __call__(self, x):
        width = x.shape[-1]
        x = AudioResnetBlock(self.cfg, width, name="block_1")(x)
        return AudioResnetBlock(self.cfg, width, name="block_2")(x)


class _Up(nn.Module):
    cfg: AudioVAEConfig
    features: int
    upsample: bool

    @nn.compact
    def __call__(self, x):
        for j in range(self.cfg.num_res_blocks + 1):
            x = AudioResnetBlock(self.cfg, self.features, name=f"block_{j}")(x)
        return AudioUpsample(self.cfg, name="upsample")(x) if self.upsample else x


class AudioDecoder(nn.Module):
    """diffusers `LTX2AudioDecoder`: `[B, L, M', latent]` -> mel spectrogram `[B, T, mel_bins, output]`."""

    cfg: AudioVAEConfig

    @nn.compact
    def __call__(self, z):
        cfg = self.cfg
        frames, bins = z.shape[1], z.shape[2]
        x = CausalConv2d(cfg.base_channels * cfg.ch_mult[-1], 3, cfg.causality_axis, name="conv_in")(z)
        x = _Mid(cfg, name="mid")(x)
        for level in reversed(range(len(cfg.ch_mult))):
            x = _Up(cfg, cfg.base_channels * cfg.ch_mult[level], level != 0, name=f"up_{level}")(x)
        norm = GroupNorm(name="norm_out") if cfg.norm_type == "group" else _pixel_norm
        x = CausalConv2d(cfg.output_channels, 3, cfg.causality_axis, name="conv_out")(jax.nn.silu(norm(x)))
        # crop / zero-pad to the causal target size, as the reference does
        target_t = frames * LATENT_DOWNSAMPLE
        if cfg.causality_axis is not None:
            target_t = max(target_t - (LATENT_DOWNSAMPLE - 1), 1)
        target_m = cfg.mel_bins if cfg.mel_bins is not None else bins
        x = x[:, :target_t, :target_m]
        return jnp.pad(x, ((0, 0), (0, target_t - x.shape[1]), (0, target_m - x.shape[2]), (0, 0)))


class AudioVAEModule(nn.Module):
    """The decoder's parameter tree: `decoder`, `latents_mean`, `latents_std`."""

    cfg: AudioVAEConfig

    @nn.compact
    def __call__(self, z):
        stats = (logical_param(self, "latents_mean", (self.cfg.base_channels,), (None,), nn.initializers.zeros),
                 logical_param(self, "latents_std", (self.cfg.base_channels,), (None,), nn.initializers.ones))
        return AudioDecoder(self.cfg, name="decoder")(z), stats


class LTX2AudioVAE:
    """`decode(params, latents [B, C, L, M'])` -> mel spectrogram `[B, output_channels, 4L - 3, mel_bins]`
    (diffusers' `audio_vae.decode(...).sample`); latents are denormalised, unpacked."""

    def __init__(self, cfg: AudioVAEConfig, dtype: Any = jnp.float32):
        self.cfg, self.dtype = cfg, dtype
        self.module = AudioVAEModule(cfg)

    def init_params(self, rng):
        z = jnp.zeros((1, 2, 16, self.cfg.latent_channels), jnp.float32)
        return nn.unbox(self.module.init(rng, z)["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        from vidax.zoo.parts.dit import param_shapes

        return param_shapes(self.init_params)

    def decode(self, params: Params, latents: jax.Array) -> jax.Array:
        if latents.ndim != 4 or latents.shape[1] != self.cfg.latent_channels:
            raise ValueError(f"LTX-2 audio VAE: latents must be [B, {self.cfg.latent_channels}, L, M'], "
                             f"got {latents.shape}")
        z = jnp.transpose(latents.astype(self.dtype), (0, 2, 3, 1))
        mel, _ = self.module.apply({"params": params}, z)
        return jnp.transpose(mel, (0, 3, 1, 2))


# ---------------------------------------------------------------------------------------------
# Vocoder


class Conv1d(nn.Module):
    """torch `Conv1d`: kernel `[k, in, out]`, `padding` per side, dilation, optional bias."""

    features: int
    kernel: int
    dilation: int = 1
    padding: tuple[int, int] = (0, 0)
    use_bias: bool = True

    @nn.compact
    def __call__(self, x):  # [B, T, C]
        w = logical_param(self, "kernel", (self.kernel, x.shape[-1], self.features), (None, "conv_in", "conv_out"))
        y = jax.lax.conv_general_dilated(x, w.astype(x.dtype), (1,), [self.padding], rhs_dilation=(self.dilation,),
                                         dimension_numbers=("NWC", "WIO", "NWC"))
        if self.use_bias:
            y = y + logical_param(self, "bias", (self.features,), ("conv_out",), nn.initializers.zeros).astype(x.dtype)
        return y


class ConvTranspose1d(nn.Module):
    """torch `ConvTranspose1d(k, stride, padding=(k - stride) // 2)`: kernel `[k, in, out]` (the spec
    transposes torch's `[in, out, k]`), run as a dilated convolution with the flipped kernel."""

    features: int
    kernel: int
    stride: int

    @nn.compact
    def __call__(self, x):
        k, s = self.kernel, self.stride
        p = (k - s) // 2
        w = logical_param(self, "kernel", (k, x.shape[-1], self.features), (None, "conv_in", "conv_out"))
        b = logical_param(self, "bias", (self.features,), ("conv_out",), nn.initializers.zeros)
        y = jax.lax.conv_general_dilated(x, w[::-1].astype(x.dtype), (1,), [(k - 1 - p, k - 1 - p)], lhs_dilation=(s,),
                                         dimension_numbers=("NWC", "WIO", "NWC"))
        return y + b.astype(x.dtype)


def _depthwise(x, taps, stride: int = 1):
    """The same 1-D filter `taps [K]` on every channel of `[B, T, C]` (torch's grouped conv with an
    expanded filter)."""
    c = x.shape[-1]
    w = jnp.broadcast_to(taps.astype(x.dtype)[:, None, None], (taps.shape[0], 1, c))
    return jax.lax.conv_general_dilated(x, w, (stride,), [(0, 0)], dimension_numbers=("NWC", "WIO", "NWC"),
                                        feature_group_count=c)


def _replicate_pad(x, left: int, right: int):
    return jnp.pad(x, ((0, 0), (left, right), (0, 0)), mode="edge")


def upsample_1d(x, taps, ratio: int, pad: int, pad_left: int, pad_right: int):
    """diffusers `UpSample1d.forward`: replicate pad, `ratio * conv_transpose1d(stride=ratio)` with the
    same taps on every channel, crop. A transposed convolution is the input dilated by `ratio`,
    padded by K - 1 on each side and convolved with the flipped taps."""
    k, c = taps.shape[0], x.shape[-1]
    x = _replicate_pad(x, pad, pad)
    w = jnp.broadcast_to(taps[::-1].astype(x.dtype)[:, None, None], (k, 1, c))
    y = jax.lax.conv_general_dilated(x, w, (1,), [(k - 1, k - 1)], lhs_dilation=(ratio,),
                                     dimension_numbers=("NWC", "WIO", "NWC"), feature_group_count=c)
    return (ratio * y)[:, pad_left: y.shape[1] - pad_right]


def kaiser_geometry(ratio: int, kernel: int) -> tuple[int, int, int, int, int]:
    """(up pad, up crop left, up crop right, down pad left, down pad right) of diffusers'
    kaiser `UpSample1d` / `DownSample1d`."""
    pad = kernel // ratio - 1
    return (pad, pad * ratio + (kernel - ratio) // 2, pad * ratio + (kernel - ratio + 1) // 2,
            kernel // 2 + kernel % 2 - 1, kernel // 2)


def hann_resampler(ratio: int) -> tuple[np.ndarray, int, int, int]:
    """diffusers `UpSample1d(window_type="hann")`'s filter (not stored in checkpoints) and geometry."""
    rolloff, zeros = 0.99, 6
    width = math.ceil(zeros / rolloff)
    kernel = 2 * width * ratio + 1
    t = (np.arange(kernel, dtype=np.float32) / np.float32(ratio) - np.float32(width)) * np.float32(rolloff)
    window = np.cos(np.clip(t, -zeros, zeros) * np.float32(math.pi) / np.float32(zeros) / np.float32(2)) ** 2
    taps = (np.sinc(t) * window * np.float32(rolloff) / np.float32(ratio)).astype(np.float32)
    return taps, width, 2 * width * ratio, kernel - ratio


class SnakeBeta(nn.Module):
    """diffusers `SnakeBeta` (log-scale `alpha`, `beta`): `x + sin(x e^alpha)^2 / (e^beta + 1e-9)`."""

    use_beta: bool = True

    @nn.compact
    def __call__(self, x):
        c = x.shape[-1]
        alpha = jnp.exp(logical_param(self, "alpha", (c,), (None,), nn.initializers.zeros).astype(jnp.float32))
        amp = jnp.exp(logical_param(self, "beta", (c,), (None,), nn.initializers.zeros).astype(jnp.float32)) \
            if self.use_beta else alpha
        x32 = x.astype(jnp.float32)
        return (x32 + (1.0 / (amp + 1e-9)) * jnp.square(jnp.sin(x32 * alpha))).astype(x.dtype)


class AntiAliasAct(nn.Module):
    """diffusers `AntiAliasAct1d`: kaiser 2x upsample, activation, kaiser 2x downsample (stored taps)."""

    cfg: VocoderConfig
    use_beta: bool = True

    @nn.compact
    def __call__(self, x):
        k, r = self.cfg.antialias_kernel_size, self.cfg.antialias_ratio
        up_taps = _Filter(k, name="upsample")()
        down_taps = _Filter(k, name="downsample")()
        pad, crop_l, crop_r, down_l, down_r = kaiser_geometry(r, k)
        x = upsample_1d(x, up_taps, r, pad, crop_l, crop_r)
        x = SnakeBeta(self.use_beta, name="act")(x) if self.cfg.act_fn != "leaky_relu" else jax.nn.leaky_relu(
            x, self.cfg.leaky_relu_negative_slope)
        return _depthwise(_replicate_pad(x, down_l, down_r), down_taps, stride=r)


class _Filter(nn.Module):
    """A stored `[1, 1, K]` filter buffer, kept as `filter` `[K]`."""

    taps: int

    @nn.compact
    def __call__(self):
        return logical_param(self, "filter", (self.taps,), (None,), nn.initializers.ones).astype(jnp.float32)


def _act(cfg: VocoderConfig, name: str, x):
    """Apply the configured activation with diffusers' parameter names (`<name>/...`)."""
    if cfg.antialias:
        return AntiAliasAct(cfg, cfg.act_fn == "snakebeta", name=name)(x)
    if cfg.act_fn == "leaky_relu":
        return jax.nn.leaky_relu(x, cfg.leaky_relu_negative_slope)
    return SnakeBeta(cfg.act_fn == "snakebeta", name=name)(x)


class VocoderResBlock(nn.Module):
    """diffusers vocoder `ResBlock`: per dilation, act -> dilated conv -> act -> conv, residual."""

    cfg: VocoderConfig
    kernel: int
    dilations: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        c, k = x.shape[-1], self.kernel
        for i, d in enumerate(self.dilations):
            same = (d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2)
            h = Conv1d(c, k, d, same, name=f"convs1_{i}")(_act(self.cfg, f"acts1_{i}", x))
            h = Conv1d(c, k, 1, ((k - 1) // 2, k - 1 - (k - 1) // 2), name=f"convs2_{i}")(
                _act(self.cfg, f"acts2_{i}", h))
            x = x + h
        return x


class Generator(nn.Module):
    """diffusers `LTX2Vocoder`: mel `[B, C, T, M]` -> waveform `[B, T * prod(upsample_factors), out]`."""

    cfg: VocoderConfig

    @nn.compact
    def __call__(self, mel):
        cfg = self.cfg
        b, c, t, m = mel.shape
        x = jnp.transpose(mel, (0, 2, 1, 3)).reshape(b, t, c * m)  # channels (c, mel), time steps
        x = Conv1d(cfg.hidden_channels, 7, 1, (3, 3), name="conv_in")(x)
        width = cfg.hidden_channels
        per_level = len(cfg.resnet_kernel_sizes)
        for i, (stride, kernel) in enumerate(zip(cfg.upsample_factors, cfg.upsample_kernel_sizes)):
            if cfg.act_fn == "leaky_relu":
                x = jax.nn.leaky_relu(x, cfg.leaky_relu_negative_slope)
            width //= 2
            x = ConvTranspose1d(width, kernel, stride, name=f"upsamplers_{i}")(x)
            outs = [VocoderResBlock(cfg, k, tuple(d), name=f"resnets_{i * per_level + j}")(x)
                    for j, (k, d) in enumerate(zip(cfg.resnet_kernel_sizes, cfg.resnet_dilations))]
            x = jnp.mean(jnp.stack(outs, axis=0), axis=0)
        if cfg.act_fn == "leaky_relu":
            x = jax.nn.leaky_relu(x, 0.01)  # diffusers' act_out ignores the configured slope
        else:
            x = AntiAliasAct(cfg, True, name="act_out")(x)  # snake variants: always snake-beta, antialiased
        x = Conv1d(cfg.out_channels, 7, 1, (3, 3), use_bias=cfg.final_bias, name="conv_out")(x)
        if cfg.final_act_fn == "tanh":
            return jnp.tanh(x)
        if cfg.final_act_fn == "clamp":
            return jnp.clip(x, -1, 1)
        return x


class MelSTFT(nn.Module):
    """diffusers `MelSTFT` (stored bases): causal STFT magnitude -> mel -> log(clamp(., 1e-5)).

    Params: `stft_fn/forward_basis` `[filter_length, 1, 2 * n_freqs]` (torch's `[2 n_freqs, 1,
    filter_length]` conv weight reversed, a WIO kernel), `mel_basis` `[n_mels, n_freqs]`; the unused
    `inverse_basis` is not converted.
    """

    cfg: VocoderConfig

    @nn.compact
    def __call__(self, wave):  # [N, T] mono signals
        cfg = self.cfg
        n_freqs = cfg.filter_length // 2 + 1
        basis = _Basis(cfg, name="stft_fn")()
        mel_basis = logical_param(self, "mel_basis", (cfg.num_mel_channels, n_freqs), (None, None))
        x = jnp.pad(wave, ((0, 0), (max(0, cfg.window_length - cfg.hop_length), 0)))[..., None]  # [N, T, 1]
        spec = jax.lax.conv_general_dilated(x, basis.astype(x.dtype), (cfg.hop_length,), [(0, 0)],
                                            dimension_numbers=("NWC", "WIO", "NWC"))  # [N, frames, 2 n_freqs]
        real, imag = spec[..., :n_freqs], spec[..., n_freqs:]
        magnitude = jnp.sqrt(real ** 2 + imag ** 2)  # [N, frames, n_freqs]
        mel = jnp.einsum("mf,ntf->nmt", mel_basis.astype(jnp.float32), magnitude.astype(jnp.float32))
        return jnp.log(jnp.maximum(mel, 1e-5))  # [N, n_mels, frames]


class _Basis(nn.Module):
    cfg: VocoderConfig

    @nn.compact
    def __call__(self):
        n = self.cfg.filter_length // 2 + 1
        return logical_param(self, "forward_basis", (self.cfg.filter_length, 1, 2 * n), (None, None, None))


class BWEVocoder(nn.Module):
    """diffusers `LTX2VocoderWithBWE`: `vocoder`, then `bwe_generator` on the re-analysed mel, plus the
    3x Hann-resampled first-stage waveform, clamped to [-1, 1]."""

    cfg: VocoderConfig

    @nn.compact
    def __call__(self, mel):
        cfg = self.cfg
        x = Generator(cfg, name="vocoder")(mel)  # [B, N, C] at the input rate
        b, n, c = x.shape
        if n % cfg.hop_length:
            raise ValueError(f"LTX-2 BWE vocoder: {n} samples are not a multiple of the STFT hop {cfg.hop_length} "
                             "(diffusers' pad for this case fails too)")
        mono = jnp.transpose(x, (0, 2, 1)).reshape(b * c, n)
        analysed = MelSTFT(cfg, name="mel_stft")(mono)  # [B*C, n_mels, frames]
        analysed = analysed.reshape(b, c, *analysed.shape[1:]).transpose(0, 1, 3, 2)  # [B, C, frames, n_mels]
        residual = Generator(cfg.bwe, name="bwe_generator")(analysed.astype(x.dtype))
        ratio = cfg.bwe.output_sampling_rate // cfg.input_sampling_rate
        taps, pad, crop_l, crop_r = hann_resampler(ratio)
        skip = upsample_1d(x, jnp.asarray(taps), ratio, pad, crop_l, crop_r)
        wave = jnp.clip(residual + skip, -1, 1)
        return wave[:, : n * cfg.bwe.output_sampling_rate // cfg.input_sampling_rate]


class LTX2Vocoder:
    """`__call__(params, mel [B, C, T, M])` -> waveform `[B, out_channels, samples]`, as diffusers'
    vocoders are called on the audio VAE's output (T = mel frames, M = mel bins)."""

    def __init__(self, cfg: VocoderConfig, dtype: Any = jnp.float32):
        self.cfg, self.dtype = cfg, dtype
        self.module = Generator(cfg) if cfg.bwe is None else BWEVocoder(cfg)

    @property
    def sample_rate(self) -> int:
        return (self.cfg.bwe or self.cfg).output_sampling_rate

    def init_params(self, rng):
        hop = self.cfg.hop_length if self.cfg.bwe is not None else 1
        frames = max(4, -(-hop // math.prod(self.cfg.upsample_factors)))
        mel = jnp.zeros((1, 1, frames, self.cfg.in_channels), jnp.float32)
        return nn.unbox(self.module.init(rng, mel)["params"])

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        from vidax.zoo.parts.dit import param_shapes

        return param_shapes(self.init_params)

    def __call__(self, params: Params, mel: jax.Array) -> jax.Array:
        _, c, _, m = mel.shape
        if c * m != self.cfg.in_channels:
            raise ValueError(f"LTX-2 vocoder: channels x mel bins must be {self.cfg.in_channels}, got {mel.shape}")
        wave = self.module.apply({"params": params}, mel.astype(self.dtype))
        return jnp.transpose(wave, (0, 2, 1))
