"""The conformance kit's pytest plugin, registered by hookbridge under the ``pytest11`` entry point group
(pyproject.toml): in an environment where hookbridge is installed, every pytest session has the kit's
fixtures (:mod:`service.testing.fixtures`), so that a vendor plugin's tests need nothing but a subclass of
:class:`~service.testing.suite.VendorConformance`. ``-p no:hookbridge`` turns it off.

The fixtures need pytest-asyncio. Without it this plugin registers nothing, so that pytest in such an
environment (one that runs none of these tests) works as it did.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("pytest_asyncio") is not None:
    from service.testing.fixtures import (
        make_receiver,
        make_stack,
        receiver,
        redis_server,
        redis_url,
        servers,
        sim_config,
        simulator,
        stack,
    )

    __all__ = [
        "make_receiver",
        "make_stack",
        "receiver",
        "redis_server",
        "redis_url",
        "servers",
        "sim_config",
        "simulator",
        "stack",
    ]
