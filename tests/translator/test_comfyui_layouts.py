"""ComfyUI's repackaged files (docs/checkpoints_comfyui.md): their manifests verify 1:1 and are
identified, and the two layouts added for them (``vidax.translator.mappings.comfyui``) compute
what transformers computes.

Manifests (``scripts/derive_comfyui_manifests.py``): every ``comfyui/*`` manifest verifies with
0 missing / unexpected / mis-shaped tensors through the registry's aliases, and
``vidax.manifests.identify`` names it exactly. The scaled-fp8 ones verify only with the core's
quantization rules (``vidax.translator.quant``: the ``scaled_fp8`` marker ignored, each
``scale_weight`` consumed by its weight); they skip where that module is absent. Repackaged files
whose key set is the authors' (the fp16 / bf16 / plain-fp8 Wan DiTs, the Wan VAEs) have no
manifest of their own: identify names the authors' release as a dtype match.

Parity (DESIGN.md §6): transformers' own class at a tiny config, random values in every tensor
(``tests.parity.randomize``), its state dict written in ComfyUI's key layout with safetensors,
loaded with ``vidax.load``; float32, matmul precision "highest", max |diff| <= 1e-4 x
std(reference); a negative control (two weights swapped in the file) must fail the bound.

* UMT5 (``umt5_xxl_*.safetensors``): ``UMT5EncoderModel`` (a relative-position table per block,
  gated GELU, ``num_heads * d_kv != d_model``), saved as ComfyUI's ``T5`` holds it (no
  ``encoder.embed_tokens``) plus a ``spiece_model`` uint8 tensor; ids padded to 140 (past the
  128 max distance) with the attention mask; reference ``last_hidden_state``.
* CLIP ViT-H/14 (``clip_vision_h.safetensors``): ``CLIPVisionModelWithProjection`` (GELU,
  pre-norm), the full state dict as ComfyUI's ``CLIPVisionModelProjection`` holds it;
  reference ``hidden_states[-2]`` (the penultimate block's tokens: ComfyUI's
  ``intermediate_output=-2``, the authors' ``use_31_block``) against vidax's
  ``num_blocks=-1``, and ``hidden_states[-1]`` against ``num_blocks=None``.
* Gemma 3 (``gemma_3_12B_it.safetensors``, layout ``comfyui``): ``Gemma3ForConditionalGeneration``
  at the Gemma family test's tiny config, renamed as ComfyUI's ``Gemma3_12B`` holds it
  (``model.*``, ``vision_model.*``, ``multi_modal_projector.*``, no ``lm_head``) plus a
  ``spiece_model`` uint8 tensor; every hidden state of the left-padded call.

The HunyuanVideo files: tests/translator/test_comfyui_hunyuan.py.
"""

from __future__ import annotations

import importlib.util
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from tests.parity import assert_fails, assert_parity, randomize  # noqa: E402
from vidax.loading import verify_manifest  # noqa: E402
from vidax.manifests import all_manifests, get_manifest, identify  # noqa: E402
from vidax.models.clip.config import CLIPVisionConfig  # noqa: E402
from vidax.models.t5.config import T5Config  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

COMFYUI = sorted(m.name for m in all_manifests() if m.family == "comfyui")
HAS_QUANT_CORE = importlib.util.find_spec("vidax.translator.quant") is not None


def _scaled(name: str) -> bool:
    return "scaled_fp8" in get_manifest(name).tensors


# ------------------------------------------------------------------------- manifests
def test_every_comfyui_file_with_a_key_set_of_its_own_has_a_manifest():
    assert COMFYUI == sorted(f"comfyui/{n}" for n in (
        "clip-l__text_encoder", "clip-vision-h__image_encoder",
        "llava-llama3-fp16__text_encoder", "llava-llama3-fp8-scaled__text_encoder",
        "umt5-xxl-fp16__text_encoder", "umt5-xxl-fp8-scaled__text_encoder",
        "wan2.1-i2v-14b-fp8-scaled__dit", "wan2.1-t2v-14b-fp8-scaled__dit",
        "wan2.2-i2v-a14b-fp8-scaled__dit", "wan2.2-t2v-a14b-fp8-scaled__dit",
        # HunyuanVideo DiTs in ComfyUI's names (tests/translator/test_comfyui_hunyuan.py)
        "hunyuan-video-t2v-720p-bf16__dit", "hunyuanvideo1.5-720p-t2v-fp16__dit",
        "hunyuanvideo1.5-480p-i2v-step-distilled-fp16__dit", "hunyuan-video-vae-bf16__vae",
        "byt5-small-glyphxl-fp16__byt5", "qwen-2.5-vl-7b-fp8-scaled__text_encoder",
        "gemma-3-12b-it-bf16__text_encoder"))
    for name in COMFYUI:
        m = get_manifest(name)
        assert "Comfy-Org" in m.released_as and m.derived_from and m.confidence, name


