"""LTX-2.5's text encoder: the Gemma 4 language model (``vidax.models.gemma.gemma4``), its file
(``gemma4-12b-with-proj-ltx-2.5-bf16.safetensors``: mapper, config, tokenizer and HF assets)
and the DiT/encoder pairing check.

Oracle (DESIGN.md §6): transformers 5.24's ``Gemma4UnifiedForConditionalGeneration`` at a tiny
config (``Gemma4Config.tiny()``: grouped-query local layers with a window of 5 under a
12-token sequence, two global K=V layers with wider heads, one key/value head and
proportional RoPE on a quarter of the pairs; tiny vision and audio embedders) with random
values in every tensor and every ``layer_scalar``, saved by its own ``save_pretrained``, then
packed into the release's single-file layout by a writer that follows the authors' packer
(Lightricks/LTX-2@400fd31 ``gemma_assets.py``: ``_flatten_gemma4_unified_keys_for_comfy`` on
the saved keys, ``text_embedding_projection.*`` beside them, ``tokenizer_json`` and
``hf_asset__*`` uint8 tensors, the HF config in ``__metadata__["gemma_config"]``), written
here from that reading -- not from vidax's mapper. The projection is ltx-core 1.0.0's
``FeatureExtractorV2`` with random values.

vidax loads the file with ``vidax.load("ltx2_5", "text_encoder", FILE)`` and no config.
Measured (float32, matmul precision "highest", each within max |diff| <= 1e-4 x std(ref)):
all 5 hidden states (``output_hidden_states`` of ``model.model``, as ltx-core's encoder
calls it), once on ids alone (two of them multimodal placeholders) and once left-padded
with the mask; and the projected video / audio features (``ltx2_5`` / ``text_projection``
from the same file) against ``FeatureExtractorV2`` on transformers' hidden states.

Negative controls (each must fail the bound): every ``layer_scalar`` reset to 1 in the file;
the global layers' values taken without ``v_norm``.

Tokenizer: a WordLevel ``tokenizers`` tokenizer built here, packed as bytes; vidax's ids
equal ``tokenizers``' own encoding of the same bytes and transformers' path as ltx-core
@400fd31 runs it (fast tokenizer, BOS forced, left padding).
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import dataclasses  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import vidax  # noqa: E402
from tests.parity import AbstractModel, assert_fails, assert_parity, randomize  # noqa: E402
from vidax import registry  # noqa: E402
from vidax.errors import VidaxError  # noqa: E402
from vidax.loading import load_with_report, verify_manifest, verify_tensors  # noqa: E402
from vidax.manifests import get_manifest  # noqa: E402
from vidax.models.gemma import gemma4  # noqa: E402
from vidax.models.gemma.config import FULL, SLIDING, Gemma4Config, check_gemma_source  # noqa: E402
from vidax.models.ltx2_5.config import LTX2TextProjectionConfig  # noqa: E402
from vidax.text import GemmaTokenizer, gemma_assets, gemma_tokenizer  # noqa: E402
from vidax.translator.mapping import TensorInfo  # noqa: E402

jax.config.update("jax_default_matmul_precision", "highest")

BATCH, SEQ_LEN = 3, 12
CFG = Gemma4Config.tiny()
TEXT = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, global_head_dim=32,
            num_global_key_value_heads=1, sliding_window=5, attention_k_eq_v=True,
            layer_types=[SLIDING, FULL, SLIDING, FULL], final_logit_softcapping=30.0)
TOP = dict(image_token_id=250, video_token_id=252, audio_token_id=251, boi_token_id=253,
           eoi_token_id=254, boa_token_id=255, eoa_token_index=249)
VERSION = "gemma4-12b-ltx-v1"
PROJ = dataclasses.replace(LTX2TextProjectionConfig.tiny(), embedding_dim=64, num_layers=5)
WORDS = "a cat dog sat on the mat red blue big small".split()


# ----------------------------------------------------------------------------- the writer
def _flatten_for_comfy(key: str) -> str:
    """The authors' packer's renaming, as read in Lightricks/LTX-2@400fd31
    ltx_core/text_encoders/gemma/gemma_assets.py ``_flatten_gemma4_unified_keys_for_comfy``."""
    for hf, comfy in (("model.language_model.", "model."),
                      ("model.vision_embedder.", "vision_model."),
                      ("model.embed_vision.", "multi_modal_projector."),
                      ("model.embed_audio.", "audio_projector.")):
        if key.startswith(hf):
            return comfy + key[len(hf):]
    return key


def _tokenizer_files() -> tuple[bytes, dict]:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab = {t: i for i, t in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(t, special=True) for t in specials])
    config = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
              "unk_token": "<unk>", "tokenizer_class": "GemmaTokenizer",
              "model_max_length": 1000000000000000019884624838656}
    return tok.to_str().encode(), config


def _pack(root, projection) -> tuple:
    """The release file from ``root/hf`` (save_pretrained) and the projection's tensors."""
    import safetensors.torch
    import torch

    tensors = {}
    with safetensors.safe_open(str(root / "hf" / "model.safetensors"), "pt") as f:
        for key in f.keys():  # noqa: SIM118
            tensors[_flatten_for_comfy(key)] = f.get_tensor(key)
    tensors.update({f"text_embedding_projection.{k}": v.contiguous()
                    for k, v in projection.state_dict().items()})
    tokenizer_json, tok_config = _tokenizer_files()
    as_bytes = lambda b: torch.frombuffer(bytearray(b), dtype=torch.uint8)  # noqa: E731
    tensors["tokenizer_json"] = as_bytes(tokenizer_json)
    tensors["hf_asset__tokenizer_config.json"] = as_bytes(json.dumps(tok_config).encode())
    tensors["hf_asset__processor_config.json"] = as_bytes(
        b'{"processor_class": "Gemma4UnifiedProcessor"}')
    tensors["hf_asset__chat_template.jinja"] = as_bytes(b"{{ messages }}")
    tensors["hf_asset__generation_config.json"] = as_bytes(
        (root / "hf" / "generation_config.json").read_bytes())
    config = json.loads((root / "hf" / "config.json").read_text())
    config["gemma_version"] = VERSION
    path = root / "gemma4-12b-with-proj-ltx-2.5-bf16.safetensors"
    safetensors.torch.save_file(tensors, str(path),
                                metadata={"format": "pt", "gemma_config": json.dumps(config)})
    return path, config


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    import torch
    from ltx_core.text_encoders.gemma.feature_extractor import FeatureExtractorV2
    from transformers import Gemma4UnifiedConfig, Gemma4UnifiedForConditionalGeneration

    root = tmp_path_factory.mktemp("gemma4")
    torch.manual_seed(0)
    hf_config = Gemma4UnifiedConfig(
        text_config=TEXT, **TOP,
        vision_config=dict(patch_size=2, pooling_kernel_size=1, mm_embed_dim=64,
                           mm_posemb_size=8, output_proj_dims=64),
        audio_config=dict(audio_embed_dim=8))
    model = Gemma4UnifiedForConditionalGeneration(hf_config).eval()
    randomize(model.named_parameters(), seed=1)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():               # layer_scalar is a buffer: random values there too
        for name, buf in model.named_buffers():
            if name.endswith("layer_scalar"):
                buf.copy_(0.5 + torch.rand(buf.shape, generator=gen))
    model.save_pretrained(root / "hf")
    projection = FeatureExtractorV2(torch.nn.Linear(PROJ.flat_dim, PROJ.video_dim), 64,
                                    torch.nn.Linear(PROJ.flat_dim, PROJ.audio_dim))
    randomize(projection.named_parameters(), seed=3)
    path, config = _pack(root, projection)

    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 249, (BATCH, SEQ_LEN), generator=gen)
    ids[0, 3], ids[2, 8] = 250, 251                   # image / audio placeholders
    mask = torch.ones(BATCH, SEQ_LEN, dtype=torch.long)
    mask[1, :7] = 0                                  # left padding, as LTX pads
    mask[2, :1] = 0
    with torch.no_grad():
        ref = {"ids": model.model(input_ids=ids, output_hidden_states=True).hidden_states,
               "masked": model.model(input_ids=ids, attention_mask=mask,
                                     output_hidden_states=True).hidden_states}
        video, audio = projection(ref["masked"], mask, "left")
    return dict(root=root, path=path, config=config, model=model, ids=ids.numpy(),
                mask=mask.numpy(), ref={k: [h.numpy() for h in v] for k, v in ref.items()},
                features=(video.numpy(), audio.numpy()))


