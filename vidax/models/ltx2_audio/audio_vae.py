"""The LTX-2.x audio VAE (LTX-2 19B, LTX-2.3 22B, LTX-2.5), after ltx-core's ``AudioEncoder``
/ ``AudioDecoder`` (ltx-core 1.0.0, ``ltx_core/model/audio_vae``: ``audio_vae``,
``causal_conv_2d``, ``resnet``, ``downsample``, ``upsample``, ``ops``), and the log-mel front
end the authors put before the encoder (``ops.AudioProcessor.waveform_to_mel``).

Key layout (the release files, prefix ``audio_vae.`` stripped): ``encoder.*`` and
``decoder.*`` are the two modules' state dicts and ``per_channel_statistics.{mean-of-means,
std-of-means}`` the statistics both of them load (ltx-core keeps a copy in each; here there
is one, :attr:`LTX2AudioVAE.per_channel_statistics`). Module names are ltx-core's:
``conv_in``, ``down.<level>.block.<j>`` / ``down.<level>.downsample``, ``mid.block_{1,2}``,
``up.<level>.block.<j>`` / ``up.<level>.upsample``, ``norm``-free ``conv_out``; every causal
conv is ``<name>.conv`` (the encoder's ``downsample.conv`` is a plain strided conv).

Layouts. The public API keeps ltx-core's channels-first layout, which is what its vocoder
takes: mel spectrograms ``[B, 2, T, 64]`` (stereo, time, mel bins), latents ``[B, 8, T', 16]``
(``T' = (T - 1) // 4 + 1``), tokens ``[B, T', 128]`` with index ``c * 16 + f``
(:meth:`LTX2AudioVAE.patchify`, ltx-core's ``AudioPatchifier``: ``b c t f -> b t (c f)``).
Inside, the convolutions run channels-last ``[B, T, F, C]``: torch's Conv2d ``H`` axis is time.

The computation, as ltx-core does it:

* Every 3x3 conv is causal along time (``causality_axis="height"``): 2 zero frames in front,
  none behind; frequency is zero-padded 1 / 1. The 1x1 ``nin_shortcut`` has no padding.
* ``PixelNorm`` over channels with **eps 1e-6** (the video VAE's is 1e-8). Resnet: norm1, SiLU,
  conv1, norm2, SiLU, conv2, plus the input (through ``nin_shortcut`` where the width
  changes). No attention anywhere in the releases (``attn_resolutions=[]``,
  ``mid_block_add_attention=false``; the config refuses others).
* Encoder: ``conv_in``; per level ``num_res_blocks`` resnets, then (all but the last level) a
  3x3 stride-2 conv after zero padding (time 2 / 0, frequency 0 / 1); mid block; norm, SiLU,
  ``conv_out`` to ``2 z`` channels (``double_z``): means then log-variances.
* Decoder: ``conv_in`` to ``ch * ch_mult[-1]``; mid block; for levels from the last to the
  first ``num_res_blocks + 1`` resnets, then (not at level 0) nearest x2 on both axes, a causal
  conv, and the first time step dropped (T -> 2T - 1); norm, SiLU, ``conv_out``. The result is
  cropped / zero-padded to ``[B, out_ch, max(4 T' - 3, 1), mel_bins]``.
* The statistics normalise the *patchified* latent, per token channel:
  ``(tokens - mean-of-means) / std-of-means``. ltx-core's encoder returns normalised means and
  its decoder un-normalises first: here that is ``normalize(encode(mel))`` and
  ``decode_normalized(latents)``.

Mel front end (:func:`waveform_to_mel`): torchaudio's ``MelSpectrogram`` as ltx-core sets it
up (n_fft 1024 = window, hop 160, periodic Hann window, centred frames with reflect padding,
magnitude (power 1), a Slaney-scale, Slaney-normalised 64-band filter bank over 0 .. 8 kHz),
then ``log(max(mel, 1e-5))``, as ``[B, C, 1 + N // hop, mel_bins]``. Written here from those
definitions (torchaudio is not a dependency). Other sample rates are first resampled as
ltx-core does it with ``torchaudio.functional.resample`` (:func:`resample`, its default
Hann-windowed sinc filters, also written from their definition).

Precision: the computation runs in the input's dtype (float32 by default), parameters cast at
use; pixel-norm statistics and the mel front end in float32.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.ltx2_audio.config import LTX2AudioVAEConfig
from vidax.models.ltx_video.vae import PerChannelStatistics
from vidax.nn.layers import Conv, KeyGen

__all__ = ["LTX2AudioVAE", "LTX2AudioVAEConfig", "mel_filter_bank", "resample", "waveform_to_mel"]

PIXEL_NORM_EPS = 1e-6
LOG_MEL_FLOOR = 1e-5


def pixel_norm(x: jax.Array) -> jax.Array:
    """ltx-core's ``PixelNorm(dim=channels, eps=1e-6)`` over the last axis."""
    x32 = x.astype(jnp.float32)
    return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True)
                                + PIXEL_NORM_EPS)).astype(x.dtype)


