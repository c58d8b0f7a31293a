"""vidax.nn layers + the converter's layouts against PyTorch's own layers.

The converter turns PyTorch weights into Flax kernels; these tests run both layers on the
same input, so a wrong permutation (or a wrong flip for transposed convolutions) fails.
Bound: float32 with matmul precision "highest", max abs diff <= 1e-5 (a few ulps of
O(1) outputs summed over <= 100 terms)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vidax.nn import Conv, ConvTranspose, KeyGen, LayerNorm, Linear, RMSNorm
from vidax.translator import converter

jax.config.update("jax_default_matmul_precision", "highest")
TOL = 1e-5


def _set(layer, weight, bias, layout):
    layer.kernel[...] = jnp.asarray(converter.convert(weight.detach().numpy(), layout))
    layer.bias[...] = jnp.asarray(bias.detach().numpy())


def _channels_last(t):
    return np.moveaxis(t.detach().numpy(), 1, -1)


def test_linear_matches_torch():
    import torch

    torch.manual_seed(0)
    ref = torch.nn.Linear(7, 5)
    ours = Linear(7, 5, keys=KeyGen(0))
    _set(ours, ref.weight, ref.bias, "linear")
    x = torch.randn(3, 7)
    np.testing.assert_allclose(ours(jnp.asarray(x.numpy())), ref(x).detach().numpy(), atol=TOL)


@pytest.mark.parametrize("dims,kernel,stride,padding", [
    (1, (3,), (2,), (1,)),
    (2, (3, 2), (1, 2), (1, 0)),
    (3, (3, 3, 3), (1, 1, 1), (1, 1, 1)),
    (3, (1, 2, 2), (1, 2, 2), (0, 0, 0)),   # Wan's patch embedding
])
def test_conv_matches_torch(dims, kernel, stride, padding):
    import torch

    torch.manual_seed(0)
    ref = getattr(torch.nn, f"Conv{dims}d")(4, 6, kernel, stride=stride, padding=padding)
    ours = Conv(4, 6, kernel, keys=KeyGen(0), stride=stride, padding=padding)
    _set(ours, ref.weight, ref.bias, "conv")
    x = torch.randn(2, 4, *([8] * dims))
    np.testing.assert_allclose(ours(jnp.asarray(_channels_last(x))), _channels_last(ref(x)),
                               atol=TOL)


@pytest.mark.parametrize("dims,kernel,stride,padding,out_pad", [
    (1, (4,), (2,), (1,), (0,)),
    (1, (7,), (3,), (2,), (1,)),
    (2, (3, 3), (2, 2), (1, 1), (1, 1)),
])
def test_conv_transpose_matches_torch(dims, kernel, stride, padding, out_pad):
    import torch

    torch.manual_seed(0)
    ref = getattr(torch.nn, f"ConvTranspose{dims}d")(4, 6, kernel, stride=stride,
                                                     padding=padding, output_padding=out_pad)
    ours = ConvTranspose(4, 6, kernel, keys=KeyGen(0), stride=stride, padding=padding,
                         output_padding=out_pad)
    _set(ours, ref.weight, ref.bias, "conv_transpose")
    x = torch.randn(2, 4, *([9] * dims))
    np.testing.assert_allclose(ours(jnp.asarray(_channels_last(x))), _channels_last(ref(x)),
                               atol=TOL)


def test_wrong_layout_fails():
    """Negative control: a conv weight laid out as if it were linear-transposed differs."""
    import torch

    torch.manual_seed(0)
    ref = torch.nn.Conv1d(4, 4, 3, padding=1)
    ours = Conv(4, 4, (3,), keys=KeyGen(0), padding=1)
    w = converter.convert(ref.weight.detach().numpy(), "conv")
    ours.kernel[...] = jnp.asarray(np.swapaxes(w, -1, -2))  # in/out swapped
    ours.bias[...] = jnp.asarray(ref.bias.detach().numpy())
    x = torch.randn(1, 4, 8)
    assert np.abs(np.asarray(ours(jnp.asarray(_channels_last(x))))
                  - _channels_last(ref(x))).max() > 1e-2


def test_norms_match_torch():
    import torch

    torch.manual_seed(0)
    x = torch.randn(3, 16) * 3 + 1
    ln = torch.nn.LayerNorm(16, eps=1e-6)
    ln.weight.data.normal_()
    ln.bias.data.normal_()
    ours = LayerNorm(16, eps=1e-6)
    ours.scale[...] = jnp.asarray(ln.weight.detach().numpy())
    ours.bias[...] = jnp.asarray(ln.bias.detach().numpy())
    np.testing.assert_allclose(ours(jnp.asarray(x.numpy())), ln(x).detach().numpy(), atol=TOL)
    rms = torch.nn.RMSNorm(16, eps=1e-6)
    rms.weight.data.normal_()
    ours = RMSNorm(16, eps=1e-6)
    ours.scale[...] = jnp.asarray(rms.weight.detach().numpy())
    np.testing.assert_allclose(ours(jnp.asarray(x.numpy())), rms(x).detach().numpy(), atol=TOL)


def test_auto_layout_table():
    assert converter.auto_layout("a.b.weight", 2) == ("kernel", "linear")
    assert converter.auto_layout("a.conv.weight", 5) == ("kernel", "conv")
    assert converter.auto_layout("norm.weight", 1) == ("scale", "none")
    assert converter.auto_layout("x.bias", 1) == ("bias", "none")
    assert converter.auto_layout("blocks.0.modulation", 3) == ("modulation", "none")
    assert converter.converted_shape((8, 4, 1, 2, 2), "conv") == (1, 2, 2, 4, 8)
    assert converter.converted_shape((8, 4, 3), "conv_transpose") == (3, 8, 4)


def test_convert_is_a_view():
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = converter.convert(w, "conv")
    assert np.shares_memory(out, w)


@pytest.mark.parametrize("shape,layout", [((1536, 640), "linear"), ((700, 513), "linear"),
                                          ((8, 4, 1, 2, 2), "conv"), ((5,), "none")])
def test_contiguous_copy_of_a_layout_view(shape, layout):
    w = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    view = converter.convert(w, layout)
    out = converter.contiguous(view)
    assert out.flags.c_contiguous
    np.testing.assert_array_equal(out, view)
    if layout == "none":
        assert out is view
