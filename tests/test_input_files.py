"""The small inputs vidax reads whole -- a noise array, an image, a config.json, tokenizer files,
a converted folder's marker -- are read only from regular files: a named pipe there (issue #11:
one hung `vidax inspect`) is refused at once with the path named, instead of blocking the read
until a writer appears."""

import json
import os
import signal

import numpy as np
import pytest

from vidax.errors import VidaxError


@pytest.fixture(autouse=True)
def no_hang():
    """A read that blocks on a pipe fails the test after 30 s instead of hanging the run."""
    def hung(*_):
        raise TimeoutError("a read blocked on a named pipe")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def fifo(tmp_path):
    def make(name):
        path = tmp_path / name
        os.mkfifo(path)
        return path

    return make


def _refused(call, path, what):
    with pytest.raises(VidaxError) as e:
        call()
    message = str(e.value)
    assert str(path) in message and what in message and "named pipe" in message, message


def test_pipeline_inputs_refuse_a_pipe(fifo):
    from vidax.pipelines import inputs

    noise = fifo("noise.npy")
    _refused(lambda: inputs.read_noise(noise), noise, "noise file")
    image = fifo("first.png")
    _refused(lambda: inputs.load_image(image), image, "image file")
    config = fifo("config.json")
    _refused(lambda: inputs.read_json_config(config), config, "config file")


def test_a_pipe_named_config_json_is_not_read_by_the_recogniser(tmp_path):
    """`recognise` reads a diffusers `transformer/config.json` to tell a release apart: a pipe
    there makes the folder no one's, without blocking."""
    from vidax.pipelines import inputs

    (tmp_path / "transformer").mkdir()
    os.mkfifo(tmp_path / "transformer" / "config.json")
    assert inputs.recognise(tmp_path) == []


def test_tokenizer_files_refuse_a_pipe(fifo):
    from vidax import text

    spiece = fifo("spiece.model")
    _refused(lambda: text.read_sentencepiece(spiece), spiece, "SentencePiece model")
    config = fifo("tokenizer_config.json")
    _refused(lambda: text._read_json(config), config, "JSON file")


def test_a_converted_marker_must_be_a_small_regular_file(tmp_path):
    from vidax.translator.io import converted

    folder = tmp_path / "cache"
    folder.mkdir()
    os.mkfifo(folder / converted.MARKER)
    with pytest.raises(VidaxError, match="named pipe"):
        converted.read_info(folder)
    os.unlink(folder / converted.MARKER)
    (folder / converted.MARKER).write_text(
        json.dumps({"format_version": 1, "pad": "x" * (converted.MARKER_LIMIT + 1)}))
    with pytest.raises(VidaxError, match="larger than"):
        converted.read_info(folder)


def test_regular_files_still_read(tmp_path):
    from vidax.pipelines import inputs

    np.save(tmp_path / "noise.npy", np.zeros((2, 3), np.float32))
    assert inputs.read_noise(tmp_path / "noise.npy").shape == (2, 3)
    os.symlink(tmp_path / "noise.npy", tmp_path / "link.npy")   # links are followed
    assert inputs.read_noise(tmp_path / "link.npy").shape == (2, 3)
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert inputs.read_json_config(tmp_path / "config.json") == {"a": 1}
    with pytest.raises(VidaxError, match="no such noise file"):
        inputs.read_noise(tmp_path / "missing.npy")