@pytest.mark.parametrize("name", COMFYUI)
def test_manifest_verifies_one_to_one(name):
    if _scaled(name) and not HAS_QUANT_CORE:
        pytest.skip("scaled fp8: needs the core's quantization rules (vidax.translator.quant)")
    manifest = get_manifest(name)
    report = verify_manifest(manifest)
    assert report.ok, str(report)
    assert not report.missing and not report.unexpected and not report.mismatched
    if _scaled(name):
        scales = [k for k in manifest.tensors if k.endswith(".scale_weight")]
        weights = {k.removesuffix(".scale_weight") + ".weight" for k in scales}
        assert weights <= set(manifest.tensors)
        assert all(manifest.tensors[w].dtype == "float8_e4m3fn" for w in weights)


@pytest.mark.parametrize("name", COMFYUI)
def test_identify_names_the_comfyui_release(name):
    manifest = get_manifest(name)
    ident = identify(manifest.tensors)
    assert ident.kind == "exact"
    exact = [m.manifest.name for m in ident.parts[0].matches if m.kind == "exact"]
    assert name in exact


@pytest.mark.parametrize("authors, dtype", [
    ("wan2_1/t2v-1.3b__dit", "float16"),      # wan2.1_t2v_1.3B_fp16.safetensors
    ("wan2_1/t2v-14b__dit", "bfloat16"),      # wan2.1_t2v_14B_bf16.safetensors
    ("wan2_1/i2v-14b__dit", "float8_e4m3fn"),  # wan2.1_i2v_480p_14B_fp8_e4m3fn.safetensors
    ("wan2_2/ti2v-5b__dit", "float16"),       # wan2.2_ti2v_5B_fp16.safetensors
    ("wan2_1/t2v-14b__vae", "float16"),       # wan_2.1_vae.safetensors
    ("wan2_2/ti2v-5b__vae", "float16"),       # wan2.2_vae.safetensors
    ("hunyuan_video1_5/base__vae", "float16"),   # hunyuanvideo15_vae_fp16.safetensors
])
def test_repackaged_files_in_the_authors_layout_identify_as_the_authors_release(authors, dtype):
    """Same names and shapes, another dtype: the authors' release, as a dtype match."""
    tensors = {k: (t.shape, dtype) for k, t in get_manifest(authors).tensors.items()}
    ident = identify(tensors)
    part = ident.parts[0]
    names = [m.manifest.name for m in part.matches if m.kind in ("exact", "dtype")]
    assert authors in names
    assert not any(m.kind == "exact" for m in part.matches)


# ------------------------------------------------------------------------- UMT5 parity
SEQ_LEN = 140
UMT5_TINY = dict(vocab_size=512, d_model=48, d_kv=16, num_heads=4, d_ff=96, num_layers=3,
                 feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
                 relative_attention_max_distance=128, dropout_rate=0.0)
UMT5_VIDAX = T5Config(vocab_size=512, dim=48, dim_attn=64, dim_ffn=96, num_heads=4,
                      num_layers=3, shared_pos=False)


def _save(state: dict, path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, str(path))


@pytest.fixture(scope="module")
def umt5_case(tmp_path_factory):
    import torch
    from transformers import UMT5Config, UMT5EncoderModel

    torch.manual_seed(0)
    model = UMT5EncoderModel(UMT5Config(**UMT5_TINY)).eval()
    randomize(model.named_parameters(), seed=3)
    state = {k: v for k, v in model.state_dict().items() if k != "encoder.embed_tokens.weight"}
    state["spiece_model"] = torch.frombuffer(bytearray(b"\x0a\x0bnot a real model"),
                                             dtype=torch.uint8)
    path = tmp_path_factory.mktemp("umt5") / "umt5_xxl_fp16.safetensors"
    _save(state, path)
    rng = np.random.default_rng(0)
    lengths = (7, 60, SEQ_LEN)
    ids = np.zeros((len(lengths), SEQ_LEN), np.int64)
    mask = np.zeros_like(ids)
    for i, n in enumerate(lengths):
        ids[i, :n] = rng.integers(2, 512, n)
        ids[i, n - 1] = 1
        mask[i, :n] = 1
    with torch.no_grad():
        ref = model(input_ids=torch.from_numpy(ids),
                    attention_mask=torch.from_numpy(mask)).last_hidden_state.numpy()
    return path, state, ids, mask, ref