class _Jitted:
    """A loaded model's ``__call__`` under one ``jax.jit`` (a whole-graph compile costs less
    than the eager per-op compiles); models of the same tree share the compiled function."""

    def __init__(self, model):
        from flax import nnx

        self.graphdef, self.state = nnx.split(model)
        self.run = jax.jit(lambda state, ids, mask: nnx.merge(self.graphdef, state)(ids, mask))

    def __call__(self, ids, mask=None, state=None):
        return self.run(self.state if state is None else state, ids, mask)


@pytest.fixture(scope="module")
def ours(case):
    return _Jitted(vidax.load("ltx2_5", "text_encoder", case["path"]))


def _check_all(name, out, ref, record_property):
    assert len(out) == len(ref) == CFG.num_hidden_layers + 1
    for i, (o, r) in enumerate(zip(out, ref)):
        assert_parity(f"{name}[{i}]", np.asarray(o), r, record_property)


# ----------------------------------------------------------------------------- file + loading
def test_packed_layout_is_the_releases(case):
    from safetensors import safe_open

    with safe_open(str(case["path"]), "np") as f:
        keys = set(f.keys())
    manifest = set(get_manifest("ltx2_5/2.5__text_encoder").tensors)
    names = lambda keys: {re.sub(r"layers\.\d+\.", "layers.N.", k) for k in keys  # noqa: E731
                          if not k.startswith("text_embedding_projection.")}
    assert names(keys) == names(manifest)
    assert {k for k in keys if k.startswith("text_embedding_projection.")} == set(
        get_manifest("ltx2_5/2.5__text_projection").tensors)
    assert "model.layers.1.self_attn.v_proj.weight" not in keys           # K=V global
    assert "model.layers.0.self_attn.v_proj.weight" in keys


