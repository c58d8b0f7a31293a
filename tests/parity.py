"""What the numeric tests share (DESIGN.md §6): the parity measure (:func:`compare`,
:func:`assert_parity`, :func:`assert_fails` for a negative control), the random values put in
every tensor of a reference (:func:`randomize`), edited copies of a saved reference for the
negative controls (:func:`edited_copy`), abstract models for the bad-input tests
(:class:`AbstractModel`), and two harnesses: :class:`VAECase` and :class:`DecoderLMCase`.
torch is imported only by the functions that use it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import vidax

#: The default bound: max abs diff <= 1e-4 x std(reference) in float32 "highest".
REL_TOL = 1e-4


def compare(name: str, out, ref, record_property=None, *, rel_tol: float = REL_TOL) -> dict:
    """Stats of ``out`` against ``ref``: ``max_abs_diff``, ``ref_std``, ``rel`` (their ratio),
    ``corr`` and ``bound`` (``rel_tol * ref_std``). The caller asserts against ``bound`` --
    ``<=`` for a parity test, ``>`` for its negative control."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    assert out.shape == ref.shape, (name, out.shape, ref.shape)
    stats = {"max_abs_diff": float(np.abs(out - ref).max()), "ref_std": float(ref.std()),
             "corr": float(np.corrcoef(out.ravel(), ref.ravel())[0, 1])}
    stats["bound"] = rel_tol * stats["ref_std"]
    stats["rel"] = stats["max_abs_diff"] / stats["ref_std"]
    print(f"{name}: max|diff| {stats['max_abs_diff']:.3e} ({stats['rel']:.2e} x std), "
          f"std(ref) {stats['ref_std']:.4f}, bound {stats['bound']:.3e}, "
          f"corr {stats['corr']:.9f}")
    if record_property is not None:
        record_property(name, stats)
    return stats


def assert_parity(name: str, out, ref, record_property=None, *,
                  rel_tol: float = REL_TOL) -> dict:
    """:func:`compare`, asserting max |diff| <= the bound."""
    stats = compare(name, out, ref, record_property, rel_tol=rel_tol)
    assert stats["max_abs_diff"] <= stats["bound"], stats
    return stats


def assert_fails(name: str, out, ref, record_property=None, *,
                 rel_tol: float = REL_TOL) -> dict:
    """A negative control: :func:`compare`, asserting max |diff| > the bound."""
    stats = compare(name, out, ref, record_property, rel_tol=rel_tol)
    assert stats["max_abs_diff"] > stats["bound"], stats
    return stats


def randomize(named_params, seed: int) -> None:
    """Random values in every tensor of a reference (norm scales of 1 and zero biases hide
    swapped weights), scaled so activations stay O(1): free tables (``modulation``,
    ``emb_pos``) ~ 0.5, norm scales (``gamma``, 1-D ``weight``) ~ 1 + 0.2 noise, matrices and
    kernels ~ 1/sqrt(fan_in), biases ~ 0.1. One draw per tensor, in the given order."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in named_params:
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith(("modulation", "emb_pos")):
                p.copy_(0.5 * noise)
            elif name.endswith("gamma"):
                p.copy_(1 + 0.2 * noise)
            elif p.ndim >= 2:
                p.copy_(noise / p[0].numel() ** 0.5)
            elif name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            else:
                p.copy_(0.1 * noise)


def to_ncthw(x: np.ndarray):
    """A channels-last video ``[B, T, H, W, C]`` (vidax) as torch's ``[B, C, T, H, W]`` (a view)."""
    import torch

    return torch.from_numpy(x).permute(0, 4, 1, 2, 3)


def to_channels_last(x) -> np.ndarray:
    """torch's ``[B, C, T, H, W]`` as vidax's channels-last ``[B, T, H, W, C]`` (a view)."""
    return x.permute(0, 2, 3, 4, 1).numpy()


class AbstractModel:
    """The model ``build()`` makes, built by ``nnx.eval_shape`` (shapes, no weights), whose
    calls -- ``m(...)``, ``m.encode(...)`` -- are traced by ``jax.eval_shape``: nothing is
    computed or compiled, and an input check raises as in a real call."""

    def __init__(self, build: Callable[[], Any]):
        from flax import nnx

        self.graphdef, self.state = nnx.split(nnx.eval_shape(build))

    def _trace(self, method: str | None, *args, **kwargs):
        import jax
        from flax import nnx

        def run(state):
            model = nnx.merge(self.graphdef, state)
            return (model if method is None else getattr(model, method))(*args, **kwargs)
        return jax.eval_shape(run, self.state)

    def __call__(self, *args, **kwargs):
        return self._trace(None, *args, **kwargs)

    def shapes(self, method: str, *args):
        """The output shapes of ``method(*args)`` on abstract inputs (``jax.ShapeDtypeStruct``
        trees, ``None``, or a tuple of ints for a float32 array): a full-size forward traced
        without memory."""
        import jax
        from flax import nnx

        args = [jax.ShapeDtypeStruct(a, np.float32) if isinstance(a, tuple) and a
                and all(isinstance(n, int) for n in a) else a for a in args]
        return jax.eval_shape(lambda state, *args: getattr(nnx.merge(self.graphdef, state),
                                                           method)(*args), self.state, *args)

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self._trace(name, *args, **kwargs)


