"""The LTX-2.x vocoders: stereo log-mel spectrogram -> stereo waveform, after the authors'
``ltx_core/model/audio_vae/vocoder.py`` (PyPI ltx-core 1.0.0: ``Vocoder``,
``VocoderWithBWE``, ``MelSTFT``, ``AMPBlock1``, ``SnakeBeta``, ``Activation1d``).

One class, :class:`LTX2Vocoder`, builds either kind from :class:`LTX2VocoderConfig`:

* **LTX-2 19B** (``bwe=None``): HiFi-GAN. ``conv_pre`` (128 -> 1024, k7), then per
  upsampling stage a leaky ReLU (0.1), ``ups.i`` (ConvTranspose1d, stride = rate, padding
  ``(k - rate) // 2``) and the mean of that stage's ResBlock1s (``resblocks``, one per
  kernel size: ``x += conv2(lrelu(conv1(lrelu(x))))`` three times, conv1 dilated); then a
  leaky ReLU of slope **0.01** (``nn.LeakyReLU()``'s default), ``conv_post`` (-> 2, k7) and
  tanh. 24 kHz, 240 samples per mel frame.
* **LTX-2.3 / 2.5** (``bwe`` set, ``VocoderWithBWE``): the same skeleton with BigVGAN-v2
  AMPBlock1s (every activation is ``Activation1d``: 2x kaiser-sinc upsampling, SnakeBeta
  ``x + sin(x e^alpha)^2 / (e^beta + 1e-9)``, 2x kaiser-sinc low-pass downsampling; no leaky
  ReLU before the upsamplers) and ``act_post`` of the same kind, no ``conv_post`` bias, the
  output clamped to [-1, 1]: 16 kHz. Then the bandwidth extension: the waveform is
  zero-padded on the right to a multiple of ``hop_length`` (80), a causal STFT (left pad
  ``n_fft - hop``, conv with the stored ``mel_stft.stft_fn.forward_basis`` [2 * 257, 1, 512]:
  real rows then imaginary rows), magnitude, the stored ``mel_stft.mel_basis`` [64, 257],
  ``log(max(mel, 1e-5))`` gives a 64-bin mel at 200 frames/s; ``bwe_generator`` (an AMP1
  generator without final activation, x240) turns it into a 48 kHz residual, added to the
  waveform resampled x3 by a Hann-windowed sinc (torchaudio's ``resample`` kernel, not stored:
  computed here as ltx-core computes it); clamp to [-1, 1] and cut to 3x the 16 kHz length.
  480 samples per mel frame.

The anti-alias filters (``...upsample.filter``, ``...downsample.lowpass.filter`` [1, 1, 12])
and the STFT / mel bases are the file's tensors; a model built without a file gets the kaiser
filters computed as ltx-core computes them and zero bases (as ltx-core does).
``inverse_basis`` is stored but never used (the mapper ignores it).

Layouts: the input is ltx-core's ``AudioDecoder`` output ``[B, 2, T, 64]`` (batch, stereo
channel, mel frame, mel bin); inside, channels-last ``[B, time, C]`` with channel
``s * 64 + bin`` (ltx-core's ``b s c t -> b (s c) t``); the output ``[B, 2, samples]``.

The anti-aliased resampling (one shared filter for every channel) is written as shifted
slices (:func:`_fir`; the upsampling polyphase), which XLA fuses; a grouped convolution was
about 6x slower on CPU for the full 2.3 vocoder.

Precision: ltx-core 1.0.0 runs the vocoder in the pipeline's dtype (its ``ModelLedger``
builds every model at bfloat16 and the buffers are stored bfloat16); here the whole forward is
float32 whatever the stored dtype (parameters cast up, matmul precision "float32"), as the
family notes ask.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from vidax.errors import VidaxError
from vidax.models.ltx2_audio.config import (LTX2BWEConfig, LTX2VocoderConfig,
                                           LTX2VocoderGeneratorConfig)
from vidax.nn.layers import Conv, ConvTranspose, KeyGen

__all__ = ["LTX2Vocoder", "LTX2VocoderConfig", "hann_resample_filter", "kaiser_sinc_filter"]

LRELU_SLOPE = 0.1          # ltx_core.model.audio_vae.resnet.LRELU_SLOPE
FINAL_LRELU_SLOPE = 0.01   # the HiFi-GAN's act_post: torch.nn.LeakyReLU()
_F32 = jnp.float32


# ---------------------------------------------------------------------------- filters
def kaiser_sinc_filter(cutoff: float, half_width: float, kernel_size: int) -> np.ndarray:
    """BigVGAN's kaiser-windowed sinc low-pass (ltx-core ``kaiser_sinc_filter1d``), float32
    ``[kernel_size]``: only a model built without a file uses it."""
    half = kernel_size // 2
    amplitude = 2.285 * (half - 1) * math.pi * 4 * half_width + 7.95
    if amplitude > 50.0:
        beta = 0.1102 * (amplitude - 8.7)
    elif amplitude >= 21.0:
        beta = 0.5842 * (amplitude - 21) ** 0.4 + 0.07886 * (amplitude - 21.0)
    else:
        beta = 0.0
    window = np.kaiser(kernel_size, beta)
    time = (np.arange(-half, half) + 0.5 if kernel_size % 2 == 0
            else np.arange(kernel_size) - half)
    if cutoff == 0:
        return np.zeros(kernel_size, np.float32)
    filt = 2 * cutoff * window * np.sinc(2 * cutoff * time)
    return (filt / filt.sum()).astype(np.float32)


def hann_resample_filter(ratio: int) -> np.ndarray:
    """The BWE skip's x``ratio`` kernel (ltx-core ``UpSample1d(window_type="hann")``,
    torchaudio's resampling kernel: rolloff 0.99, 6 zero crossings), float32
    ``[2 * 7 * ratio + 1]``, computed in float32 as ltx-core does."""
    rolloff, zeros = np.float32(0.99), 6
    width = math.ceil(zeros / 0.99)
    t = (np.arange(2 * width * ratio + 1, dtype=np.float32) / np.float32(ratio)
         - np.float32(width)) * rolloff
    clamped = np.clip(t, -zeros, zeros)
    window = np.cos(clamped * np.float32(math.pi / zeros / 2), dtype=np.float32) ** 2
    with np.errstate(invalid="ignore", divide="ignore"):
        pt = np.float32(math.pi) * t
        sinc = np.where(t == 0, np.float32(1), np.sin(pt, dtype=np.float32) / pt)
    return (sinc * window * rolloff / np.float32(ratio)).astype(np.float32)


def _fir(x: jax.Array, taps: jax.Array, length: int, stride: int = 1) -> jax.Array:
    """``y[n] = sum_j taps[j] x[stride n + j]`` for ``n < length``: one filter correlated with
    every channel of ``x [B, T, C]``, as shifted slices (XLA fuses them into one loop; a
    grouped convolution is several times slower here)."""
    span = stride * (length - 1) + 1
    return sum(taps[j] * x[:, j:j + span:stride] for j in range(taps.shape[0]))


def _upsample(x: jax.Array, taps: jax.Array, ratio: int, pad: int, crop: tuple[int, int]):
    """ltx-core ``UpSample1d.forward``: replicate-pad ``pad``, ``ratio *`` the depthwise
    transposed convolution (stride ``ratio``) with ``taps``, drop ``crop`` samples each end.
    Polyphase: output sample ``ratio q + p`` is the full convolution of the input with the
    phase's taps ``taps[p::ratio]`` at ``q``."""
    k = taps.shape[0]
    x = jnp.pad(x, ((0, 0), (pad, pad), (0, 0)), mode="edge")
    n = x.shape[1]
    full = (n - 1) * ratio + k                       # the transposed convolution's length
    q = -(-full // ratio)
    phases = []
    for p in range(ratio):
        phase = jnp.flip(taps[p::ratio])             # a convolution: the taps reversed
        m = phase.shape[0]
        xz = jnp.pad(x, ((0, 0), (m - 1, q - n), (0, 0)))
        phases.append(_fir(xz, phase, q))
    y = jnp.stack(phases, axis=2).reshape(x.shape[0], q * ratio, x.shape[2])
    return ratio * y[:, crop[0]:full - crop[1]]


# ---------------------------------------------------------------------------- modules
def conv1d(cin: int, cout: int, kernel_size: int, *, keys: KeyGen, dilation: int = 1,
           bias: bool = True, param_dtype=_F32) -> Conv:
    """PyTorch ``Conv1d`` (stride 1, symmetric padding ``dilation * (k - 1) / 2``, odd k)
    over channels-last ``[B, T, C]``: :class:`vidax.nn.layers.Conv`, ``kernel [k, in, out]``."""
    return Conv(cin, cout, (kernel_size,), keys=keys, padding=dilation * (kernel_size - 1) // 2,
                dilation=dilation, bias=bias, param_dtype=param_dtype)


class Filter(nnx.Module):
    """A stored ``filter`` buffer [1, 1, k] (ltx-core ``UpSample1d`` / ``LowPassFilter1d``)."""

    def __init__(self, taps: np.ndarray, param_dtype=_F32):
        self.filter = nnx.Param(jnp.asarray(taps, param_dtype).reshape(1, 1, -1))

    def taps(self) -> jax.Array:
        return self.filter[...].reshape(-1).astype(_F32)


class LowPass(nnx.Module):
    """``DownSample1d``'s ``lowpass``: replicate pad (k/2 - 1, k/2), stride-2 correlation."""

    def __init__(self, ratio: int, kernel_size: int, param_dtype=_F32):
        self.ratio, self.kernel_size = ratio, kernel_size
        self.lowpass = Filter(kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, kernel_size),
                              param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel_size
        left = k // 2 - int(k % 2 == 0)
        x = jnp.pad(x, ((0, 0), (left, k // 2), (0, 0)), mode="edge")
        return _fir(x, self.lowpass.taps(), (x.shape[1] - k) // self.ratio + 1, self.ratio)


class SnakeBeta(nnx.Module):
    """``x + sin(x * exp(alpha))^2 / (exp(beta) + 1e-9)``, alpha/beta per channel (log-scale)."""

    def __init__(self, channels: int, param_dtype=_F32):
        self.alpha = nnx.Param(jnp.zeros((channels,), param_dtype))
        self.beta = nnx.Param(jnp.zeros((channels,), param_dtype))

    def __call__(self, x: jax.Array) -> jax.Array:
        alpha = jnp.exp(self.alpha[...].astype(x.dtype))
        beta = jnp.exp(self.beta[...].astype(x.dtype))
        return x + (1.0 / (beta + 1e-9)) * jnp.square(jnp.sin(x * alpha))


class Activation1d(nnx.Module):
    """BigVGAN's anti-aliased activation: 2x up (kaiser, k12), SnakeBeta, 2x down."""

    def __init__(self, channels: int, param_dtype=_F32, ratio: int = 2, kernel_size: int = 12):
        self.ratio, self.kernel_size = ratio, kernel_size
        self.act = SnakeBeta(channels, param_dtype)
        self.upsample = Filter(kaiser_sinc_filter(0.5 / ratio, 0.6 / ratio, kernel_size),
                               param_dtype)
        self.downsample = LowPass(ratio, kernel_size, param_dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        k, r = self.kernel_size, self.ratio
        pad = k // r - 1
        crop = (pad * r + (k - r) // 2, pad * r + (k - r + 1) // 2)
        x = _upsample(x, self.upsample.taps(), r, pad, crop)
        return self.downsample(self.act(x))


class ResBlock(nnx.Module):
    """ltx-core ``ResBlock1`` (leaky ReLU 0.1) or ``AMPBlock1`` (Activation1d + SnakeBeta):
    three ``x += conv2(act(conv1(act(x))))`` with ``conv1`` dilated."""

    def __init__(self, channels: int, kernel_size: int, dilations, *, amp: bool,
                 keys: KeyGen, param_dtype=_F32):
        kw = dict(keys=keys, param_dtype=param_dtype)
        self.convs1 = nnx.List([conv1d(channels, channels, kernel_size, dilation=d, **kw)
                                for d in dilations])
        self.convs2 = nnx.List([conv1d(channels, channels, kernel_size, **kw)
                                for _ in dilations])
        if amp:
            self.acts1 = nnx.List([Activation1d(channels, param_dtype) for _ in dilations])
            self.acts2 = nnx.List([Activation1d(channels, param_dtype) for _ in dilations])
        else:
            self.acts1 = self.acts2 = None

    def __call__(self, x: jax.Array) -> jax.Array:
        for i, (c1, c2) in enumerate(zip(self.convs1, self.convs2)):
            if self.acts1 is None:
                xt = c2(jax.nn.leaky_relu(c1(jax.nn.leaky_relu(x, LRELU_SLOPE)), LRELU_SLOPE))
            else:
                xt = c2(self.acts2[i](c1(self.acts1[i](x))))
            x = x + xt
        return x


class Generator(nnx.Module):
    """ltx-core ``Vocoder``: ``[B, T, 128]`` (channels-last mel) -> ``[B, T * hop, 2]``."""

    def __init__(self, cfg: LTX2VocoderGeneratorConfig, *, keys: KeyGen, param_dtype=_F32):
        self.cfg = cfg
        kw = dict(keys=keys, param_dtype=param_dtype)
        ch = cfg.upsample_initial_channel
        self.conv_pre = conv1d(128, ch, 7, **kw)
        self.ups = nnx.List([
            ConvTranspose(ch // 2 ** i, ch // 2 ** (i + 1), (k,), stride=s, padding=(k - s) // 2,
                          **kw)
            for i, (s, k) in enumerate(zip(cfg.upsample_rates, cfg.upsample_kernel_sizes))])
        self.resblocks = nnx.List([
            ResBlock(ch // 2 ** (i + 1), k, d, amp=cfg.amp, **kw)
            for i in range(len(cfg.upsample_rates))
            for k, d in zip(cfg.resblock_kernel_sizes, cfg.resblock_dilation_sizes)])
        final = ch // 2 ** len(cfg.upsample_rates)
        self.act_post = Activation1d(final, param_dtype) if cfg.amp else None
        self.conv_post = conv1d(final, 2, 7, bias=cfg.use_bias_at_final, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        cfg, n = self.cfg, len(self.cfg.resblock_kernel_sizes)
        x = self.conv_pre(x)
        for i, up in enumerate(self.ups):
            if not cfg.amp:
                x = jax.nn.leaky_relu(x, LRELU_SLOPE)
            x = up(x)
            x = jnp.mean(jnp.stack([rb(x) for rb in self.resblocks[i * n:(i + 1) * n]]), 0)
        x = (self.act_post(x) if self.act_post is not None
             else jax.nn.leaky_relu(x, FINAL_LRELU_SLOPE))
        x = self.conv_post(x)
        if cfg.apply_final_activation:
            x = jnp.tanh(x) if cfg.use_tanh_at_final else jnp.clip(x, -1, 1)
        return x


class STFT(nnx.Module):
    """``mel_stft.stft_fn``: the stored windowed DFT basis ``[2 * n_freqs, 1, n_fft]``."""

    def __init__(self, n_freqs: int, n_fft: int, param_dtype=_F32):
        self.forward_basis = nnx.Param(jnp.zeros((2 * n_freqs, 1, n_fft), param_dtype))


class MelSTFT(nnx.Module):
    """ltx-core ``MelSTFT.mel_spectrogram``'s log-mel: ``[N, T]`` -> ``[N, frames, n_mels]``."""

    def __init__(self, cfg: LTX2BWEConfig, param_dtype=_F32):
        self.hop_length, self.n_fft = cfg.hop_length, cfg.n_fft
        self.stft_fn = STFT(cfg.n_freqs, cfg.n_fft, param_dtype)
        self.mel_basis = nnx.Param(jnp.zeros((cfg.num_mels, cfg.n_freqs), param_dtype))

    def __call__(self, y: jax.Array) -> jax.Array:
        y = jnp.pad(y, ((0, 0), (self.n_fft - self.hop_length, 0)))[..., None]   # causal
        spec = jax.lax.conv_general_dilated(
            y, self.stft_fn.forward_basis[...].astype(y.dtype), (self.hop_length,), [(0, 0)],
            dimension_numbers=("NWC", "OIW", "NWC"))                 # [N, frames, 2 * n_freqs]
        n = spec.shape[-1] // 2
        magnitude = jnp.sqrt(jnp.square(spec[..., :n]) + jnp.square(spec[..., n:]))
        mel = magnitude @ self.mel_basis[...].astype(y.dtype).T
        return jnp.log(jnp.maximum(mel, 1e-5))


def _channels_last(mel: jax.Array) -> jax.Array:
    """``[B, 2, T, bins]`` -> ``[B, T, 2 * bins]``, channel ``s * bins + bin``."""
    b, s, t, m = mel.shape
    return mel.transpose(0, 2, 1, 3).reshape(b, t, s * m)


class LTX2Vocoder(nnx.Module):
    """ltx-core's ``Vocoder`` (19B) or ``VocoderWithBWE`` (2.3 / 2.5), by ``config.bwe``.

    ``__call__(mel)``: ``mel [B, 2, T, 64]`` as ltx-core's ``AudioDecoder`` returns it ->
    waveform ``[B, 2, num_samples(T)]`` float32 in [-1, 1] at :attr:`sample_rate`.
    Submodules keep ltx-core's names (``vocoder``, ``bwe_generator``, ``mel_stft``); the 19B
    file's bare generator keys are renamed under ``vocoder.`` by the mapper.
    """

    def __init__(self, config: LTX2VocoderConfig, *, keys: KeyGen | int = 0,
                 param_dtype=_F32):
        self.config = config
        keys = keys if isinstance(keys, KeyGen) else KeyGen(keys)
        self.vocoder = Generator(config.vocoder, keys=keys, param_dtype=param_dtype)
        if config.bwe is not None:
            self.bwe_generator = Generator(config.bwe.generator, keys=keys,
                                           param_dtype=param_dtype)
            self.mel_stft = MelSTFT(config.bwe, param_dtype)
        else:
            self.bwe_generator = self.mel_stft = None

    @property
    def sample_rate(self) -> int:
        """Output sample rate: 24000 (19B) or 48000 (with BWE)."""
        return self.config.sample_rate

    @property
    def samples_per_frame(self) -> int:
        """Output samples per mel frame: 240 (19B) or 480 (with BWE)."""
        return self.config.samples_per_frame

    def num_samples(self, num_frames: int) -> int:
        """The output length for ``num_frames`` mel frames (ltx-core's lengths)."""
        n = num_frames
        for s, k in zip(self.config.vocoder.upsample_rates,
                        self.config.vocoder.upsample_kernel_sizes):
            n = (n - 1) * s - 2 * ((k - s) // 2) + k
        return n if self.config.bwe is None else n * self.config.bwe.ratio

    def __call__(self, mel: jax.Array) -> jax.Array:
        mel = jnp.asarray(mel)
        if mel.ndim != 4 or mel.shape[1] != 2 or mel.shape[3] != 64:
            raise VidaxError(f"LTX-2 vocoder expects a stereo mel [B, 2, T, 64] (the audio "
                             f"decoder's output), got {list(mel.shape)}")
        with jax.default_matmul_precision("float32"):
            wave = self.vocoder(_channels_last(mel.astype(_F32)))       # [B, L, 2]
            if self.config.bwe is not None:
                wave = self._extend(wave)
        return wave.transpose(0, 2, 1)

    def _extend(self, x: jax.Array) -> jax.Array:
        """``VocoderWithBWE.forward`` after the vocoder: ``[B, L, 2]`` -> ``[B, ratio L, 2]``."""
        cfg = self.config.bwe
        b, length, c = x.shape
        x = jnp.pad(x, ((0, 0), (0, -length % cfg.hop_length), (0, 0)))
        flat = x.transpose(0, 2, 1).reshape(b * c, -1)                   # [B * 2, L']
        mel = self.mel_stft(flat)                                        # [B * 2, F, 64]
        mel = mel.reshape(b, c, *mel.shape[1:])                          # [B, 2, F, 64]
        residual = self.bwe_generator(_channels_last(mel))
        taps = jnp.asarray(hann_resample_filter(cfg.ratio))     # not stored: ltx-core's rule
        width = (taps.shape[0] - 1) // (2 * cfg.ratio)
        skip = _upsample(x, taps, cfg.ratio, width,
                         (2 * width * cfg.ratio, taps.shape[0] - cfg.ratio))
        return jnp.clip(residual + skip, -1, 1)[:, :length * cfg.ratio]