def test_loads_from_the_file_alone(case):
    model, report = load_with_report("ltx2_5", "text_encoder", case["path"])
    assert model.config == CFG
    # local layers 14 tensors (v_proj, layer_scalar included), global K=V layers 13
    assert report.ok and report.matched == 14 * 2 + 13 * 2 + 2 == len(
        [k for k in case["model"].state_dict() if k.startswith("model.language_model.")])
    assert set(report.assets) == {"tokenizer_json"} | {
        f"hf_asset__{n}" for n in ("tokenizer_config.json", "processor_config.json",
                                   "chat_template.jinja", "generation_config.json")}
    assert {k.split(".")[0] for k in report.ignored} == {
        "vision_model", "multi_modal_projector", "audio_projector", "text_embedding_projection"}


# ----------------------------------------------------------------------------- parity
def test_hidden_states_match_transformers(case, ours, record_property):
    _check_all("gemma4_ids", ours(case["ids"]), case["ref"]["ids"], record_property)


def test_left_padding_matches_transformers(case, ours, record_property):
    """LTX-2.5's call: left-padded ids and their mask; every position, padded queries too."""
    _check_all("gemma4_masked", ours(case["ids"], case["mask"]), case["ref"]["masked"],
               record_property)


def test_projected_features_match_ltx_core(case, ours, record_property):
    projection = vidax.load("ltx2_5", "text_projection", case["path"], config=PROJ)
    video, audio = projection(ours(case["ids"], case["mask"]), case["mask"])
    assert_parity("gemma4_features_video", np.asarray(video), case["features"][0],
                  record_property)
    assert_parity("gemma4_features_audio", np.asarray(audio), case["features"][1],
                  record_property)


