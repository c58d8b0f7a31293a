"""The `vidax` command: verify, inspect, models, generate's checks before loading, errors
(README.md, "Use")."""

from __future__ import annotations

import importlib
import io
import json
import os
import pydoc
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
from rich.console import Console

import vidax
from vidax import cli, registry
from vidax.errors import VidaxError
from vidax.manifests import get_manifest
from vidax.pipelines import PIPELINES

REPO = Path(__file__).resolve().parents[1]

WAN_DITS = ["t2v-1.3b", "t2v-14b", "i2v-14b", "flf2v-14b"]


def _manifest_file(tmp_path, name, edit=None):
    """The packaged manifest ``name`` as a JSON file, optionally edited."""
    m = get_manifest(name)
    data = {"family": m.family, "variant": m.variant, "component": m.component,
            "layout": m.layout, "container": m.container, "wrapper": m.wrapper,
            "config": m.config, "num_params": m.num_params, "released_as": m.released_as,
            "tensors": {k: {"shape": list(t.shape), "dtype": t.dtype}
                        for k, t in m.tensors.items()}}
    if edit:
        edit(data["tensors"])
    data["num_tensors"] = len(data["tensors"])
    path = tmp_path / f"{m.variant}__{m.component}.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("variant", WAN_DITS)
def test_verify_manifest_passes(tmp_path, capsys, variant):
    m = get_manifest(f"wan2_1/{variant}__dit")
    rc = cli.main(["verify", "--manifest", str(_manifest_file(tmp_path, m.name))])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"matched {m.num_tensors}/{m.num_tensors} tensors, {m.num_params:,} parameters" in out


def _drop(tensors):
    del tensors["blocks.3.ffn.0.bias"]


def _add(tensors):
    tensors["blocks.3.ffn.1.weight"] = {"shape": [4, 4], "dtype": "float32"}


def _reshape(tensors):
    tensors["blocks.3.self_attn.q.weight"]["shape"] = [1536, 1535]


@pytest.mark.parametrize("edit,expected", [
    (_drop, ["missing", "blocks.3.ffn.fc1.bias"]),
    (_add, ["unexpected", "blocks.3.ffn.1.weight"]),
    (_reshape, ["mis-shaped", "blocks.3.self_attn.q.weight", "[1535, 1536]"]),
])
def test_verify_manifest_names_the_bad_key(tmp_path, capsys, edit, expected):
    path = _manifest_file(tmp_path, "wan2_1/t2v-1.3b__dit", edit)
    rc = cli.main(["verify", "--manifest", str(path)])
    out = capsys.readouterr().out
    assert rc == 1
    for text in expected:
        assert text in out