# ----------------------------------------------------------------------------- tensor files
def edited_copy(path: Path, out: Path, *edits: Callable[[dict], None]) -> Path:
    """A copy of the tensor file ``path`` at ``out`` after each ``edit(tensors)``, in the same
    format: safetensors (numpy arrays, its metadata kept) or a ``torch.save`` dict."""
    import safetensors.numpy
    import torch

    if Path(path).suffix == ".safetensors":
        with safetensors.safe_open(str(path), "np") as f:
            metadata = f.metadata()
        tensors = safetensors.numpy.load_file(str(path))
    else:
        tensors = dict(torch.load(path, weights_only=True))
    for edit in edits:
        edit(tensors)
    if Path(path).suffix == ".safetensors":
        safetensors.numpy.save_file(tensors, str(out), metadata=metadata)
    else:
        torch.save(tensors, out)
    return out


def swap(*pairs: tuple[str, str]) -> Callable[[dict], None]:
    """An edit exchanging each pair of tensors."""
    def edit(tensors):
        for a, b in pairs:
            tensors[a], tensors[b] = tensors[b], tensors[a]
    return edit


def swap_prefixes(a: str, b: str) -> Callable[[dict], None]:
    """An edit exchanging every tensor under prefix ``a`` with its twin under ``b``."""
    def edit(tensors):
        keys = [k for k in tensors if k.startswith(a)]
        assert keys
        for key in keys:
            twin = b + key[len(a):]
            tensors[key], tensors[twin] = tensors[twin], tensors[key]
    return edit


# ----------------------------------------------------------------------------- VAEs
def draw_inputs(seed: int, videos: dict, latents: dict) -> tuple[dict, dict]:
    """Inputs from one ``numpy`` generator: a video in [-1, 1) for each shape of ``videos``,
    then standard normal latents for each of ``latents`` (float32, in the given orders)."""
    rng = np.random.default_rng(seed)
    return ({k: rng.uniform(-1, 1, s).astype(np.float32) for k, s in videos.items()},
            {k: rng.standard_normal(s).astype(np.float32) for k, s in latents.items()})


def chunked_vae_run(case, cls) -> dict:
    """vidax's side of a chunked VAE case (``videos`` / ``latents`` by frame count): the
    model, the encode of every video, the unclamped decode of every latent batch, and the
    ``traces`` they compiled: (method, input shape, first chunk?) of each call of
    ``cls.encode_chunk`` / ``decode_chunk``, which the jitted functions make only when tracing."""
    import pytest

    model, traces = case.load(), []
    with pytest.MonkeyPatch.context() as mp:
        for name in ("encode_chunk", "decode_chunk"):
            original = getattr(cls, name)

            def traced(self, x, cache, _original=original, _name=name):
                traces.append((_name, tuple(x.shape), cache is None))
                return _original(self, x, cache)
            mp.setattr(cls, name, traced)
        encoded = {t: np.asarray(model.encode(v)) for t, v in case["videos"].items()}
        decoded = {t: model.decode(z, clamp=False) for t, z in case["latents"].items()}
    return {"model": model, "encoded": encoded, "decoded": decoded, "traces": traces}


def wan_vae_without_cache(model, video: np.ndarray, latents: np.ndarray):
    """A Wan VAE's own per-chunk programs (``vidax.models.wan2_1.vae._encode_chunk`` /
    ``_decode_chunk``, which Wan2.2 shares) over ``video`` (1 frame, then 4 at a time) and the
    normalised ``latents`` (one frame at a time), with every chunk's cache zeroed -- as at the
    start of a video -- instead of carried: (normalised mu, decoded video)."""
    import jax
    from flax import nnx

    from vidax.models.wan2_1 import vae

    graphdef, state = nnx.split(model)
    mean, inv_std = model._statistics()
    cache, mus = None, []
    for start, stop in [(0, 1)] + [(i, i + 4) for i in range(1, video.shape[1], 4)]:
        mu, _, cache = vae._encode_chunk(graphdef, state, video[:, start:stop], cache)
        cache = jax.tree.map(np.zeros_like, cache)
        mus.append(mu)
    encoded = (np.concatenate(mus, axis=1) - mean) * inv_std
    z, cache, frames = latents / inv_std + mean, None, []
    for i in range(z.shape[1]):
        out, cache = vae._decode_chunk(graphdef, state, z[:, i:i + 1], cache)
        cache = jax.tree.map(np.zeros_like, cache)
        frames.append(np.asarray(out))
    return encoded, np.concatenate(frames, axis=1)