def test_negative_control_layer_scalar_dropped(case, ours, tmp_path, record_property):
    from tests.parity import edited_copy

    def ones(tensors):
        for k in [k for k in tensors if k.endswith("layer_scalar")]:
            tensors[k] = np.ones_like(tensors[k])
    path = edited_copy(case["path"], tmp_path / case["path"].name, ones)
    from flax import nnx

    edited = nnx.state(vidax.load("ltx2_5", "text_encoder", path))
    out = ours(case["ids"], case["mask"], state=edited)
    assert_fails("gemma4_negative_layer_scalar", np.asarray(out[-1]), case["ref"]["masked"][-1],
                 record_property)


def test_negative_control_values_without_v_norm(case, ours, monkeypatch, record_property):
    monkeypatch.setattr(gemma4, "rms_norm", lambda v, eps: v)
    out = _Jitted(nnx_merge(ours))(case["ids"], case["mask"])      # traced anew
    assert_fails("gemma4_negative_v_norm", np.asarray(out[2]), case["ref"]["masked"][2],
                 record_property)


def nnx_merge(jitted):
    from flax import nnx

    return nnx.merge(jitted.graphdef, jitted.state)


def test_bad_inputs():
    model = AbstractModel(lambda: gemma4.Gemma4Model(CFG))
    ids, mask = np.zeros((BATCH, SEQ_LEN), np.int32), np.ones((BATCH, SEQ_LEN), np.int32)
    with pytest.raises(VidaxError, match="input_ids"):
        model(ids[0])
    with pytest.raises(VidaxError, match="attention_mask"):
        model(ids, mask[:, :5])


# ----------------------------------------------------------------------------- configs
def test_config_from_saved_json(case):
    """transformers 5.24 saves the global sizes as ``per_layer_config``; the original config
    spells them ``global_head_dim`` / ``num_global_key_value_heads``: one config."""
    assert "per_layer_config" in case["config"]["text_config"]
    assert Gemma4Config.from_dict(case["config"]) == CFG
    assert Gemma4Config.from_dict({"text_config": TEXT, **TOP}) == CFG
    assert Gemma4Config.from_dict(TEXT).placeholder_token_ids == ()    # a bare text model
    bad = [({"use_bidirectional_attention": "all"}, "bidirectional"),
           ({"num_kv_shared_layers": 2}, "num_kv_shared_layers"),
           ({"hidden_activation": "gelu"}, "hidden_activation"),
           ({"model_type": "gemma3_text"}, "not a Gemma 4"),
           ({"per_layer_config": {"0": {"head_dim": 8}}}, "local layer 0")]
    for edit, match in bad:
        with pytest.raises(VidaxError, match=match):
            Gemma4Config.from_dict({"text_config": {**TEXT, **edit}})


def test_release_preset_is_the_manifests_config():
    """The 12B preset equals the manifest's ``text_config`` (its two prose fields --
    layer_types, described, equal to the default 5:1 pattern -- left to the default)."""
    manifest = get_manifest("ltx2_5/2.5__text_encoder")
    cfg = json.loads(json.dumps(manifest.config["instantiated_with"]))
    assert cfg["text_config"].pop("layer_types").startswith("5 x sliding_attention")
    preset = Gemma4Config.gemma4_12b_ltx()
    assert Gemma4Config.from_dict(cfg) == preset
    assert [i for i, t in enumerate(preset.layer_types) if t == FULL] == list(range(5, 48, 6))
    assert vidax.config("ltx2_5", "text_encoder", "2.5", layout="transformers") == preset


def _manifest_tensors(manifest):
    """The manifest's entries, an unknown byte length (``shape: null``, the asset tensors) as
    (0,): ``vidax.loading.verify_manifest`` cannot take ``None`` shapes yet."""
    return {k: TensorInfo((0,) if t.shape is None else tuple(t.shape), t.dtype)
            for k, t in manifest.tensors.items()}


