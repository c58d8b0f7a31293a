"""Pipelines: a release folder laid out as its authors publish it -> video frames.

``vidax.pipeline(model_type, checkpoint_dir, ...)`` returns the family's pipeline: calling it
with a prompt returns uint8 frames ``[F, H, W, 3]`` (numpy), and its ``write`` method writes
them as an mp4. The families, their tasks and variants are listed below (read from each
family module, so the list is the code's); each family's guide is docs/models/<model_type>.md.

Each family module (``vidax.pipelines.<model_type>``) offers the same three names, which
``vidax generate`` drives so that every input error surfaces before any weight is read:

* ``inspect_folder(folder, variant=None)``: which release the folder is and where each
  component file lies, without reading a weight (one error listing every missing file);
* ``make_request(task, variant, prompt, **options)``: every generation option validated and
  resolved against the release's defaults (images and noise files read here);
* ``Pipeline.from_release(release, ...)``: the loaded pipeline.

They are built on the skeleton in :mod:`vidax.pipelines.base` (its docstring lists the hooks
a family implements; docs/development.md, "Adding a family pipeline").
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import textwrap
from types import ModuleType

from vidax.errors import VidaxError

#: model_type -> the module that implements its pipeline.
PIPELINES = {"wan2_1": "vidax.pipelines.wan2_1", "wan2_2": "vidax.pipelines.wan2_2",
             "ltx_video": "vidax.pipelines.ltx_video", "cogvideox": "vidax.pipelines.cogvideox",
             "cosmos2_5": "vidax.pipelines.cosmos2_5",
             "cosmos3": "vidax.pipelines.cosmos3",
             "hunyuan_video": "vidax.pipelines.hunyuan_video",
             "hunyuan_video1_5": "vidax.pipelines.hunyuan_video1_5",
             "ltx2_5": "vidax.pipelines.ltx2_5"}

#: The precision policies every pipeline accepts (see each family's module docstring).
PRECISIONS = ("bf16", "fp32")


def family(model_type: str) -> ModuleType:
    """The pipeline module of ``model_type``."""
    if model_type not in PIPELINES:
        from vidax.registry import did_you_mean

        raise VidaxError(f"no pipeline for model_type {model_type!r}"
                         f"{did_you_mean(model_type, PIPELINES)}; pipelines exist for: "
                         f"{', '.join(PIPELINES)}")
    return importlib.import_module(PIPELINES[model_type])


def pipeline(model_type: str, checkpoint_dir: str | os.PathLike, *, variant: str | None = None,
             mesh=None, precision: str = "bf16", console=None, dit=None, vae=None,
             text_encoder=None, image_encoder=None, quantized: str | None = None,
             loras=None, lora_mode: str = "merge", offload: str | None = None,
             quantize: str | None = None, max_device_memory=None, **folder_options):
    """The generation pipeline of a release folder (the guides: docs/models/<model_type>.md).

    Args:
      model_type: one of :data:`PIPELINES` (the families below).
      checkpoint_dir: the folder as the authors release it (their file names).
      variant: the release, one of the family's variants below; default: read from the
        folder (the DiT's ``config.json``, ...).
      mesh: a ``jax.sharding.Mesh`` to place the weights on (``vidax.sharding.make_mesh``;
        docs/hardware_and_sharding.md).
      precision: ``"bf16"`` (the authors' mixed precision, the default) or ``"fp32"``.
      console: a ``rich.console.Console`` for progress; ``None`` is quiet.
      dit, vae, text_encoder, image_encoder: a component from elsewhere, replacing the
        folder's (which then need not hold it): a single file (a folder, for a text
        encoder); where a family has several behind one option, a dict, e.g. Wan2.2 A14B's
        ``dit={"high": FILE, "low": FILE}`` (:mod:`vidax.pipelines.overrides`; the CLI's
        ``--dit`` ...). Cosmos-Predict2.5's ``text_encoder=DIR`` is its Reason1 folder
        (weights and tokenizer).
      quantized: what becomes of a quantized file's weights (fp8, GGUF;
        docs/loading_weights.md): ``"keep"`` (fp8 and GGUF Q8_0 stay quantized on the device),
        ``"dequantize"``, or None (the default: fp8 kept, GGUF dequantized).
      loras: LoRA files for the DiT (docs/lora.md): paths, ``"FILE[:STRENGTH][@high|@low]"``
        strings (``@`` picks a Wan2.2 A14B expert), ``(path, strength)`` pairs or
        ``vidax.lora.LoraSpec``; each is mapped onto the DiT before any weight is read.
      lora_mode: ``"merge"`` (into the weights at load) or ``"live"`` (adapters whose
        strengths ``vidax.lora.set_strengths(pipe.dit, {...})`` changes between calls).
      offload: where the weights live between uses (docs/memory.md): ``"none"`` (the
        default: all on the devices), ``"model"`` (in host memory, each component on the
        devices for its phase only) or ``"block"`` (``"model"``, and the DiT's blocks
        streamed onto the devices a block ahead of their use inside each step).
      quantize: ``"fp8"`` or ``"int8"``: the DiT's Linear weights quantized as they are
        loaded (docs/loading_weights.md); None (default): as stored.
      max_device_memory: a device-memory budget (bytes, or ``"24GiB"``) the memory check
        plans to instead of what the devices report.
      folder_options: the family's own (its ``inspect_folder``'s keywords), e.g. LTX-2's
        ``distilled_lora="FILE[:STRENGTH]"`` (the dev two-stage pipeline's stage-2 LoRA).

    Every component file is found and verified against its model before any weight is read;
    a missing file, or a file that is not the component it stands for, is one clear error.
    A diffusers folder (``model_index.json``) loads where the family's pipeline reads one
    (CogVideoX, Cosmos-Predict2.5, Cosmos3, Wan2.1, Wan2.2); elsewhere the error names the
    components vidax has no diffusers layout of (docs/generating.md).
    """
    from vidax.pipelines import offload as offloading
    from vidax.pipelines import overrides

    module = family(model_type)
    takes = inspect.signature(module.inspect_folder).parameters
    unknown = sorted(set(folder_options) - set(takes))
    if unknown:
        raise VidaxError(f"vidax.pipeline({model_type!r}, ...): no option "
                         f"{', '.join(unknown)} for this family")
    release = overrides.inspect(module, checkpoint_dir, variant=variant, model_type=model_type,
                                components={
                                    "dit": dit, "vae": vae, "text_encoder": text_encoder,
                                    "image_encoder": image_encoder}, **folder_options)
    return module.Pipeline.from_release(release, mesh=mesh, precision=precision,
                                        console=console, quantized=quantized, loras=loras,
                                        lora_mode=lora_mode, offload=offload, quantize=quantize,
                                        max_device_memory=None if max_device_memory is None
                                        else offloading.parse_bytes(max_device_memory))


def _facts(model_type: str) -> dict:
    """A family module's ``NAME`` (its Pipeline's), ``TASKS`` and ``VARIANTS``, read from its
    source without importing it (which would import JAX); ``{}`` where that fails."""
    try:
        tree = ast.parse(open(importlib.util.find_spec(PIPELINES[model_type]).origin,
                              encoding="utf-8").read())
    except (OSError, TypeError, AttributeError, SyntaxError, ImportError):
        return {}
    facts = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("NAME", "TASKS", "VARIANTS")):
            try:
                facts.setdefault(node.targets[0].id, ast.literal_eval(node.value))
            except ValueError:
                pass
    return facts


def _families_doc() -> str:
    """The families section of the docstrings: one bullet per :data:`PIPELINES` entry."""
    lines = ["", "Families, as ``model_type`` (name): tasks; variants:", ""]
    for model_type in PIPELINES:
        f = _facts(model_type)
        name = f" ({f['NAME']})" if isinstance(f.get("NAME"), str) else ""
        tasks = f"tasks {', '.join(f['TASKS'])}; " if f.get("TASKS") else ""
        variants = (f"variants {', '.join(f['VARIANTS'])}" if f.get("VARIANTS")
                    else f"variants: see :mod:`{PIPELINES[model_type]}`")
        lines.append(textwrap.fill(f"* ``{model_type}``{name}: {tasks}{variants}", width=88,
                                   subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False))
    return "\n".join(lines) + "\n"


_FAMILIES = _families_doc()
if __doc__:  # (None under python -OO)
    __doc__ += _FAMILIES
if pipeline.__doc__:
    pipeline.__doc__ = pipeline.__doc__.rstrip() + "\n" + textwrap.indent(_FAMILIES, "    ")
