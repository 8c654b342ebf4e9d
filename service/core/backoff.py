"""The three backoffs, in one place: the poll interval, the wait after a vendor fault, the wait after a
failed callback. Each takes its jitter source as an argument (anything with ``uniform(a, b)``, such as a
``random.Random``), so a table can pin it."""

from __future__ import annotations

from typing import Protocol


class Jitter(Protocol):
    def uniform(self, a: float, b: float) -> float: ...


class PollPolicy(Protocol):
    """A vendor's poll policy (``VendorSettings``): the numbers the backoffs read."""

    @property
    def poll_initial_s(self) -> float: ...
    @property
    def poll_max_s(self) -> float: ...
    @property
    def poll_multiplier(self) -> float: ...
    @property
    def pause_max_s(self) -> float: ...


class VendorPolicy(PollPolicy, Protocol):
    """What the run decisions read of a vendor's settings (``config.settings.VendorSettings`` has it): the
    poll policy and the longest a run may last."""

    @property
    def max_run_s(self) -> float: ...


# The poll interval's jitter: up to 15 % of the planned interval, so runs submitted together spread out.
POLL_JITTER = 0.15
# A vendor fault's wait: the backoff times 1.0-1.2, never earlier than Retry-After.
FAULT_JITTER = (1.0, 1.2)
# A callback's wait: the schedule's step times 0.8-1.2.
DELIVERY_JITTER = (0.8, 1.2)


def poll_delay(policy: PollPolicy, current: float | None, jitter: Jitter) -> tuple[float, float]:
    """The vendor's poll policy: start at ``POLL_INITIAL_S``, grow by the multiplier up to ``POLL_MAX_S``.

    Returns the planned interval (kept with the run, the base of the next one) and the interval to wait:
    the planned one plus up to 15 % jitter, so that runs submitted together do not poll together, but
    never past ``POLL_MAX_S``: the documented intervals (Cloudsquid 2-5 s, Uptiq 5-10 s) hold with the
    jitter included. At the maximum the jitter goes below it instead, never below ``POLL_INITIAL_S``.
    """
    planned = (
        policy.poll_initial_s if current is None else min(policy.poll_max_s, current * policy.poll_multiplier)
    )
    share = jitter.uniform(0.0, POLL_JITTER)
    return planned, jittered(planned, policy.poll_initial_s, policy.poll_max_s, share)


def directed_delay(policy: PollPolicy, retry_after_s: float) -> float:
    """The vendor's own "ask again in N s" (``Retry-After`` on a 202 or 200, Protocol v2): honoured up to
    ``PAUSE_MAX_S``, even past ``POLL_MAX_S``, and never sooner than ``POLL_INITIAL_S``, the vendor's
    documented minimum (contract §10). No jitter: the vendor named the time."""
    return min(max(retry_after_s, policy.poll_initial_s), policy.pause_max_s)


def jittered(planned: float, floor: float, ceiling: float, share: float) -> float:
    """``planned`` moved by ``share`` of itself, up where there is room below ``ceiling``, else down;
    always within [floor, ceiling]."""
    up = planned * (1.0 + share)
    wait = up if up <= ceiling else planned * (1.0 - share)
    return min(ceiling, max(floor, wait))


def fault_delay(policy: PollPolicy, attempt: int, retry_after: float | None, jitter: Jitter) -> float:
    """Seconds before trying a vendor again after its ``attempt``-th fault in a row (1 = the first):
    ``POLL_INITIAL_S`` doubled per fault up to ``POLL_MAX_S``, never earlier than the vendor's
    ``Retry-After``, times 1.0-1.2 so that faults seen together are not retried together. The same rule
    for a run's step and for telling the vendor (cancel, delete)."""
    backoff = min(policy.poll_max_s, policy.poll_initial_s * 2.0 ** (attempt - 1))
    return max(backoff, retry_after or 0.0) * jitter.uniform(*FAULT_JITTER)


def delivery_wait(
    schedule: tuple[float, ...], failed_attempts: int, retry_after: float | None, jitter: Jitter
) -> float | None:
    """Seconds to wait after the ``failed_attempts``-th failure of a series, or None when it is exhausted.

    ``RETRY_SCHEDULE``'s step with ±20 % jitter. ``Retry-After`` (on 429/503) is honoured within the
    schedule's bounds: never earlier than the receiver asked, never later than the schedule's longest step.
    """
    if failed_attempts < 1 or failed_attempts > len(schedule):
        return None
    wait = schedule[failed_attempts - 1] * jitter.uniform(*DELIVERY_JITTER)
    if retry_after is not None:
        wait = max(wait, min(retry_after, max(schedule)))
    return wait
