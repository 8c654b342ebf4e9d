# syntax=docker/dockerfile:1
# One image for both roles: `hookbridge api` (the default CMD) and `hookbridge worker`.
# Build: docker build -t hookbridge:0.1.0 .
# The base is pinned to a patch release; pin it further to a digest in your registry mirror
# (FROM python:3.11.13-slim-bookworm@sha256:...) once you have resolved one.

FROM python:3.11.13-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

WORKDIR /src

# The venv is the only thing the final stage takes from here. It is made without pip (and without the
# setuptools that pip's venvs bring): the image runs the service, it never installs anything.
RUN python -m venv --without-pip /opt/venv

# The runtime dependencies, exactly as pinned and hashed in requirements.lock, and the build backend as
# pinned in requirements-build.lock (`make lock` writes both from pyproject.toml). pip refuses any file
# whose hash differs, so two builds of one commit install the same bytes. Wheels only: nothing compiles.
COPY requirements.lock requirements-build.lock ./
RUN python -m venv /opt/build \
    && /opt/build/bin/pip install --no-deps --require-hashes --only-binary=:all: -r requirements-build.lock \
    && /opt/build/bin/pip --python /opt/venv/bin/python install --no-deps --require-hashes \
       --only-binary=:all: -r requirements.lock

# Then the project itself and the vendor plugins it ships as distributions of their own (LlamaParse,
# plugins/hookbridge-llamaparse, whose dependencies are hookbridge's): wheels built with that pinned
# setuptools (no build isolation, so nothing unpinned is fetched), installed without their dependencies
# (installed above). pip byte-compiles what it installs, so the read-only final image never needs to
# write .pyc files.
COPY pyproject.toml README.md ./
COPY service ./service
COPY hookbridge ./hookbridge
COPY plugins/hookbridge-llamaparse ./plugins/hookbridge-llamaparse
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . ./plugins/hookbridge-llamaparse \
    && /opt/build/bin/pip --python /opt/venv/bin/python install --no-deps --no-index \
       /wheels/hookbridge-*.whl /wheels/hookbridge_llamaparse-*.whl


FROM python:3.11.13-slim-bookworm

LABEL org.opencontainers.image.title="hookbridge" \
      org.opencontainers.image.description="Turns polling-only document-extraction vendor APIs into signed webhook callbacks" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH="/opt/venv/bin:${PATH}"

# A numeric, non-root user, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
RUN groupadd --system --gid 10001 hookbridge \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin hookbridge

COPY --from=builder /opt/venv /opt/venv

# Nothing is written to the working directory; /tmp is the only writable path in the chart.
WORKDIR /app
USER 10001:10001

# 8080: the API (and its /healthz, /readyz, /metrics); 9090: the worker's /healthz and /metrics.
EXPOSE 8080 9090

ENTRYPOINT ["hookbridge"]
CMD ["api", "--host", "0.0.0.0", "--port", "8080"]
