"""LoRAs on the CogVideoX, Cosmos-Predict2.5 and Cosmos3 DiTs against diffusers' own LoRA loading.

Each family reuses its DiT parity test's module fixture (bound here under another name; its
tiny diffusers model saved by ``save_pretrained``, the inputs and diffusers' base output):
``tests/models/cogvideox/test_cogvideox_dit.py`` (kind 5b: RoPE),
``tests/models/cosmos2_5/test_cosmos2_5_dit.py`` (the q/k norm eps set to the authors' 1e-6,
the ``.pt`` in the original layout) and ``tests/models/cosmos3/test_cosmos3_dit.py`` (Edge).

The LoRAs are in diffusers / PEFT form (``transformer.<module>.lora_A.weight`` /
``lora_B.weight``), rank 4, A and B both random, on every Linear of the network that
video generation uses (CogVideoX and Cosmos2.5 embeddings, blocks, adaLN and output layers;
Cosmos3's blocks of both pathways, ``proj_in`` / ``proj_out`` and the time embedder; not its
``lm_head``). The CogVideoX one is written by diffusers' own save paths, both with
``lora_adapter_metadata`` (``r`` 4, ``lora_alpha`` 6: scale 1.5) in the header: the
pipeline's ``CogVideoXLoraLoaderMixin.save_lora_weights`` (``transformer_lora_adapter_metadata``)
and, from the model that file was loaded into, the model's ``save_lora_adapter``. The Cosmos
ones carry no alpha (scale 1, as diffusers reads them).

Oracle (diffusers 0.42.1): the pipeline's mixin ``lora_state_dict`` where one exists
(``CogVideoXLoraLoaderMixin``, ``CosmosLoraLoaderMixin``; Cosmos3 has none, the file is read
with safetensors) + ``transformer.load_lora_adapter(sd, prefix="transformer")`` (with the
pipeline file's metadata for CogVideoX) + ``fuse_lora(lora_scale=s)`` on a fresh
``from_pretrained`` copy of the saved reference. vidax: ``vidax.lora.apply(model, type,
"dit", [(path, s)], mode="merge"|"live")``, strength 0.7. Bound: 1e-4 x std(reference), float32
"highest"; the LoRA's effect is asserted >= 100x the bound; negative controls (alpha ignored;
A and B of two same-shaped modules exchanged) must fail; strength 0 is the base exactly.
The Cosmos2.5 model is also loaded from the authors' ``.pt`` (original layout), and the LoRA
is also given under the authors' module names (``net.blocks.N.self_attn.q_proj...``, the DiT
test's inverse rename table), mapped by the original layout's mapper.

Measured (this machine; max |diff| / std, merged = live): CogVideoX 1.7e-6 (effect 2.8 x std;
alpha ignored 1.15 x std), Cosmos2.5 3.2e-6 in both layouts and under both namings (effect
3.3; two blocks' q swapped 0.39), Cosmos3 Edge 1.7e-6 (effect 2.4; k / v swapped 0.59).

The CogVideoX file as the pipeline mixin writes it carries its header keys flat
(``transformer.lora_alpha``, ``transformer.r``): read as such (1.7e-6).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
import vidax.lora
from tests.models.cogvideox import test_cogvideox_dit as cog
from tests.models.cosmos2_5 import test_cosmos2_5_dit as c25
from tests.models.cosmos3 import test_cosmos3_dit as c3
from tests.parity import REL_TOL, assert_fails, assert_parity
from vidax.translator.lora import LoraError, read_lora

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning",
                                        "ignore:CUDA is not available:UserWarning")
RANK, COG_ALPHA, STRENGTH = 4, 6.0, 0.7
# the DiT parity tests' module fixtures, under this module's names (pytest registers a fixture
# by the attribute name it is found under)
cog_case, c25_case, c3_case = cog.case, c25.case, c3.case


def _linears(model, skip=()) -> dict[str, tuple[int, int]]:
    import torch

    return {name: tuple(m.weight.shape) for name, m in model.named_modules()
            if isinstance(m, torch.nn.Linear) and not name.startswith(skip)}


def _random_lora(shapes: dict[str, tuple[int, int]], seed: int,
                 prefix: str = "transformer.") -> dict:
    """PEFT keys ``<prefix><module>.lora_A.weight`` [r, in] / ``lora_B.weight`` [out, r]."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, (rows, cols) in sorted(shapes.items()):
        out[f"{prefix}{name}.lora_A.weight"] = torch.randn(RANK, cols, generator=g) / cols**0.5
        out[f"{prefix}{name}.lora_B.weight"] = (0.5 * torch.randn(rows, RANK, generator=g)
                                                / RANK**0.5)
    return out