def _umt5_out(path, ids, mask):
    model = vidax.load("wan2_1", "text_encoder", path, layout="transformers", config=UMT5_VIDAX)
    return np.asarray(model(ids, mask))


@pytest.mark.slow
def test_umt5_comfyui_layout_matches_transformers(umt5_case, record_property):
    path, state, ids, mask, ref = umt5_case
    keys = set(state)
    assert "shared.weight" in keys and "encoder.embed_tokens.weight" not in keys
    assert sum("relative_attention_bias" in k for k in keys) == UMT5_TINY["num_layers"]
    valid = mask.astype(bool)
    out = _umt5_out(path, ids, mask)
    assert_parity("comfyui_umt5", out[valid], ref[valid], record_property)


@pytest.mark.slow
def test_umt5_layout_is_detected(umt5_case):
    path = umt5_case[0]
    assert vidax.loading._detect_layout("wan2_1", "text_encoder", path, UMT5_VIDAX) == \
        "transformers"


@pytest.mark.slow
def test_umt5_negative_control_swapped_position_tables(umt5_case, tmp_path, record_property):
    """Blocks 0 and 1 swap relative-position tables: a mapper reading block 0's table for
    every block (T5-v1.1's shared_pos) would not see this; vidax must fail the bound."""
    path, state, ids, mask, ref = umt5_case
    bad = dict(state)
    a, b = (f"encoder.block.{i}.layer.0.SelfAttention.relative_attention_bias.weight"
            for i in (0, 1))
    bad[a], bad[b] = state[b], state[a]
    _save(bad, tmp_path / "bad.safetensors")
    valid = mask.astype(bool)
    out = _umt5_out(tmp_path / "bad.safetensors", ids, mask)
    assert_fails("comfyui_umt5_negative", out[valid], ref[valid], record_property)


# ------------------------------------------------------------------------- CLIP-vision parity
CLIP_TINY = dict(hidden_size=64, intermediate_size=256, num_attention_heads=4,
                 num_hidden_layers=3, patch_size=7, image_size=28, projection_dim=32,
                 hidden_act="gelu", layer_norm_eps=1e-5)


@pytest.fixture(scope="module")
def clip_case(tmp_path_factory):
    import torch
    from transformers import CLIPVisionConfig as HFConfig
    from transformers import CLIPVisionModelWithProjection

    torch.manual_seed(0)
    model = CLIPVisionModelWithProjection(HFConfig(**CLIP_TINY)).eval()
    randomize(model.named_parameters(), seed=5)
    state = dict(model.state_dict())
    path = tmp_path_factory.mktemp("clipvision") / "clip_vision_h.safetensors"
    _save(state, path)
    pixels = np.random.default_rng(1).standard_normal((2, 3, 28, 28)).astype(np.float32)
    with torch.no_grad():
        hidden = model(pixel_values=torch.from_numpy(pixels),
                       output_hidden_states=True).hidden_states
    return path, state, pixels, hidden[-2].numpy(), hidden[-1].numpy()


def _clip_out(path, pixels, num_blocks):
    model = vidax.load("wan2_1", "image_encoder", path, layout="transformers",
                       config=CLIPVisionConfig.tiny())
    return np.asarray(model(np.transpose(pixels, (0, 2, 3, 1)), num_blocks=num_blocks))


@pytest.mark.slow
def test_clip_vision_comfyui_layout_matches_transformers(clip_case, record_property):
    path, _, pixels, penultimate, last = clip_case
    assert CLIPVisionConfig.tiny().dim == CLIP_TINY["hidden_size"]
    assert_parity("comfyui_clip_vision_penultimate", _clip_out(path, pixels, -1), penultimate,
                  record_property)
    assert_parity("comfyui_clip_vision_last", _clip_out(path, pixels, None), last,
                  record_property)


