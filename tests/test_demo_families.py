"""``vidax demo`` for CogVideoX, Cosmos-Predict2.5 and HunyuanVideo: each writes a tiny release
in its authors' layout (their file names, containers, key names and config files), runs the
real ``vidax generate`` on it, and prints a command that writes the same mp4 again, byte for
byte; ``vidax verify`` accepts every weight file the demo writes.

The fast tests only write the folders (under a second each) and check them: the files and
their dtypes, that ``vidax verify`` matches each weight file 1:1 from the CLI and ``vidax
convert`` converts it (the converted folder loads), that a second write gives the same
files. The slow ones check that the tokenizer folders are read by transformers /
sentencepiece exactly as vidax reads them (CogVideoX's ``spiece.model`` is written without
sentencepiece; Cosmos' chat template must render the turns vidax renders itself), and run
the demo (20-30 s each on two CPU cores) and its printed command, in process and, once, in a
fresh process.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import shlex  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from vidax import cli, demo  # noqa: E402
from vidax.video import read_video  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

FAMILIES = ("cogvideox", "cosmos2_5", "hunyuan_video")
#: The files of each release (the authors' names), beside the weights COMPONENTS lists.
FILES = {
    "cogvideox": ("model_index.json", "scheduler/scheduler_config.json",
                  "transformer/config.json", "transformer/diffusion_pytorch_model.safetensors",
                  "vae/config.json", "vae/diffusion_pytorch_model.safetensors",
                  "text_encoder/config.json", "text_encoder/model.safetensors",
                  "tokenizer/spiece.model", "tokenizer/tokenizer_config.json",
                  "tokenizer/special_tokens_map.json", "tokenizer/added_tokens.json"),
    "cosmos2_5": ("model_index.json", "scheduler/scheduler_config.json",
                  "transformer/config.json", "transformer/diffusion_pytorch_model.safetensors",
                  "vae/config.json", "vae/diffusion_pytorch_model.safetensors",
                  "text_encoder/config.json", "text_encoder/model.safetensors",
                  "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
                  "tokenizer/special_tokens_map.json", "tokenizer/vocab.json",
                  "tokenizer/merges.txt"),
    "hunyuan_video": ("hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt",
                      "hunyuan-video-t2v-720p/transformers/config.json",
                      "hunyuan-video-t2v-720p/vae/pytorch_model.pt",
                      "hunyuan-video-t2v-720p/vae/config.json",
                      "text_encoder/config.json", "text_encoder/model.safetensors",
                      "text_encoder/tokenizer.json", "text_encoder/tokenizer_config.json",
                      "text_encoder_2/config.json", "text_encoder_2/model.safetensors",
                      "text_encoder_2/tokenizer.json", "text_encoder_2/tokenizer_config.json"),
}
#: The release's dtype of each weight file (vidax/data/manifests).
DTYPES = {"cogvideox": {"transformer/diffusion_pytorch_model.safetensors": "float16",
                        "vae/diffusion_pytorch_model.safetensors": "float16",
                        "text_encoder/model.safetensors": "float16"},
          "cosmos2_5": {"transformer/diffusion_pytorch_model.safetensors": "bfloat16",
                        "vae/diffusion_pytorch_model.safetensors": "float32",
                        "text_encoder/model.safetensors": "bfloat16"},
          "hunyuan_video": {"hunyuan-video-t2v-720p/transformers/mp_rank_00_model_states.pt":
                            "bfloat16",
                            "hunyuan-video-t2v-720p/vae/pytorch_model.pt": "float32",
                            "text_encoder/model.safetensors": "float16",
                            "text_encoder_2/model.safetensors": "float32"}}


def _option(module, name: str) -> str:
    return module.GENERATE[module.GENERATE.index(name) + 1]


@pytest.fixture(scope="module", params=FAMILIES)
def written(request, tmp_path_factory):
    """(model type, its demo module, the folder ``write`` filled)."""
    module = demo.family(request.param)
    folder = tmp_path_factory.mktemp(request.param) / module.FOLDER
    module.write(folder)
    return request.param, module, folder


def test_writes_the_authors_files(written):
    from vidax.translator.io import open_checkpoint

    model_type, module, folder = written
    for name in FILES[model_type]:
        assert (folder / name).is_file(), name
    for path, dtype in DTYPES[model_type].items():
        with open_checkpoint(folder / path) as ckpt:
            assert {str(t.dtype) for t in ckpt.values()} == {dtype}, path
    # each config.json is the one recorded with the layout (the text encoders' token ids
    # included: the demo's tokenizers give them), what vidax.demo.layouts identifies files by
    import json

    from vidax.demo import common

    for key, entry in common.tiny_layout(model_type).items():
        config = json.loads(((folder / entry["file"]).parent / "config.json").read_text())
        assert config == entry["config"], key
    if model_type == "hunyuan_video":   # the DiT file is {"module": state_dict}
        import zipfile

        with zipfile.ZipFile(folder / module.COMPONENTS[0][1]) as z:
            pickle = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
        assert b"module" in pickle


def test_every_weight_file_verifies_from_the_cli(written, capsys):
    """``vidax verify MODEL_TYPE --component C --checkpoint FILE`` for each file, no variant:
    the family's own components and the encoders registered under their own model type."""
    model_type, module, folder = written
    checks = [(model_type, c, f) for c, f in module.COMPONENTS] + list(module.ENCODERS)
    assert len(checks) == len(DTYPES[model_type])
    for mt, component, file in checks:
        rc = cli.main(["verify", mt, "--component", component, "--checkpoint",
                       str(folder / file)])
        out = " ".join(capsys.readouterr().out.split())
        assert rc == 0, (mt, component, out)
        matched = out.split("matched ")[1].split(" tensors")[0]
        n, total = matched.split("/")
        assert n == total, out
    for component, file in module.COMPONENTS:   # --variant tiny: the demo's config for its file
        rc = cli.main(["verify", model_type, "--component", component, "--variant", "tiny",
                       "--checkpoint", str(folder / file)])
        assert rc == 0, (component, capsys.readouterr().out)