def _save(tensors: dict, path, metadata=None):
    import safetensors.torch

    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, path,
                                metadata=metadata)
    return path


def _fused(model_cls, folder, sd, strength, metadata=None):
    """A fresh copy of the saved reference with ``sd`` loaded by diffusers and fused."""
    ref = model_cls.from_pretrained(folder).eval()
    ref.load_lora_adapter(sd, prefix="transformer", adapter_name="lora", metadata=metadata)
    ref.fuse_lora(lora_scale=strength, adapter_names=["lora"])
    return ref


def _committed(model):
    """The model's arrays committed to one device: a freshly loaded, a merged and a
    jit-updated model then hit one compiled forward (nnx.jit's cache tells committed from
    uncommitted inputs; without this each family compiles twice more)."""
    nnx.update(model, jax.device_put(nnx.state(model), jax.devices()[0]))
    return model


def _params(model) -> dict[str, np.ndarray]:
    return {".".join(map(str, path)): np.asarray(var.get_value())
            for path, var in nnx.iter_graph(model) if isinstance(var, nnx.Param)}


def _check(name, run, load, lora, ref, base, record_property, model_type, zero_merge=False):
    """Merged and live vs the reference, effect size, strength 0 == base exactly (live; and
    merged where ``zero_merge``)."""
    effect = float(np.abs(ref - base).max() / ref.std())
    record_property(f"{name}_effect", effect)
    print(f"{name}: LoRA effect {effect:.3f} x std(reference)")
    assert effect > 100 * REL_TOL, effect
    merged = run(_applied(load(), model_type, lora, STRENGTH, "merge"))
    assert_parity(f"{name}_merged", merged, ref, record_property)
    live_model = _applied(load(), model_type, lora, STRENGTH, "live")
    assert_parity(f"{name}_live", run(live_model), ref, record_property)
    vidax.lora.set_strengths(live_model, {vidax.lora.LoraSpec(str(lora)).name: 0.0})
    np.testing.assert_array_equal(run(live_model), base)
    if zero_merge:
        np.testing.assert_array_equal(run(_applied(load(), model_type, lora, 0.0, "merge")),
                                      base)
    return merged


def _applied(model, model_type, lora, strength, mode):
    vidax.lora.apply(model, model_type, "dit", [(lora, strength)], mode=mode)
    return model


def _swapped(tensors: dict, a: str, b: str) -> dict:
    """A and B of modules ``a`` and ``b`` (same shapes) exchanged."""
    out = dict(tensors)
    for part in ("lora_A", "lora_B"):
        ka, kb = f"transformer.{a}.{part}.weight", f"transformer.{b}.{part}.weight"
        out[ka], out[kb] = tensors[kb], tensors[ka]
    return out


