"""The Wan2.1 pipeline on a mesh (8 simulated CPU devices) samples what one device samples,
and `vidax generate --mesh` runs. The release is the demo's tiny one (authors' layout).

Bound: float32 "highest", max |mesh - single| <= 1e-4 x std(single): a mesh only reorders
float32 sums (all-reduces, all-to-alls), so the two agree to round-off."""

import numpy as np
import pytest

import vidax
from vidax import cli, sharding
from vidax.demo import wan2_1 as demo
from vidax.video import read_video

OPTIONS = dict(frames=9, size=(64, 48), steps=3, seed=0)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_wan2_1")
    demo.write(folder)
    return folder


@pytest.fixture(scope="module")
def single(release):
    return vidax.pipeline("wan2_1", release, precision="fp32").sample(demo.PROMPT, **OPTIONS)


# sp x fsdp in the fast lane; the other meshes, and the CLI run, in CI (``-m slow``).
@pytest.mark.parametrize("spec", [pytest.param("dp=2,fsdp=4", marks=pytest.mark.slow),
                                  "sp=4,fsdp=2",
                                  pytest.param("tp=2,fsdp=4", marks=pytest.mark.slow)])
def test_sampling_on_a_mesh_matches_one_device(release, single, spec):
    mesh = sharding.make_mesh(spec)
    latents = vidax.pipeline("wan2_1", release, mesh=mesh, precision="fp32").sample(
        demo.PROMPT, **OPTIONS)
    diff = float(np.abs(latents - single).max())
    print(f"{spec}: max abs diff {diff:.3e}, std {single.std():.3f}")
    assert diff <= 1e-4 * single.std()


@pytest.mark.slow
def test_generate_with_mesh_writes_the_video(release, tmp_path):
    out = tmp_path / "mesh.mp4"
    rc = cli.main(["generate", "wan2_1", "--checkpoint-dir", str(release), "--prompt",
                   demo.PROMPT, "--frames", "9", "--size", "64x48", "--steps", "2",
                   "--mesh", "dp=2,fsdp=4", "--out", str(out)])
    assert rc == 0
    frames, _ = read_video(out)
    assert frames.shape == (9, 48, 64, 3)
