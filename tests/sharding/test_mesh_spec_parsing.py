"""Mesh strings a user types (``vidax generate --mesh``): every malformed one is refused with
the item at fault and the accepted axis names (issue #11: ``dp=1,dp=1`` was accepted)."""

from __future__ import annotations

import numpy as np
import pytest

from vidax import sharding
from vidax.errors import VidaxError

AXES_NAMED = "the axes are dp, fsdp, sp, tp"


@pytest.mark.parametrize("spec,devices,message", [
    ("dp=1,dp=1", 1, "the axis dp is named twice"),
    ("dp=2,tp=1,dp=2", 4, "the axis dp is named twice"),
    ({"dp": 1, "pp": 1}, 1, "unknown axis pp"),
    ("DP=2", 2, "unknown axis DP (did you mean 'dp'?)"),
    ("dp=0", 1, "'dp=0': a size must be a positive number of devices"),
    ("tp=-3", 1, "'tp=-3': a size must be a positive number of devices"),
    ("dp=1.5", 1, "'dp=1.5' is not AXIS=SIZE with a whole number SIZE"),
    ("dp=2_0", 20, "'dp=2_0' is not AXIS=SIZE"),
    ("dp=", 1, "'dp=' is not AXIS=SIZE"),
    ("=2", 2, "is not AXIS=SIZE"),
    ({"dp": "two"}, 2, "'dp=two' is not AXIS=SIZE"),
    ({"dp": True}, 1, "'dp=True' is not AXIS=SIZE"),
])
def test_refused_with_the_axis_names(spec, devices, message):
    with pytest.raises(VidaxError) as info:
        sharding.parse_mesh_spec(spec, devices)
    assert message in str(info.value)
    assert AXES_NAMED in str(info.value)


@pytest.mark.parametrize("spec,devices,message", [
    ("dp=2,fsdp=2", 8, "uses 4 devices (dp=2,fsdp=2,sp=1,tp=1); 8 are available: the sizes "
                       "must multiply to the device count"),
    ("dp=2,fsdp=1", 1, "uses 2 devices"),
    ("dp=3", 8, "the named axes use 3 devices, which does not divide the 8 available"),
    ("dp=-1,tp=-1", 4, "only one axis may be -1"),
    (7, 1, "expected a string such as 'dp=2,fsdp=4' or a dict"),
])
def test_refused_sizes(spec, devices, message):
    with pytest.raises(VidaxError) as info:
        sharding.parse_mesh_spec(spec, devices)
    assert message in str(info.value)


@pytest.mark.parametrize("spec,devices,want", [
    (" dp = 2 ,\ttp=1 ", 2, dict(dp=2, fsdp=1, sp=1, tp=1)),
    ("dp=+2,fsdp=1", 2, dict(dp=2, fsdp=1, sp=1, tp=1)),
    ("dp=2,,sp=2", 8, dict(dp=2, fsdp=2, sp=2, tp=1)),
    ({"tp": np.int64(2)}, 4, dict(dp=1, fsdp=2, sp=1, tp=2)),
])
def test_accepted(spec, devices, want):
    assert sharding.parse_mesh_spec(spec, devices) == want


def test_make_mesh_refuses_a_repeated_axis():
    with pytest.raises(VidaxError, match="named twice"):
        sharding.make_mesh("fsdp=1,fsdp=1", devices=sharding.jax.devices()[:1])
