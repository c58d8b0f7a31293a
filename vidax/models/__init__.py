"""One package per family (``wan2_1`` ... ``cogvideox``) and per shared encoder (``t5``, ``clip``,
``siglip``, ``reason1``, ``gemma``, ``llama``): ``config.py`` (the frozen configs, no JAX) and the
model modules (``dit``, ``vae``, ``model``, ...). ``tests/test_mirror.py`` keeps the mapping
modules, ``tests/models/`` and ``docs/models/`` one-for-one with these packages."""