@dataclasses.dataclass
class VAECase:
    """A tiny reference VAE saved in its release layout (``path``), the ``config`` for
    ``vidax.load`` (``None``: from the file) and any ``load_options``, its inputs and its
    outputs (``expected``, channels-last; both also as ``case[name]``), and ``ref`` itself."""

    family: str
    path: Path
    config: Any
    inputs: dict
    expected: dict
    ref: Any = None
    load_options: dict = dataclasses.field(default_factory=dict)

    def __getitem__(self, key: str):
        return self.inputs[key] if key in self.inputs else self.expected[key]

    def load(self, path: Path | None = None, **kwargs):
        kwargs = {"config": self.config, **self.load_options, **kwargs}
        return vidax.load(self.family, "vae", path or self.path, **kwargs)

    def load_edited(self, tmp_path: Path, *edits, **kwargs):
        """vidax's model from an :func:`edited_copy` of the file (same name, in ``tmp_path``)."""
        return self.load(edited_copy(self.path, Path(tmp_path) / self.path.name, *edits),
                         **kwargs)

    # ------------------------------- diffusers' posterior API (HunyuanVideo, CogVideoX, Wan)
    @classmethod
    def posterior(cls, family: str, path: Path, config, ref, *, video: tuple, latents: tuple,
                  seed: int = 1) -> VAECase:
        """The case of a reference with ``encode(x).latent_dist`` and ``decode(z).sample``:
        a ``video`` and latents ``z`` (:func:`draw_inputs`) and its ``mean``, ``log_var`` and
        ``decoded``."""
        import torch

        videos, zs = draw_inputs(seed, {"video": video}, {"z": latents})
        with torch.no_grad():
            posterior = ref.encode(to_ncthw(videos["video"])).latent_dist
            decoded = ref.decode(to_ncthw(zs["z"])).sample
        return cls(family, path, config, {**videos, **zs},
                   {"mean": to_channels_last(posterior.mean),
                    "log_var": to_channels_last(posterior.logvar),
                    "decoded": to_channels_last(decoded)}, ref)

    def outputs(self, model, direction: str):
        """vidax's ``(mean, log_var)`` of the video (``encode``) or unclamped decode of ``z``."""
        if direction == "encode":
            mean, log_var = model.encode(self["video"], normalize=False, return_log_var=True)
            return np.asarray(mean), np.asarray(log_var)
        return model.decode(self["z"], normalized=False, clamp=False)

    def check_posterior(self, model, name: str, record_property) -> None:
        """Mean, log-variance and decode within the bound, then the scaled API (the
        pipelines' ``* scaling_factor`` / ``/ scaling_factor``, the decode clamped)."""
        mean, log_var = self.outputs(model, "encode")
        decoded = self.outputs(model, "decode")
        for suffix, out, key in (("mean", mean, "mean"), ("log_var", log_var, "log_var"),
                                 ("decode", decoded, "decoded")):
            assert_parity(f"{name}_{suffix}", out, self[key], record_property)
        scale = self.config.scaling_factor
        np.testing.assert_allclose(np.asarray(model.encode(self["video"])), mean * scale,
                                   rtol=1e-6)
        np.testing.assert_allclose(model.decode(self["z"] * scale, clamp=True),
                                   np.clip(decoded, -1, 1), atol=1e-5)

    def other_input(self, direction: str, frames: int, seed: int = 2) -> np.ndarray:
        """A video to encode, or latents to decode, of batch 1 and ``frames`` frames."""
        rng = np.random.default_rng(seed)
        if direction == "encode":
            return rng.uniform(-1, 1, (1, frames, *self["video"].shape[2:])).astype(np.float32)
        return rng.standard_normal((1, frames, *self["z"].shape[2:])).astype(np.float32)

    def check_input(self, model, direction: str, x: np.ndarray, name: str,
                    record_property) -> np.ndarray:
        """Another input through both sides (the posterior mean, or the unclamped decode)."""
        import torch

        with torch.no_grad():
            if direction == "encode":
                ref = to_channels_last(self.ref.encode(to_ncthw(x)).latent_dist.mean)
            else:
                ref = to_channels_last(self.ref.decode(to_ncthw(x)).sample)
        out = (np.asarray(model.encode(x, normalize=False)) if direction == "encode"
               else model.decode(x, normalized=False, clamp=False))
        assert_parity(name, out, ref, record_property)
        return out

    def check_negative(self, tmp_path: Path, direction: str, edit, name: str,
                       record_property) -> None:
        """The file with ``edit`` applied fails the bound (on the mean, or the decode)."""
        out = self.outputs(self.load_edited(tmp_path, edit), direction)
        out, ref = (out[0], self["mean"]) if direction == "encode" else (out, self["decoded"])
        assert_fails(name, out, ref, record_property)

    def check_unmasked_attention_fails(self, vae_module, monkeypatch, name: str,
                                       record_property) -> None:
        """The same weights with ``vae_module.attention`` called without its frame-causal
        mask fail the bound on the mean (a new jitted function: nothing compiled is reused)."""
        import jax
        import jax.numpy as jnp
        from flax import nnx

        masked = vae_module.attention

        def unmasked(q, k, v, *, mask):
            return masked(q, k, v)

        model = self.load()
        monkeypatch.setattr(vae_module, "attention", unmasked)
        graphdef, state = nnx.split(model)
        moments = jax.jit(lambda s, x: nnx.merge(graphdef, s).moments(x))(
            state, jnp.asarray(self["video"]))
        assert_fails(name, np.asarray(moments[..., :self.config.latent_channels]),
                     self["mean"], record_property)


