"""A subscription's bounds: its rate limit and in-flight cap. (When a failed delivery is tried again is
the core's: ``service/core/backoff.py``, ``delivery_wait``.)"""

# A subscription's rate limit, from one delivery every 1,000 s to 10,000 a second: the API's bounds
# (service/api/models.py), and the claim's clamp for a record written before them
# (store/lua/claim_deliveries.lua repeats the two numbers). Slower than one an hour would outlive the
# claim's rate budget key (an hour) and never be spaced at all.
RATE_LIMIT_MIN_PER_S = 0.001
RATE_LIMIT_MAX_PER_S = 10_000.0
MAX_IN_FLIGHT_MAX = 1000
