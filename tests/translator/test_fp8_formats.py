"""vidax reads every fp8 checkpoint form a user downloads (issue #16), each checked numerically.

Per format, a tiny model of a family that ships it, its Linear weights quantized by the format's
own tool and saved in the format's key layout (``tests/translator/fp8_fixtures.py``, which
cites each rule's source), loaded with ``vidax.load`` and run:

* ComfyUI legacy scaled fp8, ComfyUI's current form (``comfy_quant`` tensors; the header's
  ``_quantization_metadata``; an e5m2 layer among e4m3 ones) and plain ``F8_E4M3`` without
  scales: Wan2.1 t2v DiT (the authors' ``WanModel``, ``tests/reference/wan22.py``), quantized by
  comfy-kitchen 0.2.40, with ComfyUI's ``model.diffusion_model.`` prefix on every key;
* HunyuanVideo 1.0's own ``mp_rank_00_model_states_fp8.pt`` + ``_fp8_map.pt`` (the authors'
  layout of ``tests/models/hunyuan_video``; reference diffusers' model through diffusers'
  converter), written with the formula of ``hyvideo/modules/fp8_optimization.py``;
* LTX-2 fp8 (``weight_scale``/``input_scale``): ltx-core 1.0.0's tiny ``LTXModel``, every
  Linear of its transformer blocks quantized by ltx-core's
  ``quantize_weight_to_fp8_per_tensor``; the video-only forward is compared.

The reference is the same PyTorch model with its weights replaced by the ORACLE's dequantized
values (comfy-kitchen's ``dequantize``; ltx-core's and HunyuanVideo's formula), never vidax's.
Bound: float32, matmul precision "highest", max |vidax - reference| <= 1e-4 x std(reference).
Negative controls: the same vidax output against a reference with one layer's scale dropped,
and one with it applied twice, must fail that bound. Bad input: a scaled-fp8 file missing one
scale, and a ``comfy_quant`` format vidax does not read (nvfp4), raise a ``VidaxError`` naming
the file, the tensor and (for the latter) the format.

Measured (CPU, float32): comfy legacy / comfy_quant / header / keep / dequantize 2.8e-6 x std,
e5m2 mixed 2.7e-6, legacy with a bf16 rest 3.1e-6, plain F8_E4M3 3.1e-6, LTX-2 7.2e-6,
HunyuanVideo 4.4e-5 (the guidance-embedding residue of its diffusers oracle, as in
tests/models/hunyuan_video); the controls 0.8 - 4.3 x std.

The fixture self-checks (``test_fixture_*``) need no vidax: the oracle's values differ from the
original weights by a plausible fp8 rounding error and the scales are distinct and != 1.
"""

from __future__ import annotations

import copy
import dataclasses
import json

import jax
import numpy as np
import pytest

import vidax
from tests.parity import assert_fails, assert_parity
from tests.translator import fp8_fixtures as fx
from vidax.errors import VidaxError

jax.config.update("jax_default_matmul_precision", "highest")
pytestmark = pytest.mark.filterwarnings("ignore:CUDA is not available:UserWarning")

# ============================================================================ Wan2.1 (ComfyUI)
def _wan():
    from tests.models.wan2_1 import test_wan2_1_dit as wan
    return wan


