"""The core's decisions: pure functions that say what follows a vendor's answer or a callback's answer.

The worker claims, calls and applies; what a call's answer means (which transition, with which numbers)
is decided here, from the answer, the record and the policy's numbers (``VendorSettings``, ``RunPolicy``,
``DeliveryPolicy``), never from the whole settings. Nothing here does I/O, reads a clock or draws a random
number: the time and the jitter source are arguments, so that every rule is tested as a table
(tests/unit/test_backoff.py, test_decisions.py). Beside them live what they decide about: the statuses
(``domain``), the stored records (``records``), the public shapes (``shapes``), the transitions the
decisions choose (``lifecycle``), a run's trail (``trail``) and the clock the shells read (``clock``).
"""
