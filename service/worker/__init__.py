"""The background work: vendor steps and callback deliveries (``pumps``), periodic jobs (``queue``)."""
