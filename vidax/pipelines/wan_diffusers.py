"""Wan2.1 / Wan2.2 diffusers folders (``Wan-AI/Wan2.x-*-Diffusers``: ``model_index.json``,
``transformer/`` (and A14B's ``transformer_2/``), ``vae/``, ``text_encoder/``, ``tokenizer/``,
I2V's ``image_encoder/``) as the release the Wan pipelines run; docs/generating.md.

Each component is read in its diffusers (transformers, for the encoders) key layout:
``WanTransformer3DModel`` and ``AutoencoderKLWan`` (vidax.translator.mappings.wan2_2_diffusers),
``UMT5EncoderModel`` and ``CLIPVisionModel`` (vidax.translator.mappings.comfyui). Their
settings come from each folder's ``config.json`` (the DiT's, the VAE's, UMT5's); CLIP's are
the release's (or the tiny test config). A14B: ``transformer/`` is the high-noise expert
(timesteps >= ``boundary_ratio * num_train_timesteps``), ``transformer_2/`` the low-noise one
(diffusers 0.42.1 ``pipelines/wan/pipeline_wan.py``, ``WanPipeline``'s docstring);
``boundary_ratio`` from model_index.json is the boundary.
The sampling is vidax's Wan pipeline as for the authors' folder (its defaults, its scheduler):
diffusers' scheduler_config.json is not read. Components given from elsewhere
(:mod:`vidax.pipelines.overrides`) replace the folder's, as for the authors' folders.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vidax import registry
from vidax.errors import VidaxError
from vidax.models.t5.config import T5Config
from vidax.pipelines.base import Needed, Part, Release, find_files
from vidax.pipelines.inputs import read_json_config

#: The Wan families whose pipelines read a diffusers folder.
FAMILIES = ("wan2_1", "wan2_2")
TOKENIZER = Needed("tokenizer", "tokenizer", ("tokenizer.json",), "the UMT5 tokenizer")


def _in(spec, folder: str, name: str = "model"):
    """``spec`` looking for its weights in ``folder/`` (``save_pretrained``'s names: an
    index, else the one file)."""
    return dataclasses.replace(spec, files=(f"{folder}/{name}.safetensors.index.json",
                                            f"{folder}/{name}*.safetensors"))


def inspect_folder(module, folder: Path, variant: str | None = None) -> Release:
    """The release of a Wan diffusers folder for the pipeline module ``module``
    (:mod:`vidax.pipelines.wan2_1` or :mod:`~vidax.pipelines.wan2_2`), no weight read."""
    from vidax.pipelines import wan2_1

    model_type = module.MODEL_TYPE
    index = read_json_config(folder / "model_index.json")
    two = bool((index.get("transformer_2") or [None])[0])
    if two and model_type == "wan2_1":
        raise VidaxError(f"{folder}: a diffusers folder with two experts (transformer_2/) is "
                         f"Wan2.2 A14B: run vidax generate wan2_2 --checkpoint-dir {folder}")
    experts = {module.HIGH: "transformer", module.LOW: "transformer_2"} if two else {
        "dit": "transformer"}
    config_path = folder / "transformer" / "config.json"
    if not config_path.is_file():
        raise VidaxError(f"{folder} is not a complete Wan diffusers folder: missing "
                         "transformer/config.json (the DiT's config). Nothing was loaded.")
    dit_spec = registry.get(model_type, "dit", "diffusers")
    dit = wan2_1.dit_config(config_path, dit_spec.config_class().from_dict, "Wan")
    if model_type == "wan2_1":
        task = dit.model_type
    else:
        task = "ti2v" if dit.in_dim == 48 else "i2v" if dit.in_dim == 36 else "t2v"
        if two == (task == "ti2v"):
            raise VidaxError(f"{config_path}: a {task} DiT " + (
                "beside transformer_2/: TI2V-5B has one DiT" if two else
                "without transformer_2/: the A14B diffusers folders hold both experts"))
    tiny = module.tiny_configs(task)
    names = [v for v in module.VARIANTS if v.split("-")[0] == task]
    found = wan2_1.identify(dit, {v: dit_spec.make_config(v) for v in names}, tiny["dit"])
    if variant not in (None, "tiny") and variant not in names:
        raise VidaxError(f"{config_path} is a {task} DiT, not a {variant} one")
    variant = variant or found
    if variant is None:
        raise VidaxError(f"{config_path} describes a Wan {task} DiT that is none of the "
                         f"releases ({', '.join(module.VARIANTS)}); name the variant")
    vae_type = "wan2_2" if task == "ti2v" else "wan2_1"
    specs = {key: _in(dit_spec, d, "diffusion_pytorch_model") for key, d in experts.items()}
    specs["vae"] = registry.get(vae_type, "vae", "diffusers")
    specs["text_encoder"] = _in(registry.get("wan2_1", "text_encoder", "transformers"),
                                "text_encoder")
    if "image_encoder" in tiny:
        specs["image_encoder"] = _in(registry.get("wan2_1", "image_encoder", "transformers"),
                                     "image_encoder")
    parts = [Part(key, spec, wan2_1.ROLES.get(key, "the DiT")) for key, spec in specs.items()]
    needed = [Needed(f"{d}_folder", d, ("config.json",), f"{d}'s config")
              for d in (*experts.values(), "vae")]
    files = find_files(folder, parts, [*needed, TOKENIZER], what="Wan diffusers folder")
    configs = dict(tiny) if variant == "tiny" else {
        c: registry.resolve(model_type, variant, c)[0].make_config(
            registry.resolve(model_type, variant, c)[1]) for c in tiny}
    configs["dit"] = dit
    for key, d in experts.items():
        other = wan2_1.dit_config(folder / d / "config.json", dit_spec.config_class().from_dict,
                                  "Wan")
        if other != dit:
            raise VidaxError(f"{folder}: transformer/ and {d}/ describe different DiTs")
        configs[key] = dit
    configs["vae"] = specs["vae"].make_config(overrides=read_json_config(
        files["vae_folder"] / "config.json"))
    te_json = folder / "text_encoder" / "config.json"
    if te_json.is_file():
        configs["text_encoder"] = T5Config.from_dict(read_json_config(te_json))
    wan2_1.check_text_width(config_path, configs)
    defaults = module.defaults_for(variant, task)
    if two and index.get("boundary_ratio") is not None:
        defaults = dataclasses.replace(defaults, boundary=float(index["boundary_ratio"]))
    return Release(folder, task, variant, defaults, configs, files, specs)
