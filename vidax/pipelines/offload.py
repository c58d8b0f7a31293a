"""Where a pipeline keeps its weights between uses: ``offload="none" | "model" | "block"``
(``vidax generate --offload``; docs/memory.md).

``none``
    Every component's weights on the device(s) from load to the end (the default).
``model``
    Every component's weights in host memory (``pinned_host``, their shardings kept), each
    copied onto the device for the phase that uses it and dropped after: the text encoders,
    image encoder and VAE encoder when ``prepare`` first touches them (together, for the
    prompt's encoding; released before sampling), the DiT for its sampling loop (one
    Wan2.2 expert at a time), the VAE for the decode. The device holds the largest
    component, never two phases' at once.
``block``
    ``model`` for every component but the DiT, whose transformer blocks stay in host memory
    and are streamed onto the device inside each jitted step, a block ahead of their use
    (:func:`vidax.nn.offload.stream`); the DiT's other weights (embeddings, the head) stay on
    the device. The device holds about two blocks of the DiT.

Parameters are moved to host memory one at a time as they are loaded
(``vidax.loading.load_with_report(host=...)``), so a release too large for the device is
never placed on it whole. The values are the same in every mode: sampling is equal bit for
bit (tests/pipelines/test_offload_families.py).

:class:`Offloading` is the part of :class:`vidax.pipelines.base.PipelineBase` that does it:
a non-DiT component under ``model`` / ``block`` is not an attribute of the pipeline but
held in host memory, and reading ``pipe.<key>`` returns its device copy, made on first use
and kept until :meth:`Offloading.release_components` (at the start of each sampling loop and
after each decode).
"""

from __future__ import annotations

import math

from vidax.errors import VidaxError
from vidax.nn import offload
from vidax.pipelines import memory

#: The ``offload=`` choices.
MODES = ("none", "model", "block")


def check_mode(mode: str | None, *, auto: bool = False) -> str:
    """``mode`` checked (None: ``"none"``); ``auto``: ``"auto"`` allowed too."""
    mode = "none" if mode is None else mode
    if mode not in MODES and not (auto and mode == "auto"):
        raise VidaxError(f"offload must be one of {', '.join(MODES + ('auto',) * auto)}, got "
                         f"{mode!r}")
    return mode


_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 10**3, "kib": 2**10, "m": 2**20, "mb": 10**6,
          "mib": 2**20, "g": 2**30, "gb": 10**9, "gib": 2**30, "t": 2**40, "tb": 10**12,
          "tib": 2**40}


def parse_bytes(value) -> int:
    """``"24GiB"``, ``"24G"`` (GiB), ``"80GB"`` (10**9), ``"512MiB"``, or a number of bytes
    -> bytes; anything else is one clear error."""
    import re

    text = str(value).strip().lower().replace(" ", "")
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([a-z]*)", text)
    if not match or match.group(2) not in _UNITS or float(match.group(1)) <= 0:
        raise VidaxError(f"max_device_memory {value!r}: expected a positive size such as "
                         "'24GiB', '24G' (GiB), '80GB' (10^9 bytes) or a number of bytes")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def plan(cls, release, request, *, offload: str | None, enforce: bool, **options):
    """:meth:`~vidax.pipelines.base.PipelineBase.check_memory` for ``offload`` (``"auto"``:
    the first of ``none``, ``model``, ``block`` whose estimate fits the devices, or the
    ``max_device_memory`` budget; on the CPU, whose host memory is its device memory, only
    ``none``). The estimate's ``offload`` says which mode it is for; when none fits, one
    error gives each mode's peak."""
    mode = check_mode(offload, auto=True)
    modes = (mode,) if mode != "auto" else MODES
    tried = []
    for m in modes:
        pipe = cls(release, offload=m, **options)
        estimate = pipe.memory_fits(pipe.resolve(request), True,
                                    enforce and len(modes) == 1)
        if estimate.fits or len(modes) == 1:
            return estimate
        if m != "none" and estimate.on_device is None:
            break   # the CPU: its host memory is its device memory, offload saves nothing
        tried.append(f"--offload {m}: {memory.gib(estimate.peak)}")
    from vidax.errors import MemoryEstimateError

    error = MemoryEstimateError(
        f"{estimate.summary()}. This request does not fit with any offload mode ("
        + "; ".join(tried) + "): try --quantize fp8, a smaller --size or fewer --frames, or "
        "a mesh over more devices (--mesh); or proceed anyway with --skip-memory-check. "
        "Nothing was loaded.", estimate)
    if enforce:
        raise error
    return estimate


def block_bytes(spec, config, itemsize, param_bytes=None) -> tuple[int, int, int]:
    """``(rest, largest block, blocks)`` bytes of a DiT's parameters at ``itemsize`` bytes a
    value (``param_bytes(name, shape)``: a parameter's own count, e.g. quantized): those
    outside its transformer blocks, the largest block's, all blocks' together."""
    from vidax.translator.verify import abstract_model, flat_params

    model = abstract_model(spec.model_class(), config)
    lists = offload.block_lists(model)
    rest, blocks = 0, {}
    for name, a in flat_params(model).items():
        n = (param_bytes(name, a.shape) if param_bytes is not None
             else math.prod(a.shape) * itemsize)
        head, _, tail = name.partition(".")
        if head in lists:
            block = f"{head}.{tail.split('.', 1)[0]}"
            blocks[block] = blocks.get(block, 0) + n
        else:
            rest += n
    return rest, max(blocks.values(), default=0), sum(blocks.values())


