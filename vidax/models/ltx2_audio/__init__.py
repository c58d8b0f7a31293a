"""LTX-2.x's audio path (LTX-2 19B, LTX-2.3 and LTX-2.5 22B): the audio VAE (stereo log-mel
<-> 8 x 16 latents, :mod:`~vidax.models.ltx2_audio.audio_vae`) and the vocoders (HiFi-GAN for
the 19B, BigVGAN-v2 with bandwidth extension for 2.3+, :mod:`~vidax.models.ltx2_audio.vocoder`).
Registered under the ``ltx2_5`` model type (components ``audio_vae`` and ``vocoder``); the
guide is docs/models/ltx2_audio.md."""
