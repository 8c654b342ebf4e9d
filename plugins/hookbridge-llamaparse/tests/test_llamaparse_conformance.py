"""hookbridge's conformance kit, as a plugin in a repository of its own runs it: a subclass that names the
vendor and two facts of its poll answer, nothing else. The kit's pytest plugin brings the fixtures; the
LlamaParse simulator is the one built into ``hookbridge simulator``, which gives the base path and the key;
the delete request is expected because the adapter deletes runs (``base.DeletesRuns``)."""

from __future__ import annotations

from hookbridge.testing import VendorConformance


class TestLlamaParse(VendorConformance):
    vendor = "llamaparse"
    # What the kit cannot know of a vendor: where its poll answer says the status, and that the adapter
    # reads a Retry-After on it (Protocol v2).
    status_path = ("job", "status")
    poll_retry_after = True
