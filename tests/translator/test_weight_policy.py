"""The weight policy at verify/load (issue #11): integer or boolean data where the model has a
float parameter is refused from the stored dtypes alone, naming the key, unless a mapper
rule declares it quantized (``Dequantize``) or an asset (``Asset``); weights holding NaN or
Inf are refused after placement, naming the checkpoint's keys with their counts.

The checkpoints are the demo's tiny Wan2.1 DiT (``vidax/data/tiny/wan2_1.json``: the
authors' key names, with its ``config.json``) in random float32 values, edited per test.
"""

from __future__ import annotations

import json
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import vidax
from vidax import cli
from vidax.demo.common import random_tensors, tiny_layout, write_safetensors
from vidax.errors import NonFiniteWeightsError, VerificationError, VidaxError
from vidax.loading import verify_manifest
from vidax.manifests import all_manifests, get_manifest
from vidax.translator import verify as _verify
from vidax.translator.mapping import Asset, Dequantize, Mapper, TensorInfo

LAYOUT = tiny_layout("wan2_1")["dit"]
KEY = "blocks.0.self_attn.q.weight"          # a Linear weight of block 0
TABLE = "head.modulation"                    # a free float parameter


def _tensors(seed: int = 0) -> dict[str, np.ndarray]:
    return random_tensors(LAYOUT, np.random.default_rng(seed), np.float32)


def _write(folder, tensors):
    folder.mkdir(parents=True, exist_ok=True)
    write_safetensors(folder / "diffusion_pytorch_model.safetensors", tensors)
    (folder / "config.json").write_text(json.dumps(LAYOUT["config"]))
    return folder / "diffusion_pytorch_model.safetensors"


# ------------------------------------------------------------------ integer / boolean data
@pytest.fixture(scope="module")
def int_file(tmp_path_factory):
    tensors = _tensors()
    tensors[KEY] = np.round(tensors[KEY] * 100).astype(np.int64)
    tensors[TABLE] = tensors[TABLE] > 0                         # bool
    return _write(tmp_path_factory.mktemp("int") / "wan", tensors)


def test_verify_reports_integer_and_boolean_weights(int_file):
    report = vidax.verify("wan2_1", "dit", int_file)
    assert not report.ok
    assert {(r[1], r[3]) for r in report.wrong_dtype} == {(KEY, "int64"), (TABLE, "bool")}
    text = str(report)
    assert "wrong dtype" in text and KEY in text and "int64" in text and TABLE in text
    assert report.matched == report.expected - 2


def test_load_refuses_integer_weights_naming_the_key(int_file):
    with pytest.raises(VerificationError, match="wrong dtype") as e:
        vidax.load("wan2_1", "dit", int_file)
    assert KEY in str(e.value) and "int64" in str(e.value)
    # even with a cast asked for: the policy is about the stored data
    with pytest.raises(VerificationError, match=KEY):
        vidax.load("wan2_1", "dit", int_file, dtype="fp32")


def test_verify_cli_exits_1_naming_the_key(int_file, capsys):
    rc = cli.main(["verify", "wan2_1", "--component", "dit", "--checkpoint", str(int_file)])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert KEY in out and "int64" in out and "wrong dtype" in out