def _wan_reference(cfg, state: dict, inputs) -> np.ndarray:
    """The authors' WanModel with ``state`` loaded (strict), run as tests/models/wan2_1 runs it."""
    import torch
    from tests.reference import wan22

    wan = _wan()
    model = wan22.model_module().WanModel(**dataclasses.asdict(cfg)).eval()
    model.load_state_dict(state, strict=True)
    seq_len = wan.FRAMES * (wan.HEIGHT // 2) * (wan.WIDTH // 2)
    with torch.no_grad():
        out = model(
            [torch.from_numpy(u).permute(3, 0, 1, 2) for u in inputs["x"]],
            t=torch.from_numpy(inputs["t"])[:, None].expand(wan.BATCH, seq_len),
            context=[torch.from_numpy(c[:n]) for c, n in zip(inputs["context"],
                                                              wan.TEXT_LENS)],
            seq_len=seq_len)
    return torch.stack(out).permute(0, 2, 3, 4, 1).numpy()


def _wan_vidax(path, inputs) -> np.ndarray:
    model = vidax.load("wan2_1", "dit", path, variant="tiny")
    return np.asarray(_wan()._run_vidax(model, **inputs))


#: The quantized Linears: every 2-D weight of the blocks (ComfyUI's repacks quantize those),
#: the e5m2 one for the mixed file, and the layer the negative controls edit.
WAN_E5M2 = ("blocks.1.cross_attn.v",)
WAN_CONTROL = "blocks.0.ffn.2"


@pytest.fixture(scope="module")
def wan_case():
    """Wan2.1 tiny t2v: config, original state, the quantized layers, inputs."""
    from tests.parity import randomize
    from tests.reference import wan22
    from vidax.models.wan2_1.dit import WanDiTConfig

    cfg = WanDiTConfig.tiny("t2v")
    model = wan22.model_module().WanModel(**dataclasses.asdict(cfg)).eval()
    randomize(model.named_parameters(), seed=0)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    layers = [k[: -len(".weight")] for k, v in state.items()
              if k.startswith("blocks.") and k.endswith(".weight") and v.ndim == 2]
    assert WAN_CONTROL in layers and set(WAN_E5M2) <= set(layers)
    inputs = _wan()._inputs(cfg, seed=1)
    return cfg, state, layers, inputs


def _wan_refs(cfg, state, q, inputs, controls: bool = True) -> dict:
    """The reference outputs: the oracle's weights (``ok``) and, with ``controls``, one layer's
    scale dropped (``drop``) or applied twice (``twice``)."""
    cases = (("ok", {}), ("drop", {"drop": WAN_CONTROL}), ("twice", {"twice": WAN_CONTROL}))
    return {name: _wan_reference(cfg, q.reference_state(state, **kw), inputs)
            for name, kw in (cases if controls else cases[:1])}


@pytest.fixture(scope="module")
def wan_e4m3(wan_case):
    """comfy-kitchen's float8_e4m3fn quantization of the blocks (the legacy form's only kind)
    and its reference outputs: correct, one scale dropped, one scale applied twice."""
    cfg, state, layers, inputs = wan_case
    q = fx.comfy_quantize(state, layers)
    return q, _wan_refs(cfg, state, q, inputs)


@pytest.fixture(scope="module")
def wan_comfy(wan_case):
    """The same with one float8_e5m2 layer (ComfyUI's current form records a format per layer)
    and its correct reference."""
    cfg, state, layers, inputs = wan_case
    q = fx.comfy_quantize(state, layers, e5m2=WAN_E5M2)
    return q, _wan_refs(cfg, state, q, inputs, controls=False)


def _save(tensors: dict, path, metadata: dict | None = None):
    import safetensors.torch

    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(path),
                                metadata=metadata or None)
    return path


def test_fixture_comfy_kitchen_error_is_fp8_rounding(wan_case, wan_e4m3, wan_comfy):
    import torch

    _, state, layers, _ = wan_case
    q, refs = wan_e4m3
    errors = fx.check_fp8_error(q, state)
    assert set(errors) == set(layers)
    # the oracle is comfy-kitchen's dequantize: q * scale, in float32
    key = f"{WAN_CONTROL}.weight"
    torch.testing.assert_close(q.dequantized[key],
                               q.stored[key].float() * q.scales[WAN_CONTROL], rtol=0, atol=0)
    # the controls move the output far past the bound
    for bad in ("drop", "twice"):
        assert np.abs(refs[bad] - refs["ok"]).max() > 1e-2 * refs["ok"].std()
    mixed, _ = wan_comfy
    errors = fx.check_fp8_error(mixed, state)
    assert mixed.stored[f"{WAN_E5M2[0]}.weight"].dtype == torch.float8_e5m2
    # e5m2 has one mantissa bit fewer: its worst relative error is larger than every e4m3's
    assert errors[WAN_E5M2[0]] > max(v for k, v in errors.items() if k not in WAN_E5M2)