# ---------------------------------------------------------------------------- layers
def patchify(latents: jax.Array) -> jax.Array:
    """``[B, C, T, F] -> [B, T, C * F]`` (ltx-core's ``AudioPatchifier``, patch size 1): the
    audio stream's tokens."""
    b, c, t, f = latents.shape
    return jnp.transpose(latents, (0, 2, 1, 3)).reshape(b, t, c * f)


def unpatchify(tokens: jax.Array, channels: int) -> jax.Array:
    """``[B, T, channels * F] -> [B, channels, T, F]``, the inverse of :func:`patchify`."""
    b, t, _ = tokens.shape
    return jnp.transpose(tokens.reshape(b, t, channels, -1), (0, 2, 1, 3))


class CausalConv2d(nnx.Module):
    """ltx-core's ``CausalConv2d`` (``causality_axis="height"``): a k x k conv (``conv``) over
    channels-last ``[B, T, F, C]``, zero-padded k-1 steps before in time and symmetrically in
    frequency."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, *, keys: KeyGen,
                 param_dtype):
        k = kernel_size
        self.conv = Conv(in_channels, out_channels, (k, k), keys=keys,
                         padding=((k - 1, 0), (k // 2, (k - 1) - k // 2)),
                         param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv(x)


class ResnetBlock(nnx.Module):
    """ltx-core's audio ``ResnetBlock`` with pixel norm and no time embedding."""

    def __init__(self, in_channels: int, out_channels: int, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.conv1 = CausalConv2d(in_channels, out_channels, 3, **kw)
        self.conv2 = CausalConv2d(out_channels, out_channels, 3, **kw)
        self.nin_shortcut = (CausalConv2d(in_channels, out_channels, 1, **kw)
                             if in_channels != out_channels else None)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = self.conv1(jax.nn.silu(pixel_norm(x)))
        h = self.conv2(jax.nn.silu(pixel_norm(h)))
        if self.nin_shortcut is not None:
            x = self.nin_shortcut(x)
        return x + h


class Downsample(nnx.Module):
    """ltx-core's ``Downsample`` (with conv, causal in time): zero padding time (2, 0) and
    frequency (0, 1), then a 3x3 stride-2 ``conv``."""

    def __init__(self, channels: int, *, keys: KeyGen, param_dtype):
        self.conv = Conv(channels, channels, (3, 3), keys=keys, stride=2,
                         padding=((2, 0), (0, 1)), param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv(x)


class Upsample(nnx.Module):
    """ltx-core's ``Upsample``: nearest x2 on time and frequency, a causal ``conv``, and the
    first time step dropped (``T -> 2T - 1``)."""

    def __init__(self, channels: int, *, keys: KeyGen, param_dtype):
        self.conv = CausalConv2d(channels, channels, 3, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.repeat(jnp.repeat(x, 2, axis=1), 2, axis=2)
        return self.conv(x)[:, 1:]


class MidBlock(nnx.Module):
    """``mid``: two resnets (``block_1``, ``block_2``); no attention (``attn_1`` is Identity)."""

    def __init__(self, channels: int, *, keys: KeyGen, param_dtype):
        self.block_1 = ResnetBlock(channels, channels, keys=keys, param_dtype=param_dtype)
        self.block_2 = ResnetBlock(channels, channels, keys=keys, param_dtype=param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.block_2(self.block_1(x))


class Stage(nnx.Module):
    """One level: ``block`` (resnets) and its ``downsample`` / ``upsample`` (or None)."""

    def __init__(self, channels: list[tuple[int, int]], resample: type | None, *,
                 keys: KeyGen, param_dtype):
        self.block = nnx.List([ResnetBlock(i, o, keys=keys, param_dtype=param_dtype)
                               for i, o in channels])
        out = channels[-1][1]
        sample = (resample(out, keys=keys, param_dtype=param_dtype)
                  if resample is not None else None)
        if resample is Downsample:
            self.downsample, self.upsample = sample, None
        else:
            self.downsample, self.upsample = None, sample

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.block:
            x = block(x)
        for sample in (self.downsample, self.upsample):
            if sample is not None:
                x = sample(x)
        return x


class AudioEncoder(nnx.Module):
    """ltx-core's ``AudioEncoder`` without its statistics: ``[B, T, F, C_in]`` ->
    ``[B, T', F', 2 z]`` (channels-last)."""

    def __init__(self, cfg: LTX2AudioVAEConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.conv_in = CausalConv2d(cfg.in_channels, cfg.ch, 3, **kw)
        mults, stages, width = (1, *cfg.ch_mult), [], cfg.ch
        last = len(cfg.ch_mult) - 1
        for level in range(len(cfg.ch_mult)):
            width_in, width = cfg.ch * mults[level], cfg.ch * cfg.ch_mult[level]
            pairs = [(width_in if j == 0 else width, width) for j in range(cfg.num_res_blocks)]
            stages.append(Stage(pairs, Downsample if level != last else None, **kw))
        self.down = nnx.List(stages)
        self.mid = MidBlock(width, **kw)
        self.conv_out = CausalConv2d(width, cfg.z_channels * (2 if cfg.double_z else 1), 3, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv_in(x)
        for stage in self.down:
            x = stage(x)
        return self.conv_out(jax.nn.silu(pixel_norm(self.mid(x))))


class AudioDecoder(nnx.Module):
    """ltx-core's ``AudioDecoder`` without its statistics and output fitting:
    ``[B, T', F', z]`` -> ``[B, 4T' - 3, 4F', out_ch]`` (channels-last)."""

    def __init__(self, cfg: LTX2AudioVAEConfig, *, keys: KeyGen, param_dtype):
        kw = dict(keys=keys, param_dtype=param_dtype)
        width = cfg.ch * cfg.ch_mult[-1]
        self.conv_in = CausalConv2d(cfg.z_channels, width, 3, **kw)
        self.mid = MidBlock(width, **kw)
        stages = [None] * len(cfg.ch_mult)
        for level in reversed(range(len(cfg.ch_mult))):
            out = cfg.ch * cfg.ch_mult[level]
            pairs = [(width if j == 0 else out, out) for j in range(cfg.num_res_blocks + 1)]
            stages[level] = Stage(pairs, Upsample if level != 0 else None, **kw)
            width = out
        self.up = nnx.List(stages)
        self.conv_out = CausalConv2d(width, cfg.out_ch, 3, **kw)

    def __call__(self, z: jax.Array) -> jax.Array:
        x = self.mid(self.conv_in(z))
        for level in reversed(range(len(self.up))):
            x = self.up[level](x)
        return self.conv_out(jax.nn.silu(pixel_norm(x)))


# ---------------------------------------------------------------------------- the model
class LTX2AudioVAE(nnx.Module):
    """The LTX-2.x audio VAE: ``encoder``, ``decoder`` and the shared
    ``per_channel_statistics``. Public arrays are channels-first as in ltx-core (see the
    module docstring)."""

    def __init__(self, config: LTX2AudioVAEConfig, *, keys: KeyGen | int = 0,
                 param_dtype=jnp.float32):
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        self.config = config
        self.encoder = AudioEncoder(config, keys=keys, param_dtype=param_dtype)
        self.decoder = AudioDecoder(config, keys=keys, param_dtype=param_dtype)
        self.per_channel_statistics = PerChannelStatistics(config.ch, param_dtype)

    # ------------------------------------------------------------------ encode
    def encode_moments(self, mel: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        """Means ``[B, z, T', F']`` and log-variances (None without ``double_z``) of a log-mel
        spectrogram ``[B, in_channels, T, mel_bins]``, un-normalised."""
        cfg = self.config
        mel = jnp.asarray(mel)
        if mel.ndim != 4 or mel.shape[1] != cfg.in_channels or mel.shape[3] != cfg.mel_bins:
            raise VidaxError(f"LTX-2 audio VAE input {tuple(mel.shape)} must be a log-mel "
                             f"spectrogram [B, {cfg.in_channels}, T, {cfg.mel_bins}]")
        out = jnp.transpose(self.encoder(jnp.transpose(mel, (0, 2, 3, 1))), (0, 3, 1, 2))
        if not cfg.double_z:
            return out, None
        return out[:, :cfg.z_channels], out[:, cfg.z_channels:]

    def encode(self, mel: jax.Array) -> jax.Array:
        """Un-normalised latent means ``[B, z, T', F']`` (``T' = (T - 1) // 4 + 1``,
        ``F' = mel_bins / 4``); ``normalize(encode(mel))`` is what ltx-core's encoder returns."""
        return self.encode_moments(mel)[0]

    # ------------------------------------------------------------------ decode
    def decode(self, z: jax.Array) -> jax.Array:
        """The log-mel spectrogram ``[B, out_ch, max(4 T' - 3, 1), mel_bins]`` of
        un-normalised latents ``[B, z, T', F']``."""
        cfg = self.config
        z = jnp.asarray(z)
        if z.ndim != 4 or z.shape[1] != cfg.z_channels:
            raise VidaxError(f"LTX-2 audio VAE latents must be [B, {cfg.z_channels}, T, "
                             f"{cfg.latent_mel_bins}], got {tuple(z.shape)}")
        out = jnp.transpose(self.decoder(jnp.transpose(z, (0, 2, 3, 1))), (0, 3, 1, 2))
        frames = cfg.mel_frames(z.shape[2])
        out = out[:, :, :frames, :cfg.mel_bins]
        pad_t, pad_f = frames - out.shape[2], cfg.mel_bins - out.shape[3]
        if pad_t or pad_f:   # ltx-core's _adjust_output_shape: zeros where the net is short
            out = jnp.pad(out, ((0, 0), (0, 0), (0, pad_t), (0, pad_f)))
        return out

    def decode_normalized(self, latents: jax.Array) -> jax.Array:
        """What ltx-core's ``AudioDecoder`` returns for normalised ``latents [B, z, T', F']``
        (the DiT's output, unpatchified): :meth:`denormalize`, then :meth:`decode`. This mel
        ``[B, 2, T, 64]`` is the vocoder's input."""
        return self.decode(self.denormalize(latents))

    # ------------------------------------------------------------------ statistics
    @staticmethod
    def patchify(latents: jax.Array) -> jax.Array:
        """:func:`patchify`."""
        return patchify(latents)

    def unpatchify(self, tokens: jax.Array) -> jax.Array:
        """:func:`unpatchify` at this VAE's ``z_channels``."""
        return unpatchify(tokens, self.config.z_channels)

    def _tokenwise(self, latents: jax.Array, fn) -> jax.Array:
        latents = jnp.asarray(latents)
        stats = self.per_channel_statistics
        mean = stats.mean_of_means[...].astype(latents.dtype)
        std = stats.std_of_means[...].astype(latents.dtype)
        return self.unpatchify(fn(self.patchify(latents), mean, std))

    def normalize(self, latents: jax.Array) -> jax.Array:
        """``latents [B, z, T', F']`` normalised over the patchified ``z * F'`` channels:
        ``(tokens - mean-of-means) / std-of-means`` (ltx-core's ``PerChannelStatistics``)."""
        return self._tokenwise(latents, lambda x, m, s: (x - m) / s)

    def denormalize(self, latents: jax.Array) -> jax.Array:
        """The inverse of :meth:`normalize`: ``tokens * std-of-means + mean-of-means``."""
        return self._tokenwise(latents, lambda x, m, s: x * s + m)

    # ------------------------------------------------------------------ sizes
    def audio_latent_frames(self, num_frames: int, fps: float) -> int:
        """The audio latent length of a video: see
        :meth:`LTX2AudioVAEConfig.audio_latent_frames` (25 latent frames a second)."""
        return self.config.audio_latent_frames(num_frames, fps)

    def waveform_to_mel(self, waveform, sample_rate: int | None = None) -> jax.Array:
        """ltx-core's ``AudioProcessor.waveform_to_mel`` at this VAE's settings: ``waveform
        [B, C, N]`` at ``sample_rate`` (default: the VAE's, 16 kHz) is first resampled to the
        VAE's rate (:func:`resample`), then :func:`waveform_to_mel`: ``[B, C, T, mel_bins]``
        with ``T = 1 + N' // hop``."""
        cfg = self.config
        if sample_rate is not None and sample_rate != cfg.sample_rate:
            waveform = resample(waveform, sample_rate, cfg.sample_rate)
        return waveform_to_mel(waveform, sample_rate=cfg.sample_rate, n_fft=cfg.n_fft,
                               hop_length=cfg.mel_hop_length, n_mels=cfg.mel_bins)


# ---------------------------------------------------------------------------- mel front end
def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear (200/3 Hz a mel) below 1 kHz, logarithmic above."""
    f = np.asarray(f, np.float64)
    mel = f / (200.0 / 3)
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (math.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log_part, mel)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((math.log(6.4) / 27.0) * (m - 15.0)),
                    m * (200.0 / 3))


def mel_filter_bank(sample_rate: int, n_fft: int, n_mels: int) -> np.ndarray:
    """``[n_fft // 2 + 1, n_mels]``: triangular filters evenly spaced on Slaney's mel scale
    between 0 Hz and Nyquist, each scaled to unit area (``2 / (f_high - f_low)``): the
    ``mel_scale="slaney", norm="slaney"`` bank of torchaudio's ``MelSpectrogram``."""
    freqs = np.linspace(0.0, sample_rate // 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2.0), n_mels + 2))
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (freqs[:, None] - lower) / (centre - lower)
    falling = (upper - freqs[:, None]) / (upper - centre)
    bank = np.maximum(0.0, np.minimum(rising, falling))
    return (bank * (2.0 / (upper - lower))).astype(np.float32)


def waveform_to_mel(waveform, *, sample_rate: int = 16000, n_fft: int = 1024,
                    hop_length: int = 160, n_mels: int = 64) -> jax.Array:
    """ltx-core's ``AudioProcessor.waveform_to_mel`` for a waveform already at
    ``sample_rate``: ``[B, C, N]`` -> log-mel ``[B, C, 1 + N // hop_length, n_mels]``
    (float32). Centred frames (reflect padding ``n_fft // 2``), periodic Hann window of
    ``n_fft``, magnitude spectrum, the Slaney filter bank, ``log(max(mel, 1e-5))``."""
    x = jnp.asarray(waveform, jnp.float32)
    if x.ndim != 3:
        raise VidaxError(f"waveform must be [B, channels, samples], got {tuple(x.shape)}")
    pad = n_fft // 2
    if x.shape[-1] <= pad:
        raise VidaxError(f"waveform of {x.shape[-1]} samples: reflect padding needs more than "
                         f"{pad}")
    x = jnp.pad(x, ((0, 0), (0, 0), (pad, pad)), mode="reflect")
    frames = 1 + (x.shape[-1] - n_fft) // hop_length
    index = np.arange(n_fft)[None, :] + hop_length * np.arange(frames)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    spectrum = jnp.abs(jnp.fft.rfft(x[..., index] * window.astype(np.float32), axis=-1))
    bank = jnp.asarray(mel_filter_bank(sample_rate, n_fft, n_mels))
    mel = jnp.matmul(spectrum, bank, precision=jax.lax.Precision.HIGHEST)
    return jnp.log(jnp.maximum(mel, LOG_MEL_FLOOR))


def resample_kernel(orig_freq: int, new_freq: int, *, lowpass_filter_width: int = 6,
                    rolloff: float = 0.99) -> tuple[np.ndarray, int, int, int]:
    """The polyphase filters of torchaudio's ``functional.resample`` (its defaults:
    ``sinc_interp_hann``, 6 zero crossings, roll-off 0.99), which ltx-core calls: ``(kernel
    [new, 2 width + orig], width, orig, new)`` with the rates divided by their gcd. Filter
    ``j`` holds a Hann-windowed sinc at cutoff ``rolloff * min(orig, new) / 2``, sampled at the
    input offsets of output phase ``j``."""
    if int(orig_freq) != orig_freq or int(new_freq) != new_freq or min(orig_freq, new_freq) <= 0:
        raise VidaxError(f"resampling needs positive integer rates, got {orig_freq} -> {new_freq}")
    gcd = math.gcd(int(orig_freq), int(new_freq))
    orig, new = int(orig_freq) // gcd, int(new_freq) // gcd
    base = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base)
    # float32 throughout, step by step, as torchaudio computes it for a float32 waveform: the
    # phases' sample positions are large, and float64 filters differ by ~1e-5 x std
    f32 = np.float32
    taps = np.arange(-width, width + orig, dtype=f32) / f32(orig)
    t = (np.arange(0, -new, -1, dtype=f32)[:, None] / f32(new) + taps[None, :]) * f32(base)
    t = np.clip(t, -lowpass_filter_width, lowpass_filter_width).astype(f32)
    window = np.cos(t * f32(math.pi) / f32(lowpass_filter_width) / f32(2)) ** 2
    t = t * f32(math.pi)
    with np.errstate(invalid="ignore", divide="ignore"):
        sinc = np.where(t == 0, f32(1.0), np.sin(t) / t)
    return (sinc * (window * f32(base / orig))).astype(f32), width, orig, new


def resample(waveform, orig_freq: int, new_freq: int) -> jax.Array:
    """``waveform [..., N]`` from ``orig_freq`` to ``new_freq`` Hz as torchaudio's
    ``functional.resample`` does it with its defaults (ltx-core's
    ``AudioProcessor.resample_audio``): zero padding ``width`` before and ``width + orig``
    after, each output phase's filter applied with stride ``orig``, the phases interleaved, and
    ``ceil(new * N / orig)`` samples kept. Float32."""
    x = jnp.asarray(waveform, jnp.float32)
    if orig_freq == new_freq:
        return x
    kernel, width, orig, new = resample_kernel(orig_freq, new_freq)
    lead, length = x.shape[:-1], x.shape[-1]
    flat = jnp.pad(x.reshape(-1, 1, length), ((0, 0), (0, 0), (width, width + orig)))
    out = jax.lax.conv_general_dilated(flat, jnp.asarray(kernel)[:, None, :], (orig,),
                                       ((0, 0),), dimension_numbers=("NCH", "OIH", "NCH"),
                                       precision=jax.lax.Precision.HIGHEST)
    out = jnp.transpose(out, (0, 2, 1)).reshape(flat.shape[0], -1)
    return out[:, :math.ceil(new * length / orig)].reshape(*lead, -1)
