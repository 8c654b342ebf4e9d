"""The submit rule as a table: a request that may have created a vendor job is sent again only to a vendor
whose adapter says ``submit_idempotent`` (service/worker/decide.py)."""

from __future__ import annotations

import httpx
import pytest

from service.vendors.base import (
    VendorRateLimited,
    VendorSubmitUncertain,
    VendorTransient,
)
from service.vendors.cloudsquid import CloudsquidAdapter
from service.vendors.nutrient import NutrientAdapter
from service.vendors.uptiq import UptiqAdapter
from service.worker.decide import AfterSubmit, SubmitFault, after_submit_fault, submit_fault

RETRY, END = AfterSubmit.RETRY, AfterSubmit.END_AMBIGUOUS


@pytest.mark.parametrize(
    ("exc", "fault"),
    [
        (VendorSubmitUncertain("read timeout after sending"), SubmitFault.MAYBE_CREATED),
        (TimeoutError(), SubmitFault.MAYBE_CREATED),
        (VendorRateLimited("429", status_code=429), SubmitFault.NOT_SENT),
        (VendorTransient("ConnectError: refused"), SubmitFault.NOT_SENT),
        (VendorTransient("HTTP 503", status_code=503), SubmitFault.REFUSED_TRANSIENT),
    ],
)
def test_submit_fault_kinds(exc: BaseException, fault: SubmitFault) -> None:
    assert submit_fault(exc) is fault


def _mapped(cause: Exception) -> VendorTransient:
    """A transport fault as the plain ``transport_errors()`` maps it (a plugin's adapter)."""
    try:
        raise VendorTransient(f"{type(cause).__name__}: {cause}") from cause
    except VendorTransient as exc:
        return exc


@pytest.mark.parametrize(
    ("cause", "fault"),
    [
        (httpx.ConnectError("refused"), SubmitFault.NOT_SENT),
        (httpx.ConnectTimeout("connect"), SubmitFault.NOT_SENT),
        (httpx.ReadTimeout("read"), SubmitFault.MAYBE_CREATED),
        (httpx.RemoteProtocolError("Server disconnected"), SubmitFault.MAYBE_CREATED),
        (httpx.WriteError("broken pipe"), SubmitFault.MAYBE_CREATED),
    ],
)
def test_a_plain_transport_fault_is_judged_by_its_cause(cause: Exception, fault: SubmitFault) -> None:
    assert submit_fault(_mapped(cause)) is fault


@pytest.mark.parametrize(
    ("idempotent", "fault", "action"),
    [
        (False, SubmitFault.MAYBE_CREATED, END),
        (True, SubmitFault.MAYBE_CREATED, RETRY),
        (False, SubmitFault.NOT_SENT, RETRY),
        (True, SubmitFault.NOT_SENT, RETRY),
        (False, SubmitFault.REFUSED_TRANSIENT, RETRY),
        (True, SubmitFault.REFUSED_TRANSIENT, RETRY),
    ],
)
def test_after_submit_fault_table(idempotent: bool, fault: SubmitFault, action: AfterSubmit) -> None:
    assert after_submit_fault(idempotent=idempotent, fault=fault) is action


@pytest.mark.parametrize(
    ("adapter", "idempotent"),
    [(NutrientAdapter, True), (CloudsquidAdapter, False), (UptiqAdapter, False)],
)
def test_each_vendor_names_its_submit_rule(adapter: type, idempotent: bool) -> None:
    # Nutrient: "Retrying the same request with the same key returns HTTP 202 without creating another
    # run" (S003). Cloudsquid and Uptiq document no key.
    assert adapter.submit_idempotent is idempotent