def test_fixture_legacy_file_layout(wan_e4m3, tmp_path):
    import safetensors
    import torch

    q, _ = wan_e4m3
    path = _save(fx.comfy_legacy_file(q), tmp_path / "wan_scaled.safetensors")
    with safetensors.safe_open(str(path), "pt") as f:
        keys = set(f.keys())
        assert f.get_tensor("model.diffusion_model.scaled_fp8").dtype == torch.float8_e4m3fn
        scale = f.get_tensor(f"model.diffusion_model.{WAN_CONTROL}.scale_weight")
    assert scale.shape == () and float(scale) == float(q.scales[WAN_CONTROL]) != 1.0
    assert all(k.startswith("model.diffusion_model.") for k in keys)
    assert sum(k.endswith(".scale_weight") for k in keys) == len(q.scales)


@pytest.mark.parametrize("prefix", ["model.diffusion_model.", ""], ids=["prefixed", "bare"])
def test_comfy_legacy_scaled_fp8(wan_case, wan_e4m3, prefix, tmp_path, record_property):
    _, _, _, inputs = wan_case
    q, refs = wan_e4m3
    path = _save(fx.comfy_legacy_file(q, prefix=prefix), tmp_path / "wan_scaled.safetensors")
    out = _wan_vidax(path, inputs)
    assert_parity(f"comfy legacy ({prefix or 'bare'})", out, refs["ok"], record_property)
    assert_fails("comfy legacy, scale dropped", out, refs["drop"], record_property)
    assert_fails("comfy legacy, scale twice", out, refs["twice"], record_property)


@pytest.mark.parametrize("header", [False, True], ids=["comfy_quant", "header_metadata"])
def test_comfy_current_form(wan_case, wan_e4m3, header, tmp_path, record_property):
    _, _, _, inputs = wan_case
    q, refs = wan_e4m3
    tensors, metadata = fx.comfy_current_file(q, header=header)
    path = _save(tensors, tmp_path / "wan_fp8_scaled.safetensors", metadata)
    out = _wan_vidax(path, inputs)
    name = "header" if header else "comfy_quant"
    assert_parity(f"comfy {name}", out, refs["ok"], record_property)
    assert_fails(f"comfy {name}, scale dropped", out, refs["drop"], record_property)
    assert_fails(f"comfy {name}, scale twice", out, refs["twice"], record_property)


def test_comfy_legacy_with_bf16_rest(wan_case, wan_e4m3, tmp_path, record_property):
    """As Comfy-Org's repacks store it: the fp8 Linears beside 16-bit everything else (here
    bf16), loaded with ``dtype="float32"``: the fp8 weights stay fp8 + scale, the rest is cast."""
    import torch

    cfg, state, _, inputs = wan_case
    q, _ = wan_e4m3
    rest = {k: v.to(torch.bfloat16) for k, v in state.items() if k not in q.dequantized}
    mixed = fx.Quantized({**q.stored, **rest}, q.scales, q.dequantized, q.fp8_dtype)
    path = _save(fx.comfy_legacy_file(mixed), tmp_path / "wan_scaled_bf16.safetensors")
    model, report = vidax.load_with_report("wan2_1", "dit", path, variant="tiny",
                                           dtype="float32")
    assert report.kept_quantized == len(q.scales)
    out = np.asarray(_wan()._run_vidax(model, **inputs))
    ref_state = {k: v.float() for k, v in mixed.reference_state(state).items()}
    ref_state.update({k: v.float() for k, v in rest.items()})
    assert_parity("comfy legacy + bf16 rest", out, _wan_reference(cfg, ref_state, inputs),
                  record_property)


def test_comfy_current_form_with_an_e5m2_layer(wan_case, wan_comfy, tmp_path, record_property):
    _, _, _, inputs = wan_case
    q, refs = wan_comfy
    tensors, metadata = fx.comfy_current_file(q)
    path = _save(tensors, tmp_path / "wan_fp8_mixed.safetensors", metadata)
    assert_parity("comfy_quant e4m3 + e5m2", _wan_vidax(path, inputs), refs["ok"],
                  record_property)