@pytest.mark.slow
def test_verify_cli_process_exits_1_without_a_traceback(int_file):
    proc = subprocess.run([sys.executable, "-m", "vidax.cli", "verify", "wan2_1", "--component",
                           "dit", "--checkpoint", str(int_file)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert KEY in proc.stdout and "Traceback" not in proc.stderr


def test_verify_manifest_with_an_integer_weight_names_it(tmp_path, capsys):
    from tests.test_cli import _manifest_file

    def edit(tensors):
        tensors["blocks.3.self_attn.q.weight"]["dtype"] = "int64"

    path = _manifest_file(tmp_path, "wan2_1/t2v-1.3b__dit", edit)
    assert cli.main(["verify", "--manifest", str(path)]) == 1
    out = capsys.readouterr().out
    assert "wrong dtype" in out and "blocks.3.self_attn.q.weight" in out


def test_released_integer_tensors_are_ignored_not_refused():
    """Every packaged manifest with integer/boolean tensors (Cosmos' TransformerEngine
    ``_extra_state`` bytes and sample counters, CLIP's ``position_ids``) still verifies:
    its mapper ignores them with a reason."""
    names = [m.name for m in all_manifests()
             if any(t.dtype in ("int64", "uint8", "bool") for t in m.tensors.values())
             and m.component != "text_encoder"]        # LTX-2.5's Gemma 4: not implemented
    assert len(names) >= 5
    for name in names:
        report = verify_manifest(get_manifest(name))
        assert report.ok and not report.wrong_dtype, (name, str(report))
        assert report.ignored


def _abstract(**shapes):
    import jax

    return {k: jax.ShapeDtypeStruct(s, np.float32) for k, s in shapes.items()}


def test_dequantize_declares_integer_data_quantized():
    """int8 weights with a scale (``Dequantize``) feed a float parameter; the same int8
    weight without its scale is refused; fp8 scaled weights (``Target.scale``) pass."""
    mapper = Mapper("t", (Dequantize(r"(.*)\.weight", r"\1.weight_scale", "float32"),))
    tensors = {"lin.weight": TensorInfo((4, 3), "int8"),
               "lin.weight_scale": TensorInfo((4,), "float32")}
    plan = mapper.plan(tensors)
    assert plan.targets["lin.kernel"].quantized == "scaled"
    report = _verify.compare(plan, _abstract(**{"lin.kernel": (3, 4)}), source="q",
                             num_tensors=2)
    assert report.ok and report.matched == 2
    array = {"lin.weight": np.arange(12, dtype=np.int8).reshape(4, 3),
             "lin.weight_scale": np.full(4, 0.5, np.float32)}
    np.testing.assert_array_equal(plan.targets["lin.kernel"].materialize(array),
                                  (np.arange(12).reshape(4, 3) * 0.5).T.astype(np.float32))
    del tensors["lin.weight_scale"]
    report = _verify.compare(mapper.plan(tensors), _abstract(**{"lin.kernel": (3, 4)}),
                             source="q", num_tensors=1)
    assert report.wrong_dtype == [("lin.kernel", "lin.weight", "float32", "int8")]
    fp8 = {"lin.weight": TensorInfo((4, 3), "float8_e4m3fn"),
           "lin.weight_scale": TensorInfo((), "float32")}
    report = _verify.compare(mapper.plan(fp8), _abstract(**{"lin.kernel": (3, 4)}),
                             source="fp8", num_tensors=2)
    assert report.ok


def test_asset_rule_keeps_bytes_out_of_the_model():
    mapper = Mapper("t", (Asset(r"tokenizer_json|hf_asset__.*", "tokenizer and sidecar files"),))
    tensors = {"lin.weight": TensorInfo((4, 3), "float32"),
               "tokenizer_json": TensorInfo((1000,), "uint8"),
               "hf_asset__tokenizer_config.json": TensorInfo((80,), "uint8")}
    plan = mapper.plan(tensors)
    assert set(plan.assets) == {"tokenizer_json", "hf_asset__tokenizer_config.json"}
    report = _verify.compare(plan, _abstract(**{"lin.kernel": (3, 4)}), source="a",
                             num_tensors=3)
    assert report.ok and report.expected == 1 and report.matched == 1
    assert any("assets" in line and "tokenizer_json" in line for line in report.lines())
    # without the rule, the bytes are a tensor with no home (and not silently a weight)
    plan = Mapper("t", ()).plan(tensors)
    report = _verify.compare(plan, _abstract(**{"lin.kernel": (3, 4)}), source="a",
                             num_tensors=3)
    assert not report.ok and {r[1] for r in report.unexpected} == {
        "tokenizer_json", "hf_asset__tokenizer_config.json"}


def test_ltx2_5_text_encoder_file_with_uint8_tokenizer_loads_its_projection(tmp_path):
    """LTX-2.5's ``gemma4-12b-with-proj-ltx-2.5`` file keeps its tokenizer as uint8 tensors
    (``tokenizer_json``, ``hf_asset__*``) beside ``text_embedding_projection.*``: the
    projection verifies and loads from it (the bytes are outside its prefix)."""
    from vidax.models.ltx2_5.config import LTX2TextProjectionConfig

    cfg = LTX2TextProjectionConfig.tiny()
    rng = np.random.default_rng(0)
    width = cfg.embedding_dim * cfg.num_layers
    tensors = {
        "text_embedding_projection.video_aggregate_embed.weight": (cfg.video_dim, width),
        "text_embedding_projection.video_aggregate_embed.bias": (cfg.video_dim,),
        "text_embedding_projection.audio_aggregate_embed.weight": (cfg.audio_dim, width),
        "text_embedding_projection.audio_aggregate_embed.bias": (cfg.audio_dim,)}
    tensors = {k: rng.standard_normal(s).astype(ml_dtypes.bfloat16) for k, s in tensors.items()}
    tensors["tokenizer_json"] = np.frombuffer(b'{"version": "1.0"}', np.uint8).copy()
    tensors["hf_asset__chat_template.jinja"] = np.frombuffer(b"{{ x }}", np.uint8).copy()
    path = tmp_path / "gemma4-12b-with-proj-ltx-2.5-bf16.safetensors"
    write_safetensors(path, tensors)
    report = vidax.verify("ltx2_5", "text_projection", path, config=cfg)
    assert report.ok and report.matched == 4 and not report.wrong_dtype
    model, report = vidax.load_with_report("ltx2_5", "text_projection", path, config=cfg)
    assert report.ok


# ----------------------------------------------------------------------- non-finite values
def test_all_nan_weights_are_refused_naming_keys(tmp_path):
    tensors = {k: np.full_like(v, np.nan) for k, v in _tensors().items()}
    path = _write(tmp_path / "wan", tensors)
    assert vidax.verify("wan2_1", "dit", path).ok     # names, shapes and dtypes are right
    with pytest.raises(NonFiniteWeightsError) as e:
        vidax.load("wan2_1", "dit", path)
    message = str(e.value)
    assert str(path) in message and f"{len(tensors)} of {len(tensors)} weight tensor" in message
    assert "\n" not in message and "more" in message
    assert len(e.value.bad) == len(tensors) and set(e.value.bad) == set(tensors)
    # checkpoint key names (the stored ones), not Flax paths; all equally bad: by name
    first = sorted(tensors)[:5]
    assert all(f"{k} ({tensors[k].size:,} of {tensors[k].size:,} values)" in message
               for k in first)
    assert ".kernel" not in message and sorted(tensors)[5] not in message


def test_a_few_inf_and_nan_values_are_refused_with_counts(tmp_path):
    tensors = _tensors()
    tensors[KEY].flat[[3, 7]] = np.inf
    tensors[TABLE].flat[0] = np.nan
    path = _write(tmp_path / "wan", tensors)
    with pytest.raises(NonFiniteWeightsError) as e:
        vidax.load("wan2_1", "dit", path)
    assert e.value.bad == {KEY: 2, TABLE: 1}
    size = tensors[KEY].size
    assert f"{KEY} (2 of {size:,} values)" in str(e.value)
    assert "2 of 69 weight tensor" in str(e.value)


def test_non_finite_on_a_mesh(tmp_path):
    """Sharded placement (each device's block read on its own) is checked too."""
    from vidax.sharding import make_mesh

    tensors = _tensors()
    tensors[KEY].flat[-1] = -np.inf
    path = _write(tmp_path / "wan", tensors)
    with pytest.raises(NonFiniteWeightsError) as e:
        vidax.load("wan2_1", "dit", path, mesh=make_mesh("dp=4,fsdp=2"))
    assert e.value.bad == {KEY: 1}


def test_a_cast_that_overflows_says_so(tmp_path):
    tensors = _tensors()
    tensors[KEY].flat[0] = 1e6                 # finite in float32, Inf in float16
    path = _write(tmp_path / "wan", tensors)
    with pytest.warns(RuntimeWarning), pytest.raises(NonFiniteWeightsError,
                                                     match="after the cast to float16") as e:
        vidax.load("wan2_1", "dit", path, dtype="fp16")
    assert KEY in str(e.value) and "wider dtype" in str(e.value)
    assert vidax.load("wan2_1", "dit", path, dtype="bf16") is not None


def test_finite_weights_load(tmp_path):
    path = _write(tmp_path / "wan", _tensors())
    model, report = vidax.load_with_report("wan2_1", "dit", path)
    assert report.ok and model.config.text_dim == LAYOUT["config"]["text_dim"]


def test_host_check_for_convert():
    """``verify.check_finite``: what ``vidax convert`` calls on each tensor it writes."""
    good = np.ones((3, 5), np.float32)
    _verify.check_finite(good, "a.weight", source="x.safetensors")
    _verify.check_finite(np.arange(4), "ids", source="x.safetensors")     # integers: no test
    bad = good.astype(ml_dtypes.bfloat16).T                               # a strided view
    bad[1, 2] = np.nan
    with pytest.raises(NonFiniteWeightsError, match=r"x\.safetensors.*a\.weight \(1 of 15"):
        _verify.check_finite(bad, "a.weight", source="x.safetensors")
    assert _verify.count_nonfinite(np.float32(np.inf)) == 1
    big = np.zeros((3, (1 << 24) // 2 + 1), np.float16)                   # several blocks
    big[2, -1] = np.inf
    assert _verify.count_nonfinite(big) == 1


def test_non_finite_error_is_a_vidax_error():
    assert issubclass(NonFiniteWeightsError, VidaxError)


def test_generate_on_a_release_with_nan_weights_exits_1_and_writes_nothing(tmp_path, capsys):
    """The demo's Wan2.1 release with a few NaN values in one DiT tensor: ``vidax generate``
    used to exit 0 with an all-black video; now it stops at the load, exit 1, one paragraph
    naming the file and the key, and no video."""
    from vidax import demo
    from vidax.translator.io import open_checkpoint

    folder = tmp_path / "release"
    demo.family("wan2_1").write(folder)
    dit = folder / "diffusion_pytorch_model.safetensors"
    with open_checkpoint(dit) as ckpt:
        tensors = {k: np.array(ref.read()) for k, ref in ckpt.items()}
    tensors[KEY].flat[:4] = np.nan
    write_safetensors(dit, tensors)
    video = tmp_path / "out.mp4"
    assert cli.main(demo.generate_argv("wan2_1", folder, video)) == 1
    err = " ".join(capsys.readouterr().err.split())       # the console wraps lines
    assert err.startswith("error:") and str(dit) in err and f"{KEY} (4 of" in err
    assert "internal error" not in err and not video.exists()
