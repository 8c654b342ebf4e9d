"""Which subscriptions a relay's fan-out calls on (``fanout.to_fan_out``), as a table: those whose kept
event types may want one of the events, every one when an event was fanned out before, and every one with
no kept types; and the bodies the relay stores before it (``fanout.bodies_to_store``). The script's own
match is checked against ``may_want`` on a real Redis in tests/store/test_relay_types.py."""

from __future__ import annotations

import pytest

from service.core import domain
from service.store import fanout

PROGRESS, SUCCEEDED, TEST = domain.EVENT_PROGRESS, domain.EVENT_SUCCEEDED, domain.EVENT_TEST
DEFAULT = tuple(domain.DEFAULT_EVENT_TYPES)


def _events(*types: str, before: bool = False) -> list[fanout.Event]:
    return [
        fanout.Event(id=f"evt_{i}", type=t, now=0, body=b"{}", before=before) for i, t in enumerate(types)
    ]


@pytest.mark.parametrize(
    ("types", "event_type", "wanted"),
    [
        (None, PROGRESS, True),  # nothing kept: every event
        (DEFAULT, PROGRESS, False),
        (DEFAULT, SUCCEEDED, True),
        (("run.*",), PROGRESS, True),
        (("run.*",), domain.EVENT_SUBMITTED, True),
        (("run.progress",), SUCCEEDED, False),
        (("run.progress",), PROGRESS, True),
        ((), SUCCEEDED, False),  # an empty list kept (never written so): nothing but the test event
        ((), TEST, True),  # the test event goes to the one it was sent to, whatever it asked for
        (("run.*",), "run", False),  # "run.*" is the run events, not a prefix of any text
        (("run.progress.x",), PROGRESS, False),
    ],
)
def test_may_want(types: tuple[str, ...] | None, event_type: str, wanted: bool) -> None:
    assert fanout.may_want(types, event_type) is wanted


KEPT = {"sub_default": DEFAULT, "sub_all": ("run.*",), "sub_progress": ("run.progress",)}


@pytest.mark.parametrize(
    ("events", "called"),
    [
        (_events(PROGRESS), ["sub_all", "sub_progress", "sub_unknown"]),
        (_events(SUCCEEDED), ["sub_default", "sub_all", "sub_unknown"]),
        (_events(PROGRESS, SUCCEEDED), ["sub_default", "sub_all", "sub_progress", "sub_unknown"]),
        (_events(domain.EVENT_SUBMITTED), ["sub_all", "sub_unknown"]),
        # Fanned out before (a relay again): every subscription, whatever is kept now.
        (
            _events(domain.EVENT_SUBMITTED, before=True),
            ["sub_default", "sub_all", "sub_progress", "sub_unknown"],
        ),
        ([], []),
    ],
)
def test_to_fan_out(events: list[fanout.Event], called: list[str]) -> None:
    subs = ["sub_default", "sub_all", "sub_progress", "sub_unknown"]
    assert fanout.to_fan_out(subs, events, KEPT) == called


@pytest.mark.parametrize(
    ("events", "called", "stored"),
    [
        # The relay stores a run.progress's body (the transition left it in the outbox) only when the
        # fan-out calls on a subscription: one that may deliver it.
        (_events(PROGRESS), [], []),
        (_events(PROGRESS), ["sub_all"], ["evt_0"]),
        (_events(SUCCEEDED, PROGRESS), ["sub_default"], ["evt_1"]),  # a subscription called for the other
        (_events(SUCCEEDED), ["sub_default"], []),  # stored by the transition
        (_events(domain.EVENT_SUBMITTED, domain.EVENT_FAILED), ["sub_all"], []),
        (_events(PROGRESS, PROGRESS), ["sub_progress"], ["evt_0", "evt_1"]),
    ],
)
def test_bodies_to_store(events: list[fanout.Event], called: list[str], stored: list[str]) -> None:
    assert [e.id for e in fanout.bodies_to_store(events, called)] == stored


@pytest.mark.parametrize(
    ("raw", "kept"),
    [
        ({b"sub_1": b'["run.progress"]'}, {"sub_1": ("run.progress",)}),
        ({b"sub_1": b"not json", b"sub_2": b'{"a":1}', b"sub_3": b"[1]"}, {}),  # unreadable: left out
        ({}, {}),
    ],
)
def test_kept_types(raw: dict[bytes, bytes], kept: dict[str, tuple[str, ...]]) -> None:
    assert fanout.kept_types(raw) == kept


def test_types_json_spells_the_default_out() -> None:
    assert fanout.types_json(None) == '["run.succeeded","run.failed","run.canceled"]'
    assert fanout.types_json(("run.*",)) == '["run.*"]'