def phase_weights(pipe, weights: dict, shards: dict) -> tuple[dict, int, str]:
    """Under ``pipe.offload`` (not ``none``): the weights on the device in each phase of a
    generation (``prompt``: the encoders, ``DiT step``, ``VAE decode``), the bytes held in
    host memory, and a note; ``weights``: each weight file's bytes per device, ``shards``:
    how many ways each is split over the mesh."""
    specs = pipe.release.specs
    dits = [k for k in weights if specs[k].component == "dit"]
    others = [k for k in weights if k not in dits]
    vae = [k for k in others if "vae" in specs[k].component or specs[k].component
           in ("vocoder",)]
    if pipe.offload == "model":
        dit = max((weights[k] for k in dits), default=0)   # one DiT (expert) at a time
        note = "offload model: each component on the device for its phase"
        host = sum(weights.values())
    else:
        dit, host = 0, sum(weights[k] for k in others)
        for k in dits:
            ways = shards.get(k, 1)
            rest, block, total = block_bytes(specs[k], pipe.release.configs[k], _itemsize(
                weights[k] * ways, specs[k], pipe.release.configs[k]),
                _quantized(pipe, specs[k], pipe.release.configs[k]))
            streamed = min(total, (offload.AHEAD + 2) * block)
            dit = max(dit, -(-(rest + streamed) // ways))
            host += -(-total // ways)
        note = (f"offload block: the DiT's blocks streamed, {offload.AHEAD + 2} on the device "
                "at most")
    return ({"prompt": sum(weights[k] for k in others), "DiT step": dit,
             "VAE decode": sum(weights[k] for k in vae)}, host, note)


def _quantized(pipe, spec, config):
    """``param_bytes(name, shape)`` of a DiT loaded with ``pipe.quantize`` (None: without)."""
    quantize = getattr(pipe, "quantize", None)
    if quantize is None:
        return None
    import numpy as np

    from vidax.translator import quantize as q
    from vidax.translator.verify import abstract_model

    kernels = q.eligible(abstract_model(spec.model_class(), config))
    itemsize = np.dtype(pipe.param_dtype("dit")).itemsize
    return lambda name, shape: (math.prod(shape) * q.CODES[quantize].itemsize + shape[-1] * 4
                                if name in kernels else math.prod(shape) * itemsize)


def _itemsize(held: int, spec, config) -> float:
    """Bytes a value of a weight file as the estimate holds it (quantized files: their
    average)."""
    from vidax.translator.verify import abstract_params

    count = sum(math.prod(a.shape) for a in abstract_params(spec.model_class(),
                                                            config).values())
    return held / max(count, 1)


class Offloading:
    """The pipeline's side of ``offload`` (the module docstring)."""

    offload: str = "none"

    def _init_offload(self, mode: str | None) -> None:
        self.offload = check_mode(mode)
        self._offloaded: dict = {}    # key -> the component, its weights in host memory
        self._resident: dict = {}     # key -> its device copy, while in use
        self._dit_copy: tuple | None = None   # (id of the host params, their device copy)

    def host_placement(self, key: str, spec, config):
        """``name -> bool`` of the parameters of weight file ``key`` that are loaded into host
        memory (None: none): under ``model`` all of them; under ``block`` all but a DiT's,
        whose transformer blocks only (:func:`vidax.nn.offload.block_lists`)."""
        if self.offload == "none":
            return None
        if spec.component == "dit" and self.offload == "block":
            from vidax.translator.verify import abstract_model

            return offload.in_blocks(offload.block_lists(
                abstract_model(spec.model_class(), config)))
        return lambda name: True

    def keep_offloaded(self, key: str, spec) -> None:
        """After ``adopt``: a non-DiT component under ``model`` / ``block`` moves from the
        pipeline's attributes to the host-held ones (read back through :meth:`__getattr__`)."""
        if self.offload != "none" and spec.component != "dit" and key in vars(self):
            self._offloaded[key] = vars(self).pop(key)

    def __getattr__(self, name: str):
        held = vars(self).get("_offloaded")
        if not held or name not in held:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        resident = vars(self)["_resident"]
        if name not in resident:
            resident[name] = None if held[name] is None else offload.to_device(held[name])
        return resident[name]

    def release_components(self) -> None:
        """Drop the device copies of the host-held components (their buffers are freed once
        nothing else holds them)."""
        if self.offload != "none":
            self._resident.clear()

    def dit_on_device(self, params):
        """The DiT's parameters a sampling step runs with: under ``model`` their device copy
        (made once per loop, and again when the loop changes model: Wan2.2's experts), else
        as they are (``block``: the blocks stay in host memory, streamed by the step)."""
        if self.offload != "model":
            return params
        if self._dit_copy is None or self._dit_copy[0] != id(params):
            self._dit_copy = None                  # the previous copy first
            self._dit_copy = (id(params), offload.to_device(params))
        return self._dit_copy[1]

    def release_dit(self) -> None:
        self._dit_copy = None
