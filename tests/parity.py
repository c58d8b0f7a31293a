"""What the numeric tests share (DESIGN.md §6).

* The parity measure: max |vidax - reference| against ``rel_tol`` x std(reference), with the
  correlation, printed and recorded (:func:`compare`; :func:`assert_parity` and its negative
  control :func:`assert_fails`), and the random values put in every tensor of a reference
  (:func:`randomize`).
* Copies of a saved reference file with tensors exchanged or edited, in the file's own format
  (:func:`edited_copy`, :func:`swap`, :func:`swap_prefixes`): the negative controls.
* Two harnesses for the oracles that recur across families: :class:`VAECase` (a tiny
  reference VAE saved in its release layout, its inputs and outputs; encode/decode parity and
  negative controls, diffusers' posterior API included) and :class:`DecoderLMCase` (a tiny
  transformers decoder language model saved by ``save_pretrained`` in the layouts vidax
  reads, and every hidden state of its calls).

torch is imported only where a function needs it, so a module that takes
:func:`compare` alone does not pay for importing it.
"""

from __future__ import annotations

import contextlib
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


def abstract_call(model, method: str | None, *args, **kwargs):
    """``model.method(*args, **kwargs)`` (``model(...)`` for ``method=None``) traced on the
    model's abstract state (``jax.eval_shape``): nothing is computed or compiled, and an
    input check raises as it would in a real call."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)

    def run(state):
        merged = nnx.merge(graphdef, state)
        return (merged if method is None else getattr(merged, method))(*args, **kwargs)

    return jax.eval_shape(run, state)


class AbstractModel:
    """A model built by ``nnx.eval_shape(build)`` (no weights: shapes only), whose calls --
    ``m(...)``, ``m.encode(...)`` -- are traced by :func:`abstract_call`. For the bad-input
    tests, which need the model's structure and its checks, not its numbers."""

    def __init__(self, build: Callable[[], Any]):
        from flax import nnx

        self.module = nnx.eval_shape(build)

    def __call__(self, *args, **kwargs):
        return abstract_call(self.module, None, *args, **kwargs)

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: abstract_call(self.module, name, *args, **kwargs)


# ----------------------------------------------------------------------------- tensor files
def _read_tensors(path: Path) -> tuple[dict, dict | None]:
    """A file's tensors (numpy for safetensors, torch for a ``torch.save``'d dict) and, for
    safetensors, its ``__metadata__``."""
    if path.suffix == ".safetensors":
        import safetensors
        import safetensors.numpy

        with safetensors.safe_open(str(path), "np") as f:
            metadata = f.metadata()
        return safetensors.numpy.load_file(str(path)), metadata
    import torch

    return dict(torch.load(path, weights_only=True)), None


def edited_copy(path: Path, out: Path, *edits: Callable[[dict], None]) -> Path:
    """A copy of the tensor file ``path`` at ``out``, in the same format (safetensors with its
    metadata, or a bare ``torch.save`` dict), after each ``edit(tensors)`` in turn."""
    tensors, metadata = _read_tensors(Path(path))
    for edit in edits:
        edit(tensors)
    if Path(path).suffix == ".safetensors":
        import safetensors.numpy

        safetensors.numpy.save_file(tensors, str(out), metadata=metadata)
    else:
        import torch

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


@contextlib.contextmanager
def count_chunk_traces(cls, log: list):
    """Record each trace of a chunked VAE's per-chunk methods in ``log``: (method, input shape,
    first chunk?). The jitted per-chunk functions call ``cls.encode_chunk`` /
    ``cls.decode_chunk`` only while tracing."""
    import pytest

    with pytest.MonkeyPatch.context() as mp:
        for name in ("encode_chunk", "decode_chunk"):
            original = getattr(cls, name)

            def traced(self, x, cache, _original=original, _name=name):
                log.append((_name, tuple(x.shape), cache is None))
                return _original(self, x, cache)

            mp.setattr(cls, name, traced)
        yield


@dataclasses.dataclass
class VAECase:
    """A tiny reference VAE saved in its release layout (``path``), what ``vidax.load`` needs
    for it (``config``: ``None`` reads it from the file), its inputs and its outputs
    (``expected``, channels-last), and the reference itself (``ref``) for further runs."""

    family: str
    path: Path
    config: Any
    inputs: dict
    expected: dict
    ref: Any = None
    component: str = "vae"

    def __getitem__(self, key: str):
        """An input or an expected output by name (``case["video"]``, ``case["mean"]``)."""
        return self.inputs[key] if key in self.inputs else self.expected[key]

    def load(self, path: Path | None = None, **kwargs):
        kwargs.setdefault("config", self.config)
        return vidax.load(self.family, self.component, path or self.path, **kwargs)

    def edited(self, tmp_path: Path, *edits) -> Path:
        """A copy of the file, under its own name in ``tmp_path``, with ``edits`` applied."""
        return edited_copy(self.path, Path(tmp_path) / self.path.name, *edits)

    def load_edited(self, tmp_path: Path, *edits, **kwargs):
        """vidax's model from :meth:`edited`."""
        return self.load(self.edited(tmp_path, *edits), **kwargs)

    # --------------------------------------------- diffusers' posterior API, and vidax's
    @classmethod
    def posterior(cls, family: str, path: Path, config, ref, *, video: tuple, latents: tuple,
                  seed: int = 1) -> VAECase:
        """The case of a diffusers-style reference (``encode(x).latent_dist`` with ``mean`` and
        ``logvar``, ``decode(z).sample``): one video and one latent batch drawn by
        :func:`draw_inputs`, and the posterior mean, its log-variance and the decoded video."""
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
        """vidax's side of :meth:`posterior`: ``(mean, log_var)`` of the video, unnormalised,
        or the decoded latents, unclamped."""
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

    def check_input(self, model, direction: str, x: np.ndarray, name: str,
                    record_property) -> np.ndarray:
        """Another input through both sides: the posterior mean of a video, or the
        unclamped decode of latents. Returns vidax's output."""
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
        """The file with ``edit`` applied must fail the bound: the posterior mean for
        ``encode``, the decode for ``decode``."""
        out = self.outputs(self.load_edited(tmp_path, edit), direction)
        out, ref = (out[0], self["mean"]) if direction == "encode" else (out, self["decoded"])
        assert_fails(name, out, ref, record_property)

    def check_unmasked_attention_fails(self, vae_module, monkeypatch, name: str,
                                       record_property) -> None:
        """The same weights with ``vae_module.attention`` called without its frame-causal
        mask fail the bound on the posterior mean. Traced afresh (a new jitted function), so
        no program compiled with the mask is reused."""
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
    extra: dict = dataclasses.field(default_factory=dict)

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

    def compare_all(self, name: str, ours, key: str, record_property) -> list[dict]:
        """:func:`compare` for every hidden state (``name[i]``) against ``ref[key]``."""
        ref = self.ref[key]
        assert len(ours) == len(ref) == self.num_layers + 1
        return [compare(f"{name}[{i}]", np.asarray(o), r, record_property)
                for i, (o, r) in enumerate(zip(ours, ref))]

    def check_all(self, name: str, ours, key: str, record_property) -> None:
        """Every hidden state within its own bound."""
        for stats in self.compare_all(name, ours, key, record_property):
            assert stats["max_abs_diff"] <= stats["bound"], stats

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