# ----------------------------------------------------------------------------- CogVideoX
@pytest.fixture(scope="module")
def cog_lora(cog_case, tmp_path_factory):
    """The LoRA as diffusers saves it (alpha in the header), its oracle and vidax's runner."""
    import torch
    from diffusers import CogVideoXTransformer3DModel
    from diffusers.loaders import CogVideoXLoraLoaderMixin

    shapes = _linears(cog_case["model"])
    root = tmp_path_factory.mktemp("cog_lora")
    meta = {"r": RANK, "lora_alpha": COG_ALPHA, "target_modules": sorted(shapes)}
    CogVideoXLoraLoaderMixin.save_lora_weights(
        root, transformer_lora_layers=_random_lora(shapes, seed=11, prefix=""),
        transformer_lora_adapter_metadata=meta, weight_name="cog_lora.safetensors")
    path = root / "cog_lora.safetensors"
    sd, metadata = CogVideoXLoraLoaderMixin.lora_state_dict(str(path), return_lora_metadata=True)
    assert metadata["transformer.lora_alpha"] == COG_ALPHA     # the pipeline's flat keys
    ref_model = CogVideoXTransformer3DModel.from_pretrained(cog_case["folder"]).eval()
    ref_model.load_lora_adapter(sd, prefix="transformer", adapter_name="lora", metadata=metadata)
    # the model-level save path too: bare module names, the adapter's config unprefixed
    ref_model.save_lora_adapter(root, adapter_name="lora", weight_name="cog_adapter.safetensors")
    ref_model.fuse_lora(lora_scale=STRENGTH, adapter_names=["lora"])
    x, context, t, ofs = cog_case["inputs"]
    rope = cog._reference_rope(ref_model, *x.shape[1:4])
    with torch.no_grad():
        out = ref_model(torch.from_numpy(x).permute(0, 1, 4, 2, 3), torch.from_numpy(context),
                        torch.from_numpy(t), image_rotary_emb=rope, return_dict=False)[0]
    ref = out.permute(0, 1, 3, 4, 2).numpy()

    def load():
        return vidax.load("cogvideox", "dit", cog_case["path"], config=cog_case["cfg"])

    def run(model):
        return np.asarray(cog._run(_committed(model), *cog_case["inputs"]))
    return {"path": path, "adapter": root / "cog_adapter.safetensors", "ref": ref,
            "base": run(load()), "load": load, "run": run}


@pytest.mark.parametrize("cog_case", ["5b"], indirect=True)
def test_cogvideox_matches_diffusers_with_header_alpha(cog_lora, tmp_path, record_property):
    """The model-level file (``save_lora_adapter``: header ``lora_alpha`` / ``r``)."""
    c = cog_lora
    assert read_lora(c["adapter"]).default_alpha == COG_ALPHA
    merged = _check("cogvideox_lora", c["run"], c["load"], c["adapter"], c["ref"], c["base"],
                    record_property, "cogvideox", zero_merge=True)
    # negative control: the same tensors without the header (alpha ignored: scale 1, not 1.5)
    import safetensors.torch
    plain = _save(safetensors.torch.load_file(c["adapter"]), tmp_path / "no_header.safetensors")
    out = c["run"](_applied(c["load"](), "cogvideox", plain, STRENGTH, "merge"))
    assert_fails("cogvideox_lora_alpha_ignored", out, c["ref"], record_property)
    assert np.abs(merged - out).max() > 0


@pytest.mark.parametrize("cog_case", ["5b"], indirect=True)
def test_cogvideox_pipeline_saved_file_matches_diffusers(cog_lora, record_property):
    """The pipeline-level file (``CogVideoXLoraLoaderMixin.save_lora_weights``: keys
    ``transformer.*``, header keys ``transformer.lora_alpha`` / ``transformer.r``)."""
    c = cog_lora
    assert read_lora(c["path"]).default_alpha == COG_ALPHA
    out = c["run"](_applied(c["load"](), "cogvideox", c["path"], STRENGTH, "merge"))
    assert_parity("cogvideox_pipeline_file_lora_merged", out, c["ref"], record_property)


# ----------------------------------------------------------------------------- Cosmos-Predict2.5
@pytest.fixture(scope="module")
def c25_lora(c25_case, tmp_path_factory):
    import diffusers.models.transformers.transformer_cosmos as cosmos_module
    from diffusers import CosmosTransformer3DModel
    from diffusers.loaders import CosmosLoraLoaderMixin

    folder = c25_case["safetensors"].parent
    probe = CosmosTransformer3DModel.from_pretrained(folder)
    tensors = _random_lora(_linears(probe), seed=12)
    path = _save(tensors, tmp_path_factory.mktemp("c25_lora") / "cosmos25_lora.safetensors")
    sd = CosmosLoraLoaderMixin.lora_state_dict(str(path))
    ref_model = _fused(CosmosTransformer3DModel, folder, sd, STRENGTH)
    c25._set_qk_norm_eps(ref_model, c25_case["cfg"].qk_norm_eps)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cosmos_module, "transforms", c25._torchvision_resize_stub(), raising=False)
        ref = c25._diffusers_output(ref_model, c25_case["cfg"], c25_case["inputs"])
    return {"path": path, "tensors": tensors, "ref": ref}