def test_plain_fp8_without_scales(wan_case, tmp_path, record_property):
    cfg, state, layers, inputs = wan_case
    q = fx.plain_fp8(state, layers)
    fx.check_fp8_error(q, state)
    path = _save({fx.COMFY_PREFIX + k: v for k, v in q.stored.items()},
                 tmp_path / "wan_fp8_e4m3fn.safetensors")
    out = _wan_vidax(path, inputs)
    assert_parity("plain F8_E4M3", out, _wan_reference(cfg, q.reference_state(state), inputs),
                  record_property)
    # negative control: the unquantized weights are not what the file holds
    assert_fails("plain F8_E4M3 vs unquantized", out, _wan_reference(cfg, state, inputs),
                 record_property)


def _missing_scale_error(q, folder) -> tuple:
    """Load a legacy file without one ``scale_weight``: ``(path, the VidaxError's message)``."""
    tensors = fx.comfy_legacy_file(q)
    del tensors[f"model.diffusion_model.{WAN_CONTROL}.scale_weight"]
    path = _save(tensors, folder / "wan_missing_scale.safetensors")
    with pytest.raises(VidaxError) as e:
        vidax.load("wan2_1", "dit", path, variant="tiny")
    return path, str(e.value)


def test_legacy_file_missing_a_scale_is_refused(wan_e4m3, tmp_path):
    _, message = _missing_scale_error(wan_e4m3[0], tmp_path)
    assert f"{WAN_CONTROL}.weight" in message and f"{WAN_CONTROL}.scale_weight" in message, \
        message


def test_legacy_file_missing_a_scale_names_the_file(wan_e4m3, tmp_path):
    path, message = _missing_scale_error(wan_e4m3[0], tmp_path)
    assert path.name in message, message


@pytest.mark.parametrize("mode", ["keep", "dequantize"])
def test_comfy_current_form_quantized_modes(wan_case, wan_e4m3, mode, tmp_path,
                                             record_property):
    """fp8 kept on the device with its scale (dequantized inside the layer; the default, which
    the other tests use) or dequantized at load: the same output within the bound, and the
    report counts the weights kept quantized."""
    _, _, _, inputs = wan_case
    q, refs = wan_e4m3
    tensors, metadata = fx.comfy_current_file(q)
    path = _save(tensors, tmp_path / "wan_fp8_scaled.safetensors", metadata)
    model, report = vidax.load_with_report("wan2_1", "dit", path, variant="tiny",
                                           quantized=mode)
    assert report.kept_quantized == (len(q.scales) if mode == "keep" else 0)
    out = np.asarray(_wan()._run_vidax(model, **inputs))
    assert_parity(f"comfy_quant quantized={mode}", out, refs["ok"], record_property)
    assert_fails(f"comfy_quant quantized={mode}, scale twice", out, refs["twice"],
                 record_property)