def test_release_manifest_verifies():
    manifest = get_manifest("ltx2_5/2.5__text_encoder")
    spec, variant = registry.resolve(manifest.family, manifest.variant, manifest.component,
                                     manifest.layout)
    report, _, _ = verify_tensors(spec, spec.make_config(variant), _manifest_tensors(manifest),
                                  source=manifest.name)
    assert report.ok, str(report)
    assert report.matched == 666 and report.num_params == 11_907_350_320
    assert len(report.ignored) == 11 and len(report.assets) == 5
    assert manifest.num_tensors == 682 == 666 + 11 + 5
    ignored = sum(int(np.prod(manifest.tensors[k].shape)) for k in report.ignored)
    assert report.num_params + ignored == manifest.num_params


def test_release_manifest_through_verify_manifest():
    """``vidax verify --manifest``'s path, shape-null asset entries included."""
    report = verify_manifest(get_manifest("ltx2_5/2.5__text_encoder"))
    assert report.ok and report.matched == 666 and len(report.assets) == 5


# ----------------------------------------------------------------------------- assets
def test_assets_round_trip(case):
    from tokenizers import Tokenizer
    from transformers import Gemma4UnifiedConfig

    assets = gemma_assets(case["path"])
    tokenizer_json, tok_config = _tokenizer_files()
    assert assets.tokenizer_json == tokenizer_json
    assert assets.sidecar_json("tokenizer_config.json") == tok_config
    assert assets.config == case["config"] and assets.config["gemma_version"] == VERSION
    hf = Gemma4UnifiedConfig.from_dict(assets.config)
    assert Gemma4Config.from_dict(hf.to_dict()) == Gemma4Config.from_dict(assets.config)
    assert hf.gemma_version == VERSION

    prompts = ["  a cat sat on the mat ", "big red dog", "a " * 20, "", "<bos> blue"]
    with pytest.warns(UserWarning, match="11 tokens were dropped"):
        tokens = gemma_tokenizer(case["path"], seq_len=10)(prompts)
    backend = Tokenizer.from_buffer(assets.tokenizer_json)
    for row, text in enumerate(prompts):
        want = [2] + backend.encode(text.strip()).ids          # BOS forced, never doubled
        want = want[1:] if want[1:2] == [2] else want
        want = want[:10]
        n = len(want)
        assert tokens.ids[row, 10 - n:].tolist() == want and set(tokens.ids[row, :10 - n]) <= {0}
        assert tokens.mask[row].tolist() == [0] * (10 - n) + [1] * n
    assert tokens.dropped[2] == 11


def _with_bos_template(tokenizer_json: bytes) -> bytes:
    """The same tokenizer with a post-processor that puts ``<bos>`` first (Gemma 3's)."""
    from tokenizers import Tokenizer, processors

    tok = Tokenizer.from_buffer(tokenizer_json)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A",
                                                       special_tokens=[("<bos>", 2)])
    return tok.to_str().encode()


@pytest.mark.parametrize("variant", ["release", "add_bos", "add_eos", "left_truncation",
                                     "bos_post_processor", "no_pad_token"])
