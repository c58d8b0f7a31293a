"""The configs of LTX-2.x's audio VAE (:class:`LTX2AudioVAEConfig`) and vocoders
(:class:`LTX2VocoderConfig`), read from a release file's ``__metadata__["config"]``
(``audio_vae`` / ``vocoder`` sections) with ltx-core's configurator rules. No JAX here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vidax.errors import VidaxError


# ------------------------------------------------------------------------- audio VAE
#: ltx-core hard-codes the audio latent's time compression (``audio_vae.LATENT_DOWNSAMPLE_FACTOR``)
AUDIO_LATENT_DOWNSAMPLE = 4


@dataclass(frozen=True)
class LTX2AudioVAEConfig:
    """ltx-core's ``AudioEncoder`` / ``AudioDecoder`` arguments (one config for both: the
    release files build them from one ``ddconfig``), plus the mel front end's settings.

    Defaults: the released audio VAE (identical in LTX-2 19B, 2.3 and 2.5). :meth:`from_dict`
    reads a release file's ``config["audio_vae"]``.
    """

    ch: int = 128
    ch_mult: tuple[int, ...] = (1, 2, 4)
    num_res_blocks: int = 2
    in_channels: int = 2
    out_ch: int = 2
    z_channels: int = 8
    double_z: bool = True
    mel_bins: int = 64
    sample_rate: int = 16000
    mel_hop_length: int = 160
    n_fft: int = 1024
    is_causal: bool = True

    def __post_init__(self):
        object.__setattr__(self, "ch_mult", tuple(int(m) for m in self.ch_mult))
        if len(self.ch_mult) != 3:
            raise VidaxError(f"LTX-2 audio VAE ch_mult {self.ch_mult}: ltx-core fixes the time "
                             f"compression at {AUDIO_LATENT_DOWNSAMPLE} (two down/up-sampling "
                             "stages), so it builds a consistent model only with 3 levels")
        if self.mel_bins % self.freq_downsample:
            raise VidaxError(f"LTX-2 audio VAE mel_bins {self.mel_bins} must divide by "
                             f"{self.freq_downsample}")
        if self.ch != self.latent_dim:
            raise VidaxError(
                f"LTX-2 audio VAE: ltx-core sizes the per-channel statistics by ch ({self.ch}), "
                f"which must equal z_channels x latent mel bins = {self.z_channels} x "
                f"{self.latent_mel_bins} = {self.latent_dim} (the patchified token width)")

    @property
    def freq_downsample(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)

    @property
    def latent_mel_bins(self) -> int:
        return self.mel_bins // self.freq_downsample

    @property
    def latent_dim(self) -> int:
        """The width of one patchified latent frame (the DiT's audio token): 8 x 16 = 128."""
        return self.z_channels * self.latent_mel_bins

    @property
    def latents_per_second(self) -> float:
        """Latent frames per second: 16000 / 160 / 4 = 25."""
        return self.sample_rate / self.mel_hop_length / AUDIO_LATENT_DOWNSAMPLE

    def audio_latent_frames(self, num_frames: int, fps: float) -> int:
        """The audio latent length of a ``num_frames`` video at ``fps``, as ltx-core sizes it
        (``AudioLatentShape.from_video_pixel_shape`` / ``from_duration``, used by
        ``ltx_pipelines.utils.helpers.noise_audio_state``; diffusers' ``LTX2Pipeline`` does the
        same): ``round(num_frames / fps * latents_per_second)`` with Python's round."""
        return round(float(num_frames) / float(fps) * self.latents_per_second)

    def mel_frames(self, latent_frames: int) -> int:
        """Mel frames the decoder returns for ``latent_frames``: ``max(4 T - 3, 1)`` (causal)."""
        return max(latent_frames * AUDIO_LATENT_DOWNSAMPLE - (AUDIO_LATENT_DOWNSAMPLE - 1), 1)

    def latent_frames(self, mel_frames: int) -> int:
        """Latent frames the encoder makes from ``mel_frames``: each stride-2 stage (causal
        padding 2 in front) maps T to ``(T - 1) // 2 + 1``."""
        for _ in range(len(self.ch_mult) - 1):
            mel_frames = (mel_frames - 1) // 2 + 1
        return mel_frames

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltx2_19b(cls) -> LTX2AudioVAEConfig:
        """Every LTX-2.x release (19B, 2.3 22B, 2.5: one architecture, and the 2.5 file's
        tensors are 2.3's): 128 -> 512 wide, 8 x 16 latents from 2 x 64 mels."""
        return cls()

    @classmethod
    def tiny(cls) -> LTX2AudioVAEConfig:
        """For tests: 16 -> 64 wide, 4 x 4 latents (16-d tokens) from 2 x 16 mels."""
        return cls(ch=16, z_channels=4, mel_bins=16)

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTX2AudioVAEConfig:
        """From a release file's ``config["audio_vae"]``, with the defaults of ltx-core's
        ``AudioEncoderConfigurator`` / ``AudioDecoderConfigurator`` (ltx-core 1.0.0
        ``model_configurator.py``). Keys the configurators do not read are not looked at;
        values that select a model vidax does not build are errors."""
        params = d.get("model", {}).get("params", {})
        dd = params.get("ddconfig", {})
        pre = d.get("preprocessing", {})
        stft, mel = pre.get("stft", {}), pre.get("mel", {})
        for key, default, supported in (("norm_type", "pixel", "pixel"),
                                        ("causality_axis", "height", "height"),
                                        ("resamp_with_conv", True, True),
                                        ("mid_block_add_attention", True, False)):
            if dd.get(key, default) != supported:
                raise VidaxError(f"LTX-2 audio VAE config {key}={dd.get(key, default)!r}: vidax "
                                 f"implements {key}={supported!r} (what every LTX-2 release uses)")
        ch_mult = tuple(dd.get("ch_mult", (1, 2, 4)))
        resolution = dd.get("resolution", 256)
        visited = {resolution // 2 ** i for i in range(len(ch_mult))}
        attn = visited & set(dd.get("attn_resolutions", (8, 16, 32)))
        if attn:
            raise VidaxError(f"LTX-2 audio VAE config attn_resolutions at {sorted(attn)}: vidax "
                             "builds the audio VAE without attention blocks (every LTX-2 release)")
        mel_bins = dd.get("mel_bins") or mel.get("n_mel_channels") or d.get(
            "variables", {}).get("mel_bins")
        if not mel_bins:
            raise VidaxError("LTX-2 audio VAE config gives no mel_bins (ddconfig.mel_bins, "
                             "preprocessing.mel.n_mel_channels or variables.mel_bins)")
        return cls(ch=dd.get("ch", 128), ch_mult=ch_mult,
                   num_res_blocks=dd.get("num_res_blocks", 2),
                   in_channels=dd.get("in_channels", 2), out_ch=dd.get("out_ch", 2),
                   z_channels=dd.get("z_channels", 8), double_z=dd.get("double_z", True),
                   mel_bins=int(mel_bins), sample_rate=params.get("sampling_rate", 16000),
                   mel_hop_length=stft.get("hop_length", 160),
                   n_fft=stft.get("filter_length", 1024), is_causal=stft.get("causal", True))


# ------------------------------------------------------------------------- vocoders
# ltx-core's _vocoder_from_config defaults (ltx_core/model/audio_vae/model_configurator.py,
# ltx-core 1.0.0) for a generator section; VocoderConfigurator requires "stereo": true and the
# resblock (and, for 2.3+, the activation) explicitly.
_GENERATOR_KEYS = {"resblock_kernel_sizes", "upsample_rates", "upsample_kernel_sizes",
                   "resblock_dilation_sizes", "upsample_initial_channel", "resblock",
                   "output_sampling_rate", "activation", "use_tanh_at_final",
                   "use_bias_at_final", "apply_final_activation", "stereo"}
_BWE_KEYS = {"input_sampling_rate", "output_sampling_rate", "hop_length", "n_fft", "win_size",
             "num_mels"}


@dataclass(frozen=True)
class LTX2VocoderGeneratorConfig:
    """One ltx-core ``Vocoder`` (a mel -> waveform generator): ``resblock`` "1" is HiFi-GAN
    (ResBlock1, leaky ReLU 0.1 before every upsampling, leaky ReLU 0.01 at the end); "AMP1"
    is BigVGAN-v2 (AMPBlock1 with SnakeBeta behind anti-aliased 2x resampling, also at the
    end). Input: 128 channels (stereo x 64 mel bins); output: 2 channels. Defaults: the 19B
    HiFi-GAN."""

    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    upsample_rates: tuple[int, ...] = (6, 5, 2, 2, 2)
    upsample_kernel_sizes: tuple[int, ...] = (16, 15, 8, 4, 4)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    upsample_initial_channel: int = 1024
    resblock: str = "1"
    output_sampling_rate: int = 24000
    use_tanh_at_final: bool = True         # else clamp to [-1, 1]
    apply_final_activation: bool = True    # the BWE generator has none
    use_bias_at_final: bool = True

    def __post_init__(self):
        for name in ("resblock_kernel_sizes", "upsample_rates", "upsample_kernel_sizes"):
            object.__setattr__(self, name, tuple(int(v) for v in getattr(self, name)))
        object.__setattr__(self, "resblock_dilation_sizes",
                           tuple(tuple(int(v) for v in d) for d in self.resblock_dilation_sizes))
        if self.resblock not in ("1", "AMP1"):
            raise VidaxError(f"LTX-2 vocoder resblock {self.resblock!r}: vidax implements '1' "
                             "(HiFi-GAN, LTX-2 19B) and 'AMP1' (BigVGAN-v2, LTX-2.3+)")
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise VidaxError("LTX-2 vocoder: upsample_rates and upsample_kernel_sizes differ "
                             f"in length ({self.upsample_rates}, {self.upsample_kernel_sizes})")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes) or any(
                len(d) != 3 for d in self.resblock_dilation_sizes):
            raise VidaxError("LTX-2 vocoder: one dilation triple per resblock kernel size is "
                             f"needed, got {self.resblock_kernel_sizes} and "
                             f"{self.resblock_dilation_sizes}")
        if any(k % 2 == 0 for k in self.resblock_kernel_sizes):
            raise VidaxError(f"LTX-2 vocoder resblock_kernel_sizes {self.resblock_kernel_sizes}"
                             ": vidax implements odd kernels only (every release's)")
        if self.upsample_initial_channel % 2 ** len(self.upsample_rates):
            raise VidaxError(f"LTX-2 vocoder upsample_initial_channel "
                             f"{self.upsample_initial_channel} does not halve "
                             f"{len(self.upsample_rates)} times")

    @property
    def amp(self) -> bool:
        return self.resblock == "AMP1"

    @property
    def hop(self) -> int:
        """Output samples per input (mel) frame."""
        hop = 1
        for rate in self.upsample_rates:
            hop *= rate
        return hop

    @classmethod
    def from_dict(cls, d: dict[str, Any], *, resblock: str, section: str,
                  apply_final_activation: bool = True,
                  output_sampling_rate: int | None = None) -> LTX2VocoderGeneratorConfig:
        unknown = sorted(set(d) - _GENERATOR_KEYS - (_BWE_KEYS if section == "bwe" else set()))
        if unknown:
            raise VidaxError(f"unknown LTX-2 vocoder config keys in {section!r}: {unknown}")
        # what ltx-core's VocoderConfigurator checks (check_config_value: the key must be there)
        required = {"resblock": resblock, "stereo": True}
        if resblock == "AMP1":
            required["activation"] = "snakebeta"
        for key, want in required.items():
            if d.get(key) != want:
                raise VidaxError(f"LTX-2 vocoder config {section}.{key}={d.get(key)!r}: ltx-core "
                                 f"and vidax need {want!r} here")
        # ltx-core passes these itself and ignores the file's values: refuse a contradiction
        if d.get("apply_final_activation", apply_final_activation) != apply_final_activation:
            raise VidaxError(f"LTX-2 vocoder config {section}.apply_final_activation="
                             f"{d['apply_final_activation']!r}: ltx-core builds this generator "
                             f"with {apply_final_activation}")
        rate = d.get("output_sampling_rate", 24000)
        if output_sampling_rate is not None:     # the BWE's rates, which ltx-core passes
            if section == "vocoder" and rate != output_sampling_rate and \
                    "output_sampling_rate" in d:
                raise VidaxError(f"LTX-2 vocoder config vocoder.output_sampling_rate={rate}: "
                                 f"the BWE's input_sampling_rate is {output_sampling_rate}")
            rate = output_sampling_rate
        return cls(
            resblock_kernel_sizes=d.get("resblock_kernel_sizes", (3, 7, 11)),
            upsample_rates=d.get("upsample_rates", (6, 5, 2, 2, 2)),
            upsample_kernel_sizes=d.get("upsample_kernel_sizes", (16, 15, 8, 4, 4)),
            resblock_dilation_sizes=d.get("resblock_dilation_sizes", ((1, 3, 5),) * 3),
            upsample_initial_channel=d.get("upsample_initial_channel", 1024),
            resblock=resblock, output_sampling_rate=rate,
            use_tanh_at_final=d.get("use_tanh_at_final", True),
            apply_final_activation=apply_final_activation,
            use_bias_at_final=d.get("use_bias_at_final", True))


@dataclass(frozen=True)
class LTX2BWEConfig:
    """ltx-core's bandwidth extension (``VocoderWithBWE``): the vocoder's waveform at
    ``input_sampling_rate`` -> causal log-mel (``n_fft``-point STFT, Hann window ``n_fft``
    long, hop ``hop_length``, ``num_mels`` bins: the stored ``mel_stft`` bases) -> the
    ``generator`` residual, added to a Hann-sinc resampling of the waveform by
    ``output_sampling_rate / input_sampling_rate``."""

    generator: LTX2VocoderGeneratorConfig
    input_sampling_rate: int = 16000
    output_sampling_rate: int = 48000
    hop_length: int = 80
    n_fft: int = 512
    num_mels: int = 64

    def __post_init__(self):
        if not self.generator.amp or self.generator.apply_final_activation:
            raise VidaxError("LTX-2 BWE generator: ltx-core builds it with AMP1 blocks and no "
                             "final activation")
        if self.output_sampling_rate % self.input_sampling_rate:
            raise VidaxError(f"LTX-2 BWE: {self.output_sampling_rate} Hz is not an integer "
                             f"multiple of {self.input_sampling_rate} Hz")
        if self.num_mels != 64:
            raise VidaxError(f"LTX-2 BWE num_mels {self.num_mels}: the generator reads 2 x 64 "
                             "mel bins (its conv_pre is 128 wide in ltx-core)")
        if self.n_fft < self.hop_length:
            raise VidaxError(f"LTX-2 BWE n_fft {self.n_fft} < hop_length {self.hop_length}")
        if self.generator.hop != self.hop_length * self.ratio:
            raise VidaxError(f"LTX-2 BWE: the generator makes {self.generator.hop} samples per "
                             f"mel frame, the resampled skip {self.hop_length * self.ratio}")

    @property
    def ratio(self) -> int:
        return self.output_sampling_rate // self.input_sampling_rate

    @property
    def n_freqs(self) -> int:
        return self.n_fft // 2 + 1


@dataclass(frozen=True)
class LTX2VocoderConfig:
    """The vocoder of an LTX-2.x release: ``vocoder`` (the mel -> waveform generator) and,
    for LTX-2.3 and 2.5, ``bwe`` (the bandwidth extension to 48 kHz; None for the 19B)."""

    vocoder: LTX2VocoderGeneratorConfig = LTX2VocoderGeneratorConfig()
    bwe: LTX2BWEConfig | None = None

    def __post_init__(self):
        if self.bwe is not None and (
                not self.vocoder.amp
                or self.vocoder.output_sampling_rate != self.bwe.input_sampling_rate):
            raise VidaxError("LTX-2 vocoder with BWE: ltx-core's VocoderWithBWE runs an AMP1 "
                             "vocoder at the BWE's input_sampling_rate")

    @property
    def sample_rate(self) -> int:
        """The output waveform's rate: 24000 (19B), 48000 (2.3 / 2.5)."""
        return (self.bwe.output_sampling_rate if self.bwe is not None
                else self.vocoder.output_sampling_rate)

    @property
    def samples_per_frame(self) -> int:
        """Output samples per mel frame: 240 (19B, 24 kHz), 480 (2.3 / 2.5, 48 kHz)."""
        return self.vocoder.hop * (self.bwe.ratio if self.bwe is not None else 1)

    # ------------------------------------------------------------------ presets
    @classmethod
    def ltx2_19b(cls) -> LTX2VocoderConfig:
        """``ltx-2-19b-*``: HiFi-GAN, 1024 wide, x240 (6, 5, 2, 2, 2), tanh, 24 kHz."""
        return cls()

    @classmethod
    def ltx2_3_22b(cls) -> LTX2VocoderConfig:
        """``ltx-2.3-22b-*`` and LTX-2.5's audio file: BigVGAN-v2 (1536 wide, x160 to
        16 kHz, clamped) + BWE (512 wide, x240 over a hop-80 mel, to 48 kHz)."""
        amp = dict(resblock="AMP1", use_tanh_at_final=False, use_bias_at_final=False)
        return cls(
            vocoder=LTX2VocoderGeneratorConfig(
                upsample_initial_channel=1536, upsample_rates=(5, 2, 2, 2, 2, 2),
                upsample_kernel_sizes=(11, 4, 4, 4, 4, 4), output_sampling_rate=16000, **amp),
            bwe=LTX2BWEConfig(generator=LTX2VocoderGeneratorConfig(
                upsample_initial_channel=512, upsample_rates=(6, 5, 2, 2, 2),
                upsample_kernel_sizes=(12, 11, 4, 4, 4), output_sampling_rate=48000,
                apply_final_activation=False, **amp)))

    @classmethod
    def tiny(cls) -> LTX2VocoderConfig:
        """For tests: a HiFi-GAN 16 wide, x6 (3, 2), two resblock kernels."""
        return cls(vocoder=LTX2VocoderGeneratorConfig(
            resblock_kernel_sizes=(3, 5), resblock_dilation_sizes=((1, 3, 5), (1, 2, 3)),
            upsample_rates=(3, 2), upsample_kernel_sizes=(7, 4), upsample_initial_channel=16))

    @classmethod
    def tiny_bwe(cls) -> LTX2VocoderConfig:
        """For tests: BigVGAN-v2 16 wide x4 + a BWE 16 wide x30 over a 32-point, hop-10 mel."""
        amp = dict(resblock="AMP1", use_tanh_at_final=False, use_bias_at_final=False,
                   resblock_kernel_sizes=(3, 5), resblock_dilation_sizes=((1, 3, 5), (1, 2, 3)),
                   upsample_initial_channel=16)
        return cls(
            vocoder=LTX2VocoderGeneratorConfig(upsample_rates=(2, 2), upsample_kernel_sizes=(4, 4),
                                               output_sampling_rate=16000, **amp),
            bwe=LTX2BWEConfig(generator=LTX2VocoderGeneratorConfig(
                upsample_rates=(5, 3, 2), upsample_kernel_sizes=(11, 5, 4),
                output_sampling_rate=48000, apply_final_activation=False, **amp),
                hop_length=10, n_fft=32))

    # ------------------------------------------------------------------ from_dict
    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LTX2VocoderConfig:
        """From a release file's ``config["vocoder"]``, as ltx-core's ``VocoderConfigurator``
        reads it: without a ``bwe`` section, the flat HiFi-GAN kwargs (``resblock`` "1");
        with one, ``{"vocoder": ..., "bwe": ...}`` (both AMP1 / snakebeta). ltx-core's
        defaults fill missing keys; ``win_size`` must equal ``n_fft`` (ltx-core windows over
        ``n_fft`` and ignores it)."""
        if "bwe" not in d:
            return cls(vocoder=LTX2VocoderGeneratorConfig.from_dict(d, resblock="1",
                                                                    section="vocoder"))
        unknown = sorted(set(d) - {"vocoder", "bwe"})
        if unknown:
            raise VidaxError(f"unknown LTX-2 vocoder config keys {unknown} next to 'bwe'")
        b = d["bwe"]
        try:
            rates = {k: b[k] for k in ("input_sampling_rate", "output_sampling_rate",
                                       "hop_length", "n_fft", "num_mels")}
        except KeyError as e:
            raise VidaxError(f"LTX-2 vocoder config bwe has no {e.args[0]!r} (ltx-core "
                             "requires it)") from e
        if b.get("win_size", b["n_fft"]) != b["n_fft"]:
            raise VidaxError(f"LTX-2 vocoder config bwe.win_size={b['win_size']} != n_fft="
                             f"{b['n_fft']}: ltx-core's STFT window is n_fft long")
        vocoder = LTX2VocoderGeneratorConfig.from_dict(
            d.get("vocoder", {}), resblock="AMP1", section="vocoder",
            output_sampling_rate=b["input_sampling_rate"])
        generator = LTX2VocoderGeneratorConfig.from_dict(
            b, resblock="AMP1", section="bwe", apply_final_activation=False,
            output_sampling_rate=b["output_sampling_rate"])
        return cls(vocoder=vocoder, bwe=LTX2BWEConfig(generator=generator, **rates))
