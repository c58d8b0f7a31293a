"""vidax's CLIP vision tower (Wan2.1 I2V/FLF2V image encoder) against the authors' code.

Oracle (DESIGN.md §6): the authors' whole ``XLMRobertaCLIP`` (``wan/modules/clip.py``, here
``wan.modules.animate.clip`` of the wan22 package via ``tests/reference/wan22.clip_module``),
built by their factory ``clip_xlm_roberta_vit_h_14`` at a tiny config -- visual *and* textual
towers, so the file really holds ``textual.*`` and ``log_scale`` for the mapper to ignore --
with random values in every tensor, saved with ``torch.save(model.state_dict())`` under the
release's file name, loaded with ``vidax.load("wan2_1", "image_encoder", ...)``.

Checked: the token features Wan uses (``visual(x, use_31_block=True)`` = vidax
``num_blocks=-1``) and the full-depth output (``use_31_block=False`` = ``num_blocks=None``);
the authors' ``CLIPModel.visual`` end to end (their bicubic resize + normalisation + tower,
two images of different sizes as FLF2V passes them) against :func:`vidax.models.clip.preprocess`
+ the model; the preprocessing alone at the real 224 px from a 480 x 832 frame (downscale),
a small image (upscale) and uint8 input. Bound: float32, matmul precision "highest",
max |vidax - reference| <= 1e-4 x std(reference). Negative control: the q and k thirds of one
block's fused ``to_qkv`` exchanged in the saved file must fail that bound.
"""

from __future__ import annotations

import functools
import time
import types

import jax
import numpy as np
import pytest
from flax import nnx

import vidax
from tests.parity import AbstractModel, assert_fails, assert_parity
from vidax import manifests
from vidax.errors import VidaxError
from vidax.loading import verify_manifest, verify_tensors
from vidax.models.clip.model import CLIPVisionConfig, CLIPVisionTransformer, preprocess
from vidax.registry import get as get_spec
from vidax.translator.io import open_checkpoint

from tests.reference import wan22

jax.config.update("jax_default_matmul_precision", "highest")
# CLIPModel.visual wraps the tower in torch.cuda.amp.autocast, which warns on a CPU build
# (deprecated API; CUDA unavailable, so it is disabled: float32 throughout).
pytestmark = [pytest.mark.filterwarnings("ignore:.*autocast.*:FutureWarning"),
              pytest.mark.filterwarnings("ignore:.*CUDA is not available.*:UserWarning")]
FILE_NAME = "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"
# The text tower at a tiny size: present in the file so the mapper must ignore it.
TINY_TEXT = dict(embed_dim=16, vocab_size=50, max_text_len=16, text_dim=32, text_heads=2,
                 text_layers=1)
IMAGE_ENCODER_MANIFESTS = ("wan2_1/i2v-14b__image_encoder", "wan2_1/flf2v-14b__image_encoder")


def _authors_kwargs(cfg: CLIPVisionConfig) -> dict:
    """``clip_xlm_roberta_vit_h_14`` overrides for a vidax config (XLMRobertaCLIP's names)."""
    return dict(image_size=cfg.image_size, patch_size=cfg.patch_size, vision_dim=cfg.dim,
                vision_mlp_ratio=cfg.mlp_ratio, vision_heads=cfg.num_heads,
                vision_layers=cfg.num_layers, vision_pool=cfg.pool_type,
                vision_pre_norm=cfg.pre_norm, activation=cfg.activation,
                norm_eps=cfg.norm_eps, **TINY_TEXT)


