"""What hookbridge tells its operators: structured logs, Prometheus metrics, OpenTelemetry traces."""