# ----------------------------------------------------------------------------- decoder LMs
@dataclasses.dataclass
class DecoderLMCase:
    """A tiny transformers decoder LM with random values in every tensor, saved by its own
    ``save_pretrained`` under ``root/<layout>``; the token ids and padding mask drawn for it,
    and the reference's hidden states (``output_hidden_states``: the embeddings, each layer's
    output, the last after the final norm) of each call, by name, in ``ref``."""

    family: str
    root: Path
    config: Any
    num_layers: int
    ids: np.ndarray
    mask: np.ndarray
    ref: dict
    model: Any = None

    @classmethod
    def build(cls, root: Path, family: str, config_cls, make: Callable[[], Any],
              save: Callable[[Any, Path], Any], *, num_layers: int, vocab_size: int,
              batch: int, seq_len: int, padding: Callable[[Any], None],
              calls: Callable[..., dict], config_layout: str) -> DecoderLMCase:
        """``make()`` the reference (after ``torch.manual_seed(0)``), :func:`randomize` it
        (seed 1), ``save(model, root)`` it (returning what ``calls`` runs), draw token ids from
        a torch generator seeded 2 and a mask of ones that ``padding(mask)`` pads, run
        ``calls(saved, ids=..., mask=...)`` (name -> output with ``hidden_states``), and read
        the config from ``root/<config_layout>/config.json``."""
        import torch

        torch.manual_seed(0)
        model = make().eval()
        randomize(model.named_parameters(), seed=1)
        saved = save(model, root)
        gen = torch.Generator().manual_seed(2)
        ids = torch.randint(0, vocab_size, (batch, seq_len), generator=gen)
        mask = torch.ones(batch, seq_len, dtype=torch.long)
        padding(mask)
        with torch.no_grad():
            ref = {k: [h.numpy() for h in v.hidden_states]
                   for k, v in calls(saved, ids=ids, mask=mask).items()}
        config = config_cls.from_dict(
            json.loads((root / config_layout / "config.json").read_text()))
        return cls(family, root, config, num_layers, ids.numpy(), mask.numpy(), ref, model)

    def load(self, where: str | Path):
        """vidax's text encoder from ``root/<layout>`` (a layout name) or from a path."""
        path = self.root / where if isinstance(where, str) else where
        return vidax.load(self.family, "text_encoder", path, config=self.config)

    def check_all(self, name: str, ours, key: str, record_property) -> None:
        """Every hidden state (``name[i]``) within its own bound of ``ref[key][i]``."""
        assert len(ours) == len(self.ref[key]) == self.num_layers + 1
        for i, (o, r) in enumerate(zip(ours, self.ref[key])):
            assert_parity(f"{name}[{i}]", np.asarray(o), r, record_property)

    def swapped_file(self, tmp_path: Path, layout: str, *pairs: tuple[str, str]) -> Path:
        """``root/<layout>/model.safetensors`` with each pair of tensors that it holds
        exchanged (a pair it lacks, e.g. the bias of a bias-free layer, is skipped)."""
        def edit(tensors):
            present = [(a, b) for a, b in pairs if a in tensors]
            assert present, pairs
            swap(*present)(tensors)
        return edited_copy(self.root / layout / "model.safetensors",
                           Path(tmp_path) / "model.safetensors", edit)

    def check_negative(self, tmp_path: Path, layout: str, pairs, name: str,
                       record_property, key: str = "ids") -> None:
        """The file with ``pairs`` exchanged must fail the bound on the last hidden state."""
        last = self.load(self.swapped_file(tmp_path, layout, *pairs))(self.ids)[-1]
        assert_fails(name, last, self.ref[key][-1], record_property)