def test_tokenizer_is_ltx_cores(case, variant):
    """transformers' fast tokenizer over the same bytes and settings (ltx-core @400fd31
    ``build_gemma_hf_tokenizer``: ``PreTrainedTokenizerFast(tokenizer_object=...,
    **tokenizer_config)``), then its ``LTXGemmaTokenizer.tokenize_with_weights`` steps: strip,
    truncate, BOS forced, left padding to the length (pad = EOS where none is named)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    assets = gemma_assets(case["path"])
    settings = dict(assets.sidecar_json("tokenizer_config.json"))
    tokenizer_json = assets.tokenizer_json
    if variant == "add_bos":
        settings["add_bos_token"] = True
    elif variant == "add_eos":
        settings["add_eos_token"] = True
    elif variant == "left_truncation":
        settings["truncation_side"] = "left"
    elif variant == "bos_post_processor":
        tokenizer_json = _with_bos_template(tokenizer_json)
    elif variant == "no_pad_token":
        del settings["pad_token"]
    assets = dataclasses.replace(assets, tokenizer_json=tokenizer_json, sidecars={
        **assets.sidecars, "tokenizer_config.json": json.dumps(settings).encode()})
    hf = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_buffer(tokenizer_json), model_max_length=16,
        **{k: v for k, v in settings.items() if k not in ("tokenizer_class", "model_max_length")})
    hf.padding_side = "left"
    if hf.pad_token is None:
        hf.pad_token = hf.eos_token
    ours = GemmaTokenizer(assets, seq_len=16)
    for text in ["  the small cat ", "dog on a mat " * 5, "zebra", ""]:
        ids = hf(text.strip(), truncation=True, max_length=16).input_ids
        ids = ids if ids[:1] == [hf.bos_token_id] else [hf.bos_token_id, *ids][:16]
        padded = hf.pad({"input_ids": [ids]}, padding="max_length", max_length=16,
                        return_attention_mask=True)
        with pytest.warns(UserWarning) if len(text) > 40 else _no_warning():
            got = ours(text)
        assert got.ids[0].tolist() == padded["input_ids"][0], (variant, text)
        assert got.mask[0].tolist() == padded["attention_mask"][0], (variant, text)


def _no_warning():
    import contextlib
    import warnings

    @contextlib.contextmanager
    def ctx():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield
    return ctx()


def test_assets_refused(case, tmp_path):
    from tests.parity import edited_copy

    def drop(key):
        return lambda tensors: tensors.pop(key)
    path = edited_copy(case["path"], tmp_path / "a.safetensors", drop("tokenizer_json"))
    with pytest.raises(VidaxError, match="a.safetensors.*'tokenizer_json'"):
        gemma_assets(path)
    path = edited_copy(case["path"], tmp_path / "b.safetensors",
                       drop("hf_asset__tokenizer_config.json"))
    with pytest.raises(VidaxError, match="b.safetensors.*tokenizer_config.json"):
        gemma_tokenizer(path)

    def corrupt(tensors):
        tensors["tokenizer_json"] = tensors["tokenizer_json"][:100]
    path = edited_copy(case["path"], tmp_path / "c.safetensors", corrupt)
    with pytest.raises(VidaxError, match="c.safetensors.*tokenizer_json.*not a readable"):
        gemma_tokenizer(path)
    import safetensors.numpy
    safetensors.numpy.save_file({"x": np.zeros(2, np.float32)}, str(tmp_path / "d.safetensors"),
                                metadata={"gemma_config": "{not json"})
    with pytest.raises(VidaxError, match="d.safetensors.*gemma_config.*not valid JSON"):
        gemma_assets(tmp_path / "d.safetensors")


# ----------------------------------------------------------------------------- pairing check
def test_gemma_source_check():
    """ltx-core's ``_check_gemma_version`` (Lightricks/LTX-2@400fd31 encoder_configurator.py)."""
    dit = {"model_version": "2.5.0",
           "gemma_source_checkpoint": json.dumps({"gemma_version": VERSION})}
    ltx = {"model_type": "gemma4_unified", "gemma_version": VERSION}
    stock = {"model_type": "gemma4_unified"}
    check_gemma_source(dit, ltx, dit_file="dit.sft", encoder_file="te.sft")
    with pytest.raises(VidaxError, match="dit.sft.*te.sft.*stock Gemma"):
        check_gemma_source(dit, stock, dit_file="dit.sft", encoder_file="te.sft")
    with pytest.raises(VidaxError, match="must declare gemma_source_checkpoint"):
        check_gemma_source({"model_version": "2.5.0"}, ltx, dit_file="d", encoder_file="e")
    with pytest.warns(UserWarning, match="not checked"):
        check_gemma_source({"model_version": "2.5.0"}, stock, dit_file="d", encoder_file="e")
    check_gemma_source({"model_version": "2.3.rc1"}, {"model_type": "gemma3"},
                       dit_file="d", encoder_file="e")            # LTX-2.3 with Gemma 3
    with pytest.raises(VidaxError, match="expects a Gemma 3"):
        check_gemma_source({}, ltx, dit_file="d", encoder_file="e")