def _randomize(model, seed: int) -> None:
    """Random values in every tensor (norm scales and biases too), activations O(1)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith(("cls_embedding", "pos_embedding", "log_scale")):
                p.copy_(0.5 * noise)
            elif p.ndim >= 2:  # Linear / Conv / embedding tables
                p.copy_(noise / p[0].numel() ** 0.5)
            elif name.endswith("weight"):  # LayerNorm scales
                p.copy_(1 + 0.2 * noise)
            else:  # biases
                p.copy_(0.1 * noise)


@functools.partial(nnx.jit, static_argnames="num_blocks")
def _run(model, pixels, num_blocks):
    return model(pixels, num_blocks=num_blocks)


def _authors_clip_model(model, transforms) -> object:
    """The authors' ``CLIPModel`` around an already built model, without its checkpoint
    load and tokenizer (``visual`` uses neither): ``model``, ``transforms``, ``dtype``."""
    import torch

    clip = wan22.clip_module()
    wrapper = object.__new__(clip.CLIPModel)
    wrapper.model, wrapper.transforms, wrapper.dtype = model, transforms, torch.float32
    return wrapper


# ----------------------------------------------------------------------------- the oracle
@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """The tiny authors' XLMRobertaCLIP, its file in the release layout, vidax's load."""
    import torch

    cfg = CLIPVisionConfig.tiny()
    clip = wan22.clip_module()
    model, transforms = clip.clip_xlm_roberta_vit_h_14(return_transforms=True,
                                                        **_authors_kwargs(cfg))
    model = model.eval()
    _randomize(model, seed=0)
    path = tmp_path_factory.mktemp("wan2_1_clip") / FILE_NAME
    state = model.state_dict()
    torch.save(state, path)
    loaded = vidax.load("wan2_1", "image_encoder", path, config=cfg)
    return types.SimpleNamespace(cfg=cfg, model=model, transforms=transforms, path=path,
                                 state=state, vidax=loaded)


@pytest.fixture(scope="module")
def pixels(case):
    """Normalised images, channels-last (vidax) and channels-first (the authors)."""
    import torch

    x = np.random.default_rng(1).standard_normal(
        (2, case.cfg.image_size, case.cfg.image_size, 3)).astype(np.float32)
    return x, torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()


# Wan's call (31 blocks) in the fast lane; the full depth in CI (``-m slow``).
@pytest.mark.parametrize("num_blocks,use_31_block",
                         [(-1, True), pytest.param(None, False, marks=pytest.mark.slow)],
                         ids=["use_31_block", "full_depth"])
def test_tokens_match_authors(case, pixels, num_blocks, use_31_block, record_property):
    import torch

    x, x_torch = pixels
    with torch.no_grad():
        ref = case.model.visual(x_torch, use_31_block=use_31_block).numpy()
    assert ref.shape == (2, case.cfg.num_tokens, case.cfg.dim)
    out = _run(case.vidax, x, num_blocks)
    assert_parity(f"tokens_{'31' if use_31_block else 'all'}", out, ref, record_property)


def test_negative_control_swapped_q_k(case, pixels, tmp_path, record_property):
    """Block 1's q and k thirds of ``to_qkv`` (weight and bias) exchanged must fail."""
    import torch

    x, x_torch = pixels
    d = case.cfg.dim
    bad = {k: v.clone() for k, v in case.state.items()}
    for leaf in ("weight", "bias"):
        key = f"visual.transformer.1.attn.to_qkv.{leaf}"
        q, k = case.state[key][:d], case.state[key][d:2 * d]
        bad[key][:d], bad[key][d:2 * d] = k, q
    path = tmp_path / FILE_NAME
    torch.save(bad, path)
    with torch.no_grad():
        ref = case.model.visual(x_torch, use_31_block=True).numpy()
    out = _run(vidax.load("wan2_1", "image_encoder", path, config=case.cfg), x, -1)
    assert_fails("negative_swapped_q_k", out, ref, record_property)


def test_file_plan_ignores_exactly_the_unused_tensors(case):
    """Every textual tensor and log_scale, and the visual post_norm/head, are ignored with
    their reasons; everything else of the visual tower is mapped."""
    spec = get_spec("wan2_1", "image_encoder")
    with open_checkpoint(case.path) as ckpt:
        report, plan, _ = verify_tensors(spec, case.cfg, ckpt, source=str(case.path))
        keys = set(ckpt)
    assert report.ok, str(report)
    textual = {k for k in keys if k.startswith("textual.")}
    unused_visual = {"visual.head", "visual.post_norm.weight", "visual.post_norm.bias"}
    assert len(textual) > 10
    assert set(plan.ignored) == textual | {"log_scale"} | unused_visual
    assert all("Wan uses only the visual features" in plan.ignored[k]
               for k in textual | {"log_scale"})
    assert all("never applies" in plan.ignored[k] for k in unused_visual)
    assert plan.consumed == keys - set(plan.ignored)


# ----------------------------------------------------------------------------- preprocessing
def test_authors_clip_visual_end_to_end(case, record_property):
    """``CLIPModel.visual`` (their resize + normalise + 31 blocks) on two images of
    different sizes, FLF2V's call, against ``preprocess`` + ``num_blocks=-1``."""
    import torch

    rng = np.random.default_rng(2)
    images = [rng.uniform(-1, 1, (37, 53, 3)).astype(np.float32),   # shrunk to 28
              rng.uniform(-1, 1, (20, 15, 3)).astype(np.float32)]   # enlarged to 28
    with torch.no_grad():
        ref = _authors_clip_model(case.model, case.transforms).visual(
            [torch.from_numpy(u).permute(2, 0, 1)[:, None] for u in images]).numpy()
    out = _run(case.vidax, preprocess(images, size=case.cfg.image_size), -1)
    assert_parity("clip_visual_end_to_end", out, ref, record_property)


