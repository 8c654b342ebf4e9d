"""The conformance kit under the name a vendor plugin imports it by: ``from hookbridge.testing import
VendorConformance``. Everything here is :mod:`service.testing`'s (the kit lives beside the code it
drives; see that module's docstring)."""

from __future__ import annotations

from service.testing import *  # noqa: F403
from service.testing import __all__ as __all__
