"""What only ``hookbridge dev``, ``hookbridge demo``, the tests and the benchmarks use: the one-process
stack, the demo, and a private redis-server. The API and the worker never import this package, and the
image leaves it out (.dockerignore)."""