@pytest.mark.slow
def test_clip_vision_negative_control_swapped_q_k(clip_case, tmp_path, record_property):
    path, state, pixels, penultimate, _ = clip_case
    bad = dict(state)
    q, k = (f"vision_model.encoder.layers.1.self_attn.{n}_proj.weight" for n in "qk")
    bad[q], bad[k] = state[k], state[q]
    _save(bad, tmp_path / "bad.safetensors")
    assert_fails("comfyui_clip_vision_negative", _clip_out(tmp_path / "bad.safetensors",
                                                            pixels, -1), penultimate,
                 record_property)


# ------------------------------------------------------------------------- Gemma 3 (LTX-2)
def _comfy_gemma_state(state: dict) -> dict:
    """``Gemma3ForConditionalGeneration``'s in-memory names as ComfyUI's ``Gemma3_12B`` holds
    them (comfy/text_encoders/llama.py: ``self.model`` = the language model,
    ``self.vision_model`` = the SigLIP tower, ``self.multi_modal_projector``; no lm_head)."""
    out = {}
    for key, value in state.items():
        if key == "lm_head.weight" or key.startswith("model.vision_tower.head."):
            continue                # no head in ComfyUI's class (nor in the 12B's SigLIP)
        for old, new in (("model.language_model.", "model."),
                         ("model.vision_tower.vision_model.", "vision_model."),
                         ("model.vision_tower.", "vision_model."),     # transformers 5.x
                         ("model.multi_modal_projector.", "multi_modal_projector.")):
            if key.startswith(old):
                key = new + key[len(old):]
                break
        out[key] = value
    return out


@pytest.fixture(scope="module")
def gemma_case(tmp_path_factory):
    import torch

    from tests.models.gemma.test_gemma import BATCH, SEQ_LEN, TEXT, _pad, reference
    from tests.parity import DecoderLMCase
    from vidax.models.gemma.model import GemmaConfig

    def save(model, root):
        model.save_pretrained(root / "release")                 # for its config.json
        state = _comfy_gemma_state(model.state_dict())
        state["spiece_model"] = torch.frombuffer(bytearray(b"\x0a\x0bnot a real model"),
                                                 dtype=torch.uint8)
        _save(state, root / "gemma_3_12B_it.safetensors")
        return model.model.language_model

    return DecoderLMCase.build(
        tmp_path_factory.mktemp("gemma3_comfy"), "gemma", GemmaConfig, reference, save,
        num_layers=TEXT["num_hidden_layers"], vocab_size=TEXT["vocab_size"],
        batch=BATCH, seq_len=SEQ_LEN, padding=_pad, config_layout="release",
        calls=lambda text, ids, mask: {
            "masked": text(input_ids=ids, attention_mask=mask, output_hidden_states=True)})


@pytest.mark.slow
def test_gemma3_comfyui_layout_matches_transformers(gemma_case, tmp_path, record_property):
    """Every hidden state of the left-padded call within the bound; the tower and projector
    ignored, the tokenizer an asset. Negative control: one layer's q_norm / k_norm swapped."""
    from tests.parity import edited_copy, swap

    path = gemma_case.root / "gemma_3_12B_it.safetensors"
    # no layout named: detection prefers the layout that leaves no tensor without a home
    model, report = vidax.loading.load_with_report("gemma", "text_encoder", path,
                                                   config=gemma_case.config)
    assert report.ok and report.matched == 13 * gemma_case.num_layers + 2
    assert all(k.startswith(("vision_model.", "multi_modal_projector."))
               for k in report.ignored) and list(report.assets) == ["spiece_model"]
    gemma_case.check_all("comfyui_gemma3", model(gemma_case.ids, gemma_case.mask), "masked",
                         record_property)
    bad = edited_copy(path, tmp_path / path.name, swap(
        ("model.layers.1.self_attn.q_norm.weight", "model.layers.1.self_attn.k_norm.weight")))
    worse = vidax.load("gemma", "text_encoder", bad, layout="comfyui", config=gemma_case.config)
    assert_fails("comfyui_gemma3_negative", worse(gemma_case.ids, gemma_case.mask)[-1],
                 gemma_case.ref["masked"][-1], record_property)