def test_verify_real_checkpoint_and_wrong_component(tmp_path, capsys):
    """A file whose keys are the manifest's (random-free zeros would do; shapes matter)."""
    m = get_manifest("wan2_1/t2v-1.3b__dit")
    # Only the structure is checked: write a *tiny* file with the release's names would need
    # other shapes, so write the manifest's first tensors at full shape but check the error.
    keys = sorted(m.tensors)[:3]
    path = tmp_path / "partial.safetensors"
    safetensors.numpy.save_file({k: np.zeros(m.tensors[k].shape, np.float32) for k in keys}, path)
    rc = cli.main(["verify", "wan2_1", "--component", "dit", "--variant", "t2v-1.3b",
                   "--checkpoint", str(path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "matched 3/3 tensors" in out and "missing" in out

    # The wrong component: tensors of the same release's VAE (its three smallest, at their
    # full shapes) given as --component dit are refused, the refusal naming each VAE tensor
    # as unexpected and matching none of them.
    vae = get_manifest("wan2_1/t2v-1.3b__vae")
    vae_keys = sorted(vae.tensors, key=lambda k: (_numel(vae.tensors[k].shape), k))[:3]
    assert not set(vae_keys) & set(m.tensors)
    path = tmp_path / "vae.safetensors"
    safetensors.numpy.save_file(
        {k: np.zeros(vae.tensors[k].shape, np.float32) for k in vae_keys}, path)
    rc = cli.main(["verify", "wan2_1", "--component", "dit", "--variant", "t2v-1.3b",
                   "--checkpoint", str(path)])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "matched 0/3 tensors" in out and "unexpected" in out, out
    for key in vae_keys:
        assert key in out, (key, out)
    # and the same file as what it is verifies against the VAE's names (no refusal of the names)
    rc = cli.main(["verify", "wan2_1", "--component", "vae", "--variant", "t2v-1.3b",
                   "--checkpoint", str(path)])
    out = capsys.readouterr().out
    assert "matched 3/3 tensors" in out and "unexpected" not in out, out


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def test_inspect_identifies_and_reports(tmp_path, capsys):
    m = get_manifest("wan2_1/t2v-1.3b__dit")
    keys = sorted(m.tensors)
    path = tmp_path / "x.safetensors"
    # Full key set at full shape would be 5.7 GB: use a deliberately small subset.
    safetensors.numpy.save_file({k: np.zeros(m.tensors[k].shape, np.float32) for k in keys[:5]},
                                path)
    assert cli.main(["inspect", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["num_tensors"] == 5 and info["format"] == "safetensors"
    assert info["dtypes"] == {"float32": 5}
    assert "identification" in info


def test_errors_are_one_paragraph(tmp_path):
    bad = tmp_path / "empty.safetensors"
    bad.write_bytes(b"")
    proc = subprocess.run([sys.executable, "-m", "vidax.cli", "inspect", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr and proc.stderr.startswith("error:")
    proc = subprocess.run([sys.executable, "-m", "vidax.cli", "verify", "nosuch", "--component",
                           "dit", "--variant", "x", "--checkpoint", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "no model registered" in proc.stderr




# ------------------------------------------------------------------------------ vidax models
def _whole(name: str, text: str) -> bool:
    """``name`` appears in ``text`` as a whole name (not cut, not part of a longer one)."""
    return re.search(r"(?<![\w.-])" + re.escape(name) + r"(?![\w.-])", text) is not None


def _assert_readable_at(out: str, width: int) -> None:
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= width
    for s in registry.specs():
        for name in (s.model_type, s.component, s.layout, *s.variants):
            assert _whole(name, out), name
    for fam, var, comp, _ in registry.aliases():
        assert _whole(fam, out) and _whole(var, out) and _whole(comp, out)


def test_models_fits_80_columns(capsys, monkeypatch):
    """The old table cut 106 cells at 80 columns, model types included."""
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    _assert_readable_at(out, 80)
    assert "wan2_1  (vidax generate wan2_1)" in out
    assert "image_encoder (original, transformers), only for: i2v-14b, flf2v-14b" in out


@pytest.mark.parametrize("width", [80, 60])
def test_models_fits_a_rich_console_of_that_width(monkeypatch, width):
    buffer = io.StringIO()
    monkeypatch.setattr(cli, "_console", lambda: Console(width=width, file=buffer,
                                                         highlight=False))
    assert cli.main(["models"]) == 0
    _assert_readable_at(buffer.getvalue(), width)


@pytest.mark.parametrize("columns", ["400", "80"])
def test_models_wide_is_the_table(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    assert cli.main(["models", "--wide"]) == 0
    out = capsys.readouterr().out
    assert "┃ model_type" in out and "…" not in out  # narrow: cells fold, none is cut
    if columns == "400":
        assert "vidax.translator.mappings.wan2_1" in out


def test_models_json(capsys):
    assert cli.main(["models", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {(m["model_type"], m["component"], m["layout"]): m for m in data["models"]}
    assert len(rows) == len(registry.specs())
    for s in registry.specs():
        row = rows[s.key]
        assert row["variants"] == list(s.variants) and row["mapper"] == s.mapper
        assert row["files"] == list(s.files)
    wan22 = [a for a in data["aliases"] if (a["family"], a["variant"], a["component"]) ==
             ("wan2_2", "t2v-a14b", "dit")]
    assert wan22 and wan22[0]["implemented_by"] == {"model_type": "wan2_1",
                                                    "variant": "t2v-14b", "component": "dit",
                                                    "layout": "original"}
    assert data["pipelines"] == list(PIPELINES)
    assert "wan2_1/t2v-14b__dit" in data["manifests"]


# ------------------------------------------------------------------------------- --debug
SUBCOMMANDS = [["models"], ["inspect", "x"], ["verify"], ["convert", "wan2_1", "--component",
               "dit", "--checkpoint", "x", "--out", "y"], ["demo"],
               ["generate", "wan2_1", "--checkpoint-dir", "x", "--prompt", "p", "--out", "a.mp4"]]


@pytest.mark.parametrize("argv", SUBCOMMANDS, ids=lambda a: a[0])
def test_debug_before_or_after_the_subcommand(argv):
    parser = cli.build_parser()
    assert parser.parse_args(argv).debug is False
    assert parser.parse_args(["--debug", *argv]).debug is True
    assert parser.parse_args([*argv, "--debug"]).debug is True
    assert parser.parse_args([argv[0], "--debug", *argv[1:]]).debug is True


def test_generate_debug_shows_the_traceback(tmp_path):
    """`vidax generate --debug` was refused (only `vidax --debug generate` worked)."""
    argv = ["generate", "--debug", "wan2_1", "--checkpoint-dir", str(tmp_path / "missing"),
            "--prompt", "p", "--out", str(tmp_path / "a.mp4")]
    with pytest.raises(VidaxError, match="no such folder"):
        cli.main(argv)


# ------------------------------------------------------------------------- did you mean
@pytest.mark.parametrize("typed", ["wan21", "wan2.1", "Wan2_1"])
@pytest.mark.parametrize("command", ["generate", "demo"])
def test_misspelt_pipeline_model_type(tmp_path, capsys, typed, command):
    argv = [command, typed]
    if command == "generate":
        argv += ["--checkpoint-dir", str(tmp_path), "--prompt", "p", "--out",
                 str(tmp_path / "a.mp4")]
    assert cli.main(argv) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: ") and "usage:" not in err
    assert "did you mean 'wan2_1'?" in err
    assert ", ".join(PIPELINES) in err
    assert len(err) < 400


def test_misspelt_model_type_in_verify(tmp_path, capsys):
    path = tmp_path / "x.safetensors"
    safetensors.numpy.save_file({"a": np.zeros(2, np.float32)}, path)
    rc = cli.main(["verify", "wan2.1", "--component", "dit", "--variant", "t2v-1.3b",
                   "--checkpoint", str(path)])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 1 and "did you mean 'wan2_1'?" in err
    assert "registered:" not in err and len(err) < 500  # not the old dump of every spec
    rc = cli.main(["verify", "wan2_1", "--component", "ditt", "--variant", "t2v-1.3b",
                   "--checkpoint", str(path)])
    assert rc == 1 and "did you mean 'dit'?" in capsys.readouterr().err


# ---------------------------------------------------------------------- packaged manifests
def test_verify_a_packaged_manifest_by_name(capsys):
    m = get_manifest("wan2_1/t2v-1.3b__dit")
    assert cli.main(["verify", "--manifest", m.name]) == 0
    assert f"matched {m.num_tensors}/{m.num_tensors} tensors" in capsys.readouterr().out
    assert cli.main(["verify", "--manifest", "wan2_1/t2v-1.3b_dit"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "did you mean 'wan2_1/t2v-1.3b__dit'?" in err and "--list-manifests" in err


def test_list_manifests(capsys):
    assert cli.main(["verify", "--list-manifests"]) == 0
    names = capsys.readouterr().out.split()
    assert "wan2_1/t2v-14b__dit" in names and len(names) == len(set(names)) > 50


def test_readme_verify_manifest_command_works(capsys):
    """The README's `vidax verify --manifest` line named a file nobody has."""
    lines = [line.split("#")[0] for line in (REPO / "README.md").read_text().splitlines()
             if line.startswith("vidax verify --manifest")]
    assert lines
    for line in lines:
        argv = shlex.split(line)[1:]
        assert cli.main(argv) == 0, line
        assert "matched" in capsys.readouterr().out


# -------------------------------------------------------------------- help(vidax.pipeline)
def test_pipeline_help_lists_every_family():
    """It listed two families and cited DESIGN.md, which is not in the repository."""
    text = pydoc.render_doc(vidax.pipeline, renderer=pydoc.plaintext)
    module_doc = importlib.import_module("vidax.pipelines").__doc__
    flat, flat_module = " ".join(text.split()), " ".join(module_doc.split())
    for model_type, module_name in PIPELINES.items():
        family = importlib.import_module(module_name)
        line = (f"``{model_type}`` ({family.Pipeline.NAME}): tasks {', '.join(family.TASKS)}; "
                f"variants {', '.join(family.VARIANTS)}")
        assert line in flat and line in flat_module, line


@pytest.mark.parametrize("module", ["vidax.cli", "vidax.pipelines", "vidax"])
def test_user_docstrings_cite_files_that_exist(module):
    mod = importlib.import_module(module)
    docs = [mod.__doc__ or ""] + [getattr(mod, n).__doc__ or "" for n in dir(mod)
                                  if callable(getattr(mod, n, None))
                                  and getattr(getattr(mod, n), "__module__", "") == module]
    text = "\n".join(docs) + "\n" + (vidax.pipeline.__doc__ or "")
    assert "DESIGN.md" not in text
    for cited in re.findall(r"\b((?:docs/[\w/<>.-]+\.md)|README\.md)", text):
        if "<model_type>" in cited:
            for model_type in PIPELINES:
                assert (REPO / cited.replace("<model_type>", model_type)).is_file(), cited
        else:
            assert (REPO / cited).is_file(), cited


# ------------------------------------------------------------ generate: checked before loading
def _generate(tmp_path, *extra, out=None, checkpoint_dir=None):
    return ["generate", "wan2_1", "--checkpoint-dir", str(checkpoint_dir or tmp_path / "missing"),
            "--prompt", "p", "--out", str(out or tmp_path / "a.mp4"), *extra]


@pytest.mark.parametrize("spec,message", [
    ("dp=1,dp=1", "the axis dp is named twice"),
    ("dp=1,pp=1", "unknown axis pp"),
    ("dp=0", "a size must be a positive number"),
    ("dp=1024", "1024 devices"),
])
def test_generate_refuses_a_bad_mesh_before_reading_the_folder(tmp_path, capsys, spec, message):
    """`--mesh dp=1,dp=1` was accepted silently. The folder does not exist: the mesh's error
    comes first, so nothing was read."""
    assert cli.main(_generate(tmp_path, "--mesh", spec)) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: mesh spec") and message in err, err


@pytest.mark.parametrize("typed,canonical", [("bfloat16", "bf16"), ("BF16", "bf16"),
                                             ("float32", "fp32"), ("fp32", "fp32")])
def test_precision_spellings(typed, canonical):
    args = cli.build_parser().parse_args(["generate", "wan2_1", "--checkpoint-dir", "x",
                                          "--prompt", "p", "--out", "a.mp4", "--precision",
                                          typed])
    assert args.precision == canonical


@pytest.mark.parametrize("typed,hint", [("fp16", "fp16 is a dtype, but not one --precision "
                                                 "takes"),
                                        ("bf17", "did you mean 'bf16'?")])
def test_precision_refused_before_loading(tmp_path, capsys, monkeypatch, typed, hint):
    monkeypatch.setattr(cli, "cmd_generate", lambda args: pytest.fail("ran generate"))
    assert cli.main(_generate(tmp_path, "--precision", typed)) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert hint in err and "accepted: bf16 / bfloat16; fp32 / f32 / float32 / float" in err


@pytest.mark.parametrize("typed,canonical", [("bf16", "bf16"), ("bfloat16", "bf16"),
                                             ("float16", "fp16"), ("torch.float32", "fp32")])
def test_convert_dtype_spellings(typed, canonical):
    args = cli.build_parser().parse_args(["convert", "wan2_1", "--component", "dit",
                                          "--checkpoint", "x", "--out", "y", "--dtype", typed])
    assert args.dtype == canonical


def test_convert_dtype_refused_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(cli, "cmd_convert", lambda args: pytest.fail("ran convert"))
    assert cli.main(["convert", "wan2_1", "--component", "dit", "--checkpoint", "x", "--out",
                     str(tmp_path / "y"), "--dtype", "float33"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "--dtype 'float33' is not one vidax accepts" in err and "bf16 / bfloat16" in err


def _out_cases(tmp_path):
    cases = {"a folder": tmp_path / "video.mp4", "below a file": tmp_path / "file" / "a.mp4",
             "a missing folder": tmp_path / "nowhere" / "a.mp4",
             "a name too long": tmp_path / ("a" * 300 + ".mp4")}
    (tmp_path / "video.mp4").mkdir()
    (tmp_path / "file").write_text("mine")
    if Path("/sys/kernel").is_dir():
        cases["a folder nobody writes to"] = Path("/sys/vidax-test.mp4")
    return cases


def test_unwritable_out_refused_before_loading(tmp_path, capsys):
    """An unwritable or impossible --out was an internal error after every model loaded."""
    for what, out in _out_cases(tmp_path).items():
        before = sorted(p.name for p in tmp_path.iterdir())
        assert cli.main(_generate(tmp_path, out=out)) == 1, what
        err = " ".join(capsys.readouterr().err.split())
        assert err.startswith(f"error: --out {out}"), (what, err)
        assert "no such folder" not in err  # the release folder was not even looked at
        assert sorted(p.name for p in tmp_path.iterdir()) == before  # no probe left behind


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes in a read-only folder")
def test_read_only_folder_refused(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert cli.main(_generate(tmp_path, out=folder / "a.mp4")) == 1
        assert "cannot write there" in capsys.readouterr().err
    finally:
        folder.chmod(0o700)


class _Loaded(Exception):
    pass


def _fake_family(calls, *, fits=True, options=None):
    options = {} if options is None else options

    class Pipeline:
        @classmethod
        def check_memory(cls, release, request, *, mesh=None, precision="bf16", enforce=True,
                         quantized=None, offload=None, max_device_memory=None, quantize=None):
            calls.append(("check_memory", release, request, mesh, precision))
            options.update(offload=offload, max_device_memory=max_device_memory,
                           quantize=quantize)
            if enforce and not fits:
                raise VidaxError("the request needs 99 GiB; the device has 16 GiB")
            return types.SimpleNamespace(offload="block" if offload == "auto" else offload)

        @classmethod
        def from_release(cls, release, **kwargs):
            calls.append(("from_release",))
            options.update(loaded=kwargs)
            raise _Loaded

    return types.SimpleNamespace(
        Pipeline=Pipeline,
        inspect_folder=lambda folder, variant=None: types.SimpleNamespace(
            task="t2v", variant="t2v-1.3b"),
        make_request=lambda *args, **kwargs: "request")


@pytest.mark.parametrize("fits", [True, False])
def test_memory_check_before_loading(tmp_path, capsys, monkeypatch, fits):
    from vidax import pipelines

    calls = []
    monkeypatch.setattr(pipelines, "family", lambda model_type: _fake_family(calls, fits=fits))
    argv = _generate(tmp_path, "--precision", "float32")
    if fits:
        with pytest.raises(_Loaded):
            cli.main([*argv, "--debug"])
        assert [c[0] for c in calls] == ["check_memory", "from_release"]
        assert calls[0][2:] == ("request", None, "fp32")
    else:
        assert cli.main(argv) == 1
        assert "needs 99 GiB" in capsys.readouterr().err
        assert [c[0] for c in calls] == ["check_memory"]  # nothing loaded
    calls.clear()
    with pytest.raises(_Loaded):   # the request is still checked; an unfit one is not refused
        cli.main([*argv, "--skip-memory-check", "--debug"])
    assert [c[0] for c in calls] == ["check_memory", "from_release"]


def test_offload_quantize_and_budget_reach_the_plan_and_the_load(tmp_path, capsys,
                                                                  monkeypatch):
    """``--offload`` (default auto), ``--max-device-memory`` and ``--quantize`` go to the
    memory plan; the load takes the mode the plan chose (auto: the fake's "block"), said in
    one line; a malformed size is one error before anything loads."""
    from vidax import pipelines

    calls, seen = [], {}
    monkeypatch.setattr(pipelines, "family",
                        lambda model_type: _fake_family(calls, options=seen))
    argv = _generate(tmp_path)
    with pytest.raises(_Loaded):
        cli.main([*argv, "--max-device-memory", "24GiB", "--quantize", "fp8", "--debug"])
    assert seen["offload"] == "auto" and seen["max_device_memory"] == 24 * 2**30
    assert seen["quantize"] == "fp8"
    loaded = seen["loaded"]
    assert (loaded["offload"], loaded["max_device_memory"], loaded["quantize"]) == (
        "block", 24 * 2**30, "fp8")
    assert "offload: block" in capsys.readouterr().out
    with pytest.raises(_Loaded):
        cli.main([*argv, "--offload", "model", "--debug"])
    assert seen["loaded"]["offload"] == "model" and seen["loaded"]["quantize"] is None
    calls.clear()
    assert cli.main([*argv, "--max-device-memory", "lots"]) == 1
    assert "max_device_memory 'lots'" in capsys.readouterr().err and calls == []



def test_true_cfg_scale_refused_where_not_taken(tmp_path, capsys, monkeypatch):
    """``--true-cfg-scale`` reaches only a make_request that takes ``true_cfg_scale``
    (HunyuanVideo 1.0); elsewhere one error, before anything loads."""
    from vidax import pipelines

    calls = []
    monkeypatch.setattr(pipelines, "family", lambda model_type: _fake_family(calls))
    assert cli.main(_generate(tmp_path, "--true-cfg-scale", "3")) == 1
    assert "--true-cfg-scale: wan2_1 has no true CFG" in capsys.readouterr().err
    assert calls == []


# ---------------------------------------------------------------------------------- demo
@pytest.mark.parametrize("argv,model_type", [(["demo"], "wan2_1"),
                                             (["demo", "ltx_video"], "ltx_video")])
def test_demo_takes_a_model_type(monkeypatch, tmp_path, argv, model_type):
    import vidax.demo

    seen = {}
    monkeypatch.setattr(vidax.demo, "run", lambda *a, **k: seen.update(args=a, kwargs=k))
    assert cli.main([*argv, "--cache-dir", str(tmp_path)]) == 0
    assert seen["args"] == (model_type,)
    assert seen["kwargs"]["cache_dir"] == str(tmp_path) and seen["kwargs"]["out"] is None


def test_demo_choices_are_the_pipelines():
    parser = cli.build_parser()
    for model_type in PIPELINES:
        assert parser.parse_args(["demo", model_type]).model_type == model_type


def test_command_line_mistakes_are_one_paragraph(capsys):
    assert cli.main(["generate", "wan2_1", "--frames", "many"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: vidax generate: ") and "usage:" not in err
    assert cli.main(["--help"]) == 0


@pytest.mark.parametrize("argv,hint", [
    (["convert", "wan21", "--component", "dit"], "did you mean 'wan2_1'?"),
    (["verify", "wan2_1", "--component", "dit", "--variant", "t2v-1.3B"],
     "did you mean 't2v-1.3b'?"),
    (["verify", "wan2_1", "--component", "dit", "--variant", "t2v-1.3b", "--layout",
      "difusers"], "did you mean 'diffusers'?"),
])
def test_misspelt_names_in_verify_and_convert(tmp_path, capsys, argv, hint):
    path = tmp_path / "x.safetensors"
    safetensors.numpy.save_file({"a": np.zeros(2, np.float32)}, path)
    extra = ["--out", str(tmp_path / "out")] if argv[0] == "convert" else []
    assert cli.main([*argv, "--checkpoint", str(path), *extra]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: ") and hint in err, err
    assert not (tmp_path / "out").exists()
