"""Session setup shared by every test module.

Eight simulated CPU devices (``--xla_force_host_platform_device_count=8``): the sharding tests
(``tests/sharding/``) need a multi-device mesh, and XLA reads the flag once, when JAX first
initialises its CPU backend. pytest imports this file before any test module (in every
pytest-xdist worker too), so the flag is in place before anything imports jax. Tests without
a mesh keep placing everything on device 0, as on one device; subprocesses the tests start
inherit the flag.
"""

import os

_DEVICES_FLAG = "--xla_force_host_platform_device_count"
if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICES_FLAG}=8".strip()
