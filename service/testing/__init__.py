"""hookbridge's conformance kit, shipped with it: what every vendor adapter must do, run through the real
API and worker against the vendor's simulator, for hookbridge's own adapters and for a plugin's.

A plugin in a repository of its own installs hookbridge (with pytest and pytest-asyncio) and writes one
test module::

    from hookbridge.testing import VendorConformance   # or: from service.testing import ...

    class TestAcme(VendorConformance):
        vendor = "acme"

The fixtures (a Redis, the built-in simulator, the API and a worker on real ports) come from the kit's
pytest plugin (:mod:`service.testing.plugin`, under the ``pytest11`` entry point ``hookbridge``). A vendor
that the built-in simulator serves needs nothing more; one with its own simulator overrides
``vendor_root`` and ``env`` (see :class:`VendorConformance`).

Nothing here imports hookbridge's ``tests/``: the kit is the part of them a plugin needs, and
hookbridge's own tests import it from here.
"""

from __future__ import annotations

from service.testing.fixtures import (
    ALICE,
    BOB,
    Received,
    Receiver,
    ReceiverFactory,
    Stack,
    StackFactory,
    base_env,
    eventually,
    simulator_api_key,
)
from service.testing.proxy import Entry, FaultProxy
from service.testing.suite import FAST, Harness, VendorConformance

__all__ = [
    "ALICE",
    "BOB",
    "FAST",
    "Entry",
    "FaultProxy",
    "Harness",
    "Received",
    "Receiver",
    "ReceiverFactory",
    "Stack",
    "StackFactory",
    "VendorConformance",
    "base_env",
    "eventually",
    "simulator_api_key",
]