def _c25(case, layout):
    file = case["safetensors"] if layout == "diffusers" else case["pt"]

    def load():
        return vidax.load("cosmos2_5", "dit", file, config=case["cfg"], layout=layout)

    def run(model):
        return np.asarray(c25._run(_committed(model), **case["inputs"]))
    return load, run


@pytest.mark.parametrize("layout", ["diffusers", "original"])
def test_cosmos2_5_matches_diffusers(c25_case, c25_lora, layout, tmp_path, record_property):
    load, run = _c25(c25_case, layout)
    base = run(load())
    _check(f"cosmos2_5_{layout}_lora", run, load, c25_lora["path"], c25_lora["ref"], base,
           record_property, "cosmos2_5")
    if layout == "original":    # the same LoRA under the authors' module names (``net.``)
        renamed = {c25.to_original(k.removeprefix("transformer.")): v
                   for k, v in c25_lora["tensors"].items()}
        assert "net.blocks.0.self_attn.q_proj.lora_A.weight" in renamed
        named = _save(renamed, tmp_path / "original_names.safetensors")
        assert_parity("cosmos2_5_original_names_lora_merged",
                      run(_applied(load(), "cosmos2_5", named, STRENGTH, "merge")),
                      c25_lora["ref"], record_property)
    if layout == "diffusers":   # negative control: two blocks' q LoRAs exchanged
        bad = _save(_swapped(c25_lora["tensors"], "transformer_blocks.0.attn1.to_q",
                             "transformer_blocks.1.attn1.to_q"), tmp_path / "swapped.safetensors")
        assert_fails("cosmos2_5_lora_swapped", run(_applied(load(), "cosmos2_5", bad, STRENGTH,
                                                            "merge")),
                     c25_lora["ref"], record_property)


def test_cogvideox_lora_is_refused_by_cosmos2_5(c25_case, tmp_path):
    import dataclasses

    from diffusers import CogVideoXTransformer3DModel
    cfg = cog.CogVideoXDiTConfig.tiny("5b")
    shapes = _linears(CogVideoXTransformer3DModel(**dataclasses.asdict(cfg)))
    path = _save(_random_lora(shapes, seed=13), tmp_path / "cogvideox_lora.safetensors")
    load, _ = _c25(c25_case, "diffusers")
    model = load()
    before = _params(model)
    with pytest.raises(LoraError) as info:
        vidax.lora.apply(model, "cosmos2_5", "dit", [path])
    message = str(info.value)
    print(message[:2000])
    # every change is refused, CogVideoX-only modules by name, and nothing is applied
    assert "21 of 21" in message and "nothing was applied" in message, message[:2000]
    assert "transformer.time_embedding.linear_1.lora_A.weight" in message, message[:2000]
    after = _params(model)
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[k], after[k]) for k in before)


# ----------------------------------------------------------------------------- Cosmos3
@pytest.mark.parametrize("c3_case", ["edge"], indirect=True)
def test_cosmos3_matches_diffusers(c3_case, tmp_path, record_property):
    import safetensors.torch
    from diffusers import Cosmos3OmniTransformer

    folder = c3_case["file"].parent
    tensors = _random_lora(_linears(Cosmos3OmniTransformer.from_pretrained(folder),
                                    skip=("lm_head",)), seed=14)
    path = _save(tensors, tmp_path / "cosmos3_lora.safetensors")
    ref_model = _fused(Cosmos3OmniTransformer, folder, safetensors.torch.load_file(path),
                       STRENGTH)
    ref = c3._reference_output(ref_model, c3_case["cfg"], c3_case["inputs"])

    def load():
        return c3._load(c3_case["file"], c3_case["cfg"])

    def run(model):
        return c3._vidax_output(_committed(model), c3_case["inputs"])
    _check("cosmos3_edge_lora", run, load, path, ref, run(load()), record_property, "cosmos3")
    # negative control: the video pathway's k and v LoRAs of layer 0 exchanged
    bad = _save(_swapped(tensors, "layers.0.self_attn.to_k", "layers.0.self_attn.to_v"),
                tmp_path / "swapped.safetensors")
    assert_fails("cosmos3_lora_swapped", run(_applied(load(), "cosmos3", bad, STRENGTH, "merge")),
                 ref, record_property)