def _authors_preprocessing(images_chw: list, transforms) -> np.ndarray:
    """Only the preprocessing of ``CLIPModel.visual`` at the release's 224 px (``images_chw``:
    torch ``[C, H, W]`` tensors): the wrapper around a stand-in tower that returns its input."""
    import torch

    identity = types.SimpleNamespace(image_size=224, visual=lambda x, use_31_block: x)
    with torch.no_grad():
        out = _authors_clip_model(identity, transforms).visual(
            [u[:, None] for u in images_chw])
    return out.permute(0, 2, 3, 1).numpy()


@pytest.mark.parametrize("shape", [(480, 832), (100, 150)], ids=["480x832", "100x150"])
def test_preprocess_matches_authors_at_224(case, shape, record_property):
    import torch

    image = np.random.default_rng(3).uniform(-1, 1, (*shape, 3)).astype(np.float32)
    ref = _authors_preprocessing([torch.from_numpy(image).permute(2, 0, 1)], case.transforms)
    out = preprocess(image)
    assert out.shape == (1, 224, 224, 3)
    assert_parity(f"preprocess_{shape[0]}x{shape[1]}", out, ref, record_property)


def test_preprocess_uint8_matches_authors(case, record_property):
    """uint8 input as Wan's pipelines receive it: ``TF.to_tensor(img).sub_(0.5).div_(0.5)``
    (``to_tensor`` of a uint8 image is ``float().div(255)``) before ``CLIPModel.visual``."""
    import torch

    image = np.random.default_rng(4).integers(0, 256, (61, 90, 3), dtype=np.uint8)
    chw = torch.from_numpy(image).permute(2, 0, 1).float().div(255).sub_(0.5).div_(0.5)
    ref = _authors_preprocessing([chw], case.transforms)
    assert_parity("preprocess_uint8", preprocess(image), ref, record_property)


# ----------------------------------------------------------------------------- structure, config
@pytest.mark.parametrize("name", IMAGE_ENCODER_MANIFESTS)
def test_release_manifest_verifies(name):
    """The full-size ViT-H/14 tree holds exactly the release's visual tensors (textual,
    log_scale, post_norm and head ignored) and builds fast."""
    manifest = manifests.get_manifest(name)
    assert CLIPVisionConfig.from_dict(manifest.config) == CLIPVisionConfig.vit_h_14()
    start = time.perf_counter()
    report = verify_manifest(manifest)
    seconds = time.perf_counter() - start
    assert report.ok, str(report)
    textual = [k for k in manifest.tensors if k.startswith("textual.")]
    assert set(report.ignored) == {*textual, "log_scale", "visual.head",
                                   "visual.post_norm.weight", "visual.post_norm.bias"}
    assert report.matched == manifest.num_tensors - len(report.ignored) == 389
    assert seconds < 10, f"verify_manifest took {seconds:.1f} s"


def test_every_image_encoder_manifest_is_covered():
    found = {m.name for m in manifests.all_manifests() if m.component == "image_encoder"
             and m.family == "wan2_1"}
    assert found == set(IMAGE_ENCODER_MANIFESTS)


def test_config_from_authors_dicts():
    cfg = CLIPVisionConfig.tiny()
    assert CLIPVisionConfig.from_dict(_authors_kwargs(cfg)) == cfg
    # VisionTransformer's own keyword names (its defaults are the dataclass defaults)
    assert CLIPVisionConfig.from_dict(dict(image_size=224, patch_size=14, dim=1280,
                                           num_heads=16, num_layers=32, activation="gelu",
                                           out_dim=1024)) == CLIPVisionConfig.vit_h_14()
    with pytest.raises(VidaxError, match="post_norm"):
        CLIPVisionConfig.from_dict(dict(_authors_kwargs(cfg), vision_post_norm=True))
    with pytest.raises(VidaxError, match="activation"):
        CLIPVisionConfig.from_dict(dict(_authors_kwargs(cfg), activation="swi_glu"))
    with pytest.raises(VidaxError, match="unknown"):
        CLIPVisionConfig.from_dict(dict(dim=64, num_heads=4, vision_layers=3))


def test_bad_input_is_a_clear_error():
    model = AbstractModel(lambda: CLIPVisionTransformer(CLIPVisionConfig.tiny()))
    with pytest.raises(VidaxError, match=r"\[B, 28, 28, 3\]"):
        model(np.zeros((1, 32, 32, 3), np.float32))
    with pytest.raises(VidaxError, match="num_blocks"):
        model(np.zeros((1, 28, 28, 3), np.float32), num_blocks=4)
    with pytest.raises(VidaxError, match="RGB"):
        preprocess(np.zeros((8, 8), np.float32))