def _contents(path) -> dict[str, bytes] | bytes:
    """A file's bytes; a ``torch.save`` zip's records but the random serialization id torch
    (and vidax's writer, as torch) puts in every file."""
    import zipfile

    if path.suffix not in (".pt", ".pth"):
        return path.read_bytes()
    with zipfile.ZipFile(path) as z:
        return {n: z.read(n) for n in z.namelist() if not n.endswith("serialization_id")}


def test_writing_is_deterministic(written, tmp_path):
    """A second write gives the same files, byte for byte (a demo rerun does not change the
    release; the printed command relies on it only within one folder)."""
    model_type, module, folder = written
    again = tmp_path / module.FOLDER
    module.write(again)
    names = sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file()
                   and p.suffix != ".mp4")
    assert names == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for name in names:
        assert _contents(folder / name) == _contents(again / name), name


@pytest.mark.slow   # transformers' import alone is 4-5 s
def test_tokenizers_read_as_transformers_reads_them(written):
    """Each tokenizer folder gives the ids transformers' (and, for ``spiece.model``,
    sentencepiece's) own loaders give, for the texts each pipeline encodes."""
    from transformers import AutoTokenizer

    from vidax import text

    model_type, module, folder = written
    prompt = _option(module, "--prompt")
    if model_type == "cogvideox":
        import sentencepiece as spm

        from vidax.pipelines import cogvideox as cog

        seq_len = cog.inspect_folder(folder).configs["dit"].max_text_seq_length
        ours = text.load_tokenizer(folder / "tokenizer", seq_len=seq_len, clean=None)([prompt])
        theirs = AutoTokenizer.from_pretrained(folder / "tokenizer")(
            prompt, max_length=seq_len, padding="max_length", truncation=True)["input_ids"]
        np.testing.assert_array_equal(ours.ids[0], theirs)
        processor = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer" /
                                                              "spiece.model"))
        n = int(ours.mask[0].sum())
        assert processor.encode(prompt) + [processor.eos_id()] == list(ours.ids[0][:n])
        assert ours.dropped == (0,) and processor.unk_id() not in theirs
    elif model_type == "cosmos2_5":
        from vidax.pipelines import cosmos2_5 as cp

        reference = AutoTokenizer.from_pretrained(folder / "tokenizer")
        ours = cp.chat_tokenizer(folder / "tokenizer")(
            [cp.chat_text(p) for p in (prompt, cp.NEGATIVE_PROMPT)])
        for row, p in enumerate((prompt, cp.NEGATIVE_PROMPT)):
            messages = [{"role": "system", "content": [{"type": "text",
                                                        "text": cp.SYSTEM_PROMPT}]},
                        {"role": "user", "content": [{"type": "text", "text": p}]}]
            ids = reference.apply_chat_template(
                messages, tokenize=True, add_generation_prompt=False, max_length=cp.TEXT_LEN,
                truncation=True, padding="max_length")
            ids = ids["input_ids"] if not isinstance(ids, list) else ids
            np.testing.assert_array_equal(ours.ids[row], ids)
        assert ours.dropped == (0, 0)   # the default negative prompt fits in 512 tokens
    else:
        from vidax.pipelines import hunyuan_video as hv

        llama = AutoTokenizer.from_pretrained(folder / "text_encoder")
        clip = AutoTokenizer.from_pretrained(folder / "text_encoder_2")
        ours = text.Tokenizer(folder / "text_encoder", seq_len=hv.TEXT_LEN + hv.CROP_START,
                              clean=None, special="file")([hv.PROMPT_TEMPLATE.format(prompt)])
        ref = llama(hv.PROMPT_TEMPLATE.format(prompt), max_length=hv.TEXT_LEN + hv.CROP_START,
                    padding="max_length", truncation=True)
        np.testing.assert_array_equal(ours.ids[0], ref["input_ids"])
        np.testing.assert_array_equal(ours.mask[0], ref["attention_mask"])
        assert ref["input_ids"][0] == llama.bos_token_id
        # the folder's chat template: Llama-3's turns
        assert llama.apply_chat_template([{"role": "user", "content": " a boat "}],
                                         tokenize=False, add_generation_prompt=True) == (
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\na boat<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n")
        ours_2 = text.Tokenizer(folder / "text_encoder_2", seq_len=hv.CLIP_LEN, clean=None,
                                special="file", pad_token="<|endoftext|>")([prompt])
        ref_2 = clip(prompt, max_length=hv.CLIP_LEN, padding="max_length", truncation=True)
        np.testing.assert_array_equal(ours_2.ids[0], ref_2["input_ids"])
        # CLIP pools at its end-of-text token: the config names the tokenizer's
        import json

        config = json.loads((folder / "text_encoder_2" / "config.json").read_text())
        assert config["text_config"]["eos_token_id"] == clip.eos_token_id


@pytest.fixture(scope="module", params=FAMILIES)
def ran(request, tmp_path_factory):
    """The demo run: (model type, module, folder, video, its bytes, printed output)."""
    model_type = request.param
    module = demo.family(model_type)
    root = tmp_path_factory.mktemp(f"run_{model_type}")
    from io import StringIO

    from rich.console import Console

    buffer = StringIO()
    video = demo.run(model_type, out=str(root / "demo.mp4"), cache_dir=str(root / "cache"),
                     console=Console(file=buffer, width=80, highlight=False))
    return model_type, module, root / "cache" / module.FOLDER, video, video.read_bytes(), \
        buffer.getvalue()


@pytest.mark.slow
def test_demo_writes_a_playable_video(ran):
    model_type, module, folder, video, _, printed = ran
    for name in FILES[model_type]:
        assert (folder / name).is_file(), name
    frames, fps = read_video(video)
    width, height = map(int, _option(module, "--size").split("x"))
    assert frames.shape == (int(_option(module, "--frames")), height, width, 3)
    assert frames.dtype == np.uint8 and fps == float(_option(module, "--fps"))
    assert frames.std() > 1                                   # not a blank video
    assert np.abs(np.diff(frames.astype(np.int16), axis=0)).max() > 0   # frames differ
    assert str(video) in printed


@pytest.mark.slow
def test_printed_command_reproduces_the_video(ran, capsys):
    """The ``running: vidax generate ...`` line, run again through the CLI, writes the same
    mp4 byte for byte."""
    model_type, _, folder, video, first, printed = ran
    line = next(ln for ln in printed.splitlines() if ln.startswith("running: "))
    argv = shlex.split(line[len("running: "):])
    assert argv[:3] == ["vidax", "generate", model_type]
    assert argv[argv.index("--checkpoint-dir") + 1] == str(folder)
    for option in ("--prompt", "--frames", "--size", "--steps", "--seed", "--fps"):
        assert option in argv, option
    video.unlink()
    assert cli.main(argv[1:]) == 0
    capsys.readouterr()
    assert video.read_bytes() == first


@pytest.mark.slow
@pytest.mark.parametrize("ran", ["hunyuan_video"], indirect=True)
def test_printed_command_reproduces_the_video_in_a_new_process(ran, tmp_path):
    """The printed command in a fresh ``python -m vidax.cli`` process (nothing cached from the
    demo's own run) writes the same bytes, for the family whose DiT is a ``torch.save`` file
    (the other two: in-process above)."""
    import subprocess
    import sys

    _, _, _, _, first, printed = ran
    line = next(ln for ln in printed.splitlines() if ln.startswith("running: "))
    argv = shlex.split(line[len("running: "):])
    out = tmp_path / "again.mp4"
    argv[argv.index("--out") + 1] = str(out)
    proc = subprocess.run([sys.executable, "-m", "vidax.cli", *argv[1:]], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_bytes() == first


def test_every_weight_file_converts_from_the_cli(written, tmp_path, capsys):
    """``vidax convert`` with the registry spec each file was recorded under (its layout
    named: vidax convert's default layout is the authors' own), then ``vidax.load`` of the
    converted folder."""
    import vidax
    from vidax import registry
    from vidax.demo import common

    model_type, module, folder = written
    layout = common.tiny_layout(model_type)
    assert {e["file"] for e in layout.values()} == {f for *_, f in (*module.COMPONENTS,
                                                                     *module.ENCODERS)}
    for key, entry in sorted(layout.items()):
        mt, component, file_layout = entry["spec"]
        out = tmp_path / key
        rc = cli.main(["convert", mt, "--component", component, "--layout", file_layout,
                       "--checkpoint", str(folder / entry["file"]), "--out", str(out)])
        printed = " ".join(capsys.readouterr().out.split())
        assert rc == 0, (key, printed)
        assert f"{mt} {component} in the Flax layout (matched" in printed
        # the converted folder holds its config; its layout is named (vidax.load does not
        # read it from the folder where the component has several: t5 encoder)
        model = vidax.load(mt, component, out, layout=file_layout)
        assert type(model).__name__ == registry.get(mt, component, file_layout).model.split(
            ":")[1]


def test_writing_needs_no_torch(tmp_path):
    """The demo runs in the runtime environment (requirements/runtime.lock: no torch,
    diffusers or transformers): the three writers, with those imports made to fail."""
    import subprocess
    import sys

    code = ("import sys\n"
            "for name in ('torch', 'diffusers', 'transformers', 'sentencepiece'):\n"
            "    sys.modules[name] = None\n"
            "from pathlib import Path\n"
            "from vidax import demo\n"
            f"for name in {FAMILIES!r}:\n"
            f"    demo.family(name).write(Path({str(tmp_path)!r}) / name)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in FAMILIES:
        assert all((tmp_path / name / f).is_file() for f in FILES[name]), name