@pytest.mark.parametrize("header", [False, True], ids=["comfy_quant", "header_metadata"])
def test_unsupported_comfy_format_is_refused(wan_e4m3, header, tmp_path):
    """One layer stored as ComfyUI's nvfp4 (packed uint8 [out, in / 2], fp8 block scales per
    16, a per-tensor ``weight_scale_2``; comfy/quant_ops.py ``QUANT_ALGOS["nvfp4"]``)."""
    import torch

    q, _ = wan_e4m3
    tensors, metadata = fx.comfy_current_file(q, header=header)
    layer = f"{fx.COMFY_PREFIX}{WAN_CONTROL}"
    out_f, in_f = q.stored[f"{WAN_CONTROL}.weight"].shape
    gen = torch.Generator().manual_seed(0)
    tensors[f"{layer}.weight"] = torch.randint(0, 256, (out_f, in_f // 2), generator=gen,
                                               dtype=torch.uint8)
    tensors[f"{layer}.weight_scale"] = torch.rand(out_f, in_f // 16, generator=gen).to(
        torch.float8_e4m3fn)
    tensors[f"{layer}.weight_scale_2"] = torch.tensor(0.01)
    if header:
        record = json.loads(metadata["_quantization_metadata"])
        record["layers"][layer] = {"format": "nvfp4"}
        metadata["_quantization_metadata"] = json.dumps(record)
    else:
        tensors[f"{layer}.comfy_quant"] = fx.comfy_record("nvfp4")
    path = _save(tensors, tmp_path / "wan_nvfp4.safetensors", metadata)
    with pytest.raises(VidaxError) as e:
        vidax.load("wan2_1", "dit", path, variant="tiny")
    message = str(e.value)
    assert path.name in message and WAN_CONTROL in message and "nvfp4" in message, message


# ============================================================================ HunyuanVideo 1.0
def _hv():
    from tests.models.hunyuan_video import test_hunyuan_video_dit as hv
    return hv


HV_CONTROL = "double_blocks.0.img_mlp.fc1"


@pytest.fixture(scope="module")
def hv_case(tmp_path_factory):
    """The authors' tiny layout, HunyuanVideo's fp8 of it, the release pair of files, inputs
    and diffusers' outputs (correct, one scale dropped, one applied twice)."""
    from tests.parity import randomize
    from vidax.models.hunyuan_video.dit import HunyuanVideoDiTConfig

    hv = _hv()
    cfg = HunyuanVideoDiTConfig.tiny()
    state = hv.authors_state(cfg)
    randomize(state.items(), seed=0)
    q = fx.hunyuan_quantize(state)
    assert HV_CONTROL in q.scales
    folder = tmp_path_factory.mktemp("hunyuan_fp8")
    path = fx.hunyuan_files(q, folder)
    inputs = hv._inputs(cfg, seed=1)
    refs = {name: hv._diffusers_output(hv.diffusers_model(cfg, q.reference_state(state, **kw)),
                                       inputs)
            for name, kw in (("ok", {}), ("drop", {"drop": HV_CONTROL}),
                             ("twice", {"twice": HV_CONTROL}))}
    return cfg, state, q, path, inputs, refs


def test_fixture_hunyuan_fp8_pair(hv_case):
    import torch

    cfg, state, q, path, _, refs = hv_case
    fx.check_fp8_error(q, state)
    # every Linear of the double/single blocks, nothing else
    assert set(q.scales) == {k[: -len(".weight")] for k, v in state.items()
                             if k.endswith(".weight") and v.ndim == 2
                             and k.startswith(("double_blocks.", "single_blocks."))}
    saved = torch.load(path, weights_only=True)
    scale_map = torch.load(path.with_name("mp_rank_00_model_states_fp8_map.pt"),
                           weights_only=True)
    assert set(saved) == {"module"} and set(scale_map) == set(q.scales)
    assert saved["module"][f"{HV_CONTROL}.weight"].dtype == torch.float8_e4m3fn
    assert saved["module"]["img_in.proj.weight"].dtype == torch.float32
    for bad in ("drop", "twice"):
        assert np.abs(refs[bad] - refs["ok"]).max() > 1e-2 * refs["ok"].std()


def test_hunyuan_fp8_release_pair(hv_case, record_property):
    _, _, _, path, inputs, refs = hv_case
    model = vidax.load("hunyuan_video", "dit", path, variant="tiny")
    out = np.asarray(_hv()._run_vidax(model, **inputs))
    assert_parity("hunyuan fp8", out, refs["ok"], record_property)
    assert_fails("hunyuan fp8, scale dropped", out, refs["drop"], record_property)
    assert_fails("hunyuan fp8, scale twice", out, refs["twice"], record_property)


def _map_missing_a_layer_error(q, folder) -> tuple:
    path = fx.hunyuan_files(q, folder, drop_from_map=HV_CONTROL)
    with pytest.raises(VidaxError) as e:
        vidax.load("hunyuan_video", "dit", path, variant="tiny")
    return path, str(e.value)


def test_hunyuan_fp8_map_missing_a_layer_is_refused(hv_case, tmp_path):
    _, message = _map_missing_a_layer_error(hv_case[2], tmp_path)
    assert f"{HV_CONTROL}.weight" in message, message


def test_hunyuan_fp8_map_missing_a_layer_names_the_file(hv_case, tmp_path):
    path, message = _map_missing_a_layer_error(hv_case[2], tmp_path)
    assert path.name in message, message


def test_hunyuan_fp8_without_its_map_is_refused(hv_case, tmp_path):
    """Read without its scales the fp8 file would give wrong weights silently (the scales are
    ~1e-3): vidax must refuse it, naming the map it looked for."""
    _, _, q, _, _, _ = hv_case
    path = fx.hunyuan_files(q, tmp_path)
    path.with_name("mp_rank_00_model_states_fp8_map.pt").unlink()
    with pytest.raises(VidaxError) as e:
        vidax.load("hunyuan_video", "dit", path, variant="tiny")
    assert "mp_rank_00_model_states_fp8_map.pt" in str(e.value), str(e.value)


# ============================================================================ LTX-2 (ltx-core)
def _ltx():
    from tests.models.ltx2_5 import test_ltx2_dit as ltx
    return ltx


LTX_STRUCTURE = "19b"       # the tiny preset (variant="tiny")
LTX_CONTROL = "transformer_blocks.1.ff.net.2"


@pytest.fixture(scope="module")
def ltx_case(tmp_path_factory):
    """ltx-core's tiny LTXModel (a copy: the cached one is shared), every Linear of its
    transformer blocks quantized by ltx-core, written as an LTX-2 fp8 release, and the
    reference outputs (correct, one scale dropped, one applied twice)."""
    import safetensors.torch
    import torch

    ltx = _ltx()
    model, v_conn, a_conn = ltx._reference(LTX_STRUCTURE)
    model = copy.deepcopy(model)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    linears = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    layers = sorted(n for n in linears if n.startswith("transformer_blocks."))
    assert LTX_CONTROL in layers
    q = fx.ltx_quantize(state, layers)

    tensors = {ltx.PREFIX + k: v for k, v in q.stored.items()}
    for i, (layer, scale) in enumerate(q.scales.items()):
        tensors[f"{ltx.PREFIX}{layer}.weight_scale"] = scale
        tensors[f"{ltx.PREFIX}{layer}.input_scale"] = torch.tensor(0.02 + 0.001 * i)
    for name, connector in (("video", v_conn), ("audio", a_conn)):
        tensors.update({f"{ltx.PREFIX}{name}_embeddings_connector.{k}": v
                        for k, v in connector.state_dict().items()})
    path = tmp_path_factory.mktemp("ltx2_fp8") / "ltx-2-tiny-dev-fp8.safetensors"
    safetensors.torch.save_file(
        {k: v.detach().contiguous().clone() for k, v in tensors.items()}, str(path),
        metadata={"config": json.dumps({"transformer": ltx.STRUCTURES[LTX_STRUCTURE]})})

    x = ltx._inputs(LTX_STRUCTURE)
    refs = {}
    for name, kw in (("ok", {}), ("drop", {"drop": LTX_CONTROL}),
                     ("twice", {"twice": LTX_CONTROL})):
        model.load_state_dict(q.reference_state(state, **kw), strict=True)
        refs[name] = ltx._reference_forward(model, x, video_only=True)[0]
    return state, q, path, x, refs


def test_fixture_ltx_core_quantization(ltx_case):
    import torch

    state, q, _, _, refs = ltx_case
    fx.check_fp8_error(q, state)
    key = f"{LTX_CONTROL}.weight"
    assert q.stored[key].shape == state[key].shape and q.stored[key].dtype == torch.float8_e4m3fn
    assert q.scales[LTX_CONTROL].shape == ()
    assert any(k.startswith("transformer_blocks.0.audio_") for k in q.dequantized)
    for bad in ("drop", "twice"):
        assert np.abs(refs[bad] - refs["ok"]).max() > 1e-2 * refs["ok"].std()


def test_ltx2_fp8(ltx_case, record_property):
    """The video-only forward (half the compile of the AV one): every block's video Linears
    are fp8 and the audio ones, fp8 too, are read and verified 1:1 by the same rule."""
    _, _, path, x, refs = ltx_case
    model = vidax.load("ltx2_5", "dit", path, variant="tiny")
    out_v, out_a = _ltx()._run(model, x, video_only=True)
    assert out_a is None
    out = np.asarray(out_v)
    assert_parity("ltx2 fp8 video", out, refs["ok"], record_property)
    assert_fails("ltx2 fp8 video, scale dropped", out, refs["drop"], record_property)
    assert_fails("ltx2 fp8 video, scale twice", out, refs["twice"], record_property)
