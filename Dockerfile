# The raychaos image: game days that run inside the cluster (`raychaos schedule` makes the
# CronJob and the least-privilege RBAC that run it). Build from the repository root:
#   docker build -t raychaos:0.1.0 .
# The requirements below are pyproject.toml's [project] dependencies, pinned the same way
# (tests/unit/test_dockerfile.py fails when the two differ); Ray is pinned to 2.60.0, the version
# of the clusters it tests.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

RUN pip install \
        "ray[default,serve]==2.60.0" \
        "chaostoolkit-lib>=1.44,<1.45" \
        "chaostoolkit>=1.19,<1.20" \
        "kubernetes>=37,<38" \
        "locust>=2.40" \
        "pyyaml>=6" \
        "numpy>=1.26" \
        "matplotlib>=3.8" \
        "plotly>=5.22" \
        "psutil>=5.9" \
        "scipy>=1.11" \
        "websocket-client>=1.8"

# The project, with its catalog (loads, experiments, SLO profiles) as package data and as /app,
# where the CronJob's working directory and results PVC are.
WORKDIR /app
COPY pyproject.toml README.md CHANGELOG.md ./
COPY src ./src
COPY loads ./loads
COPY experiments ./experiments
COPY probes ./probes
RUN pip install --no-deps . \
    && useradd --create-home --uid 10001 --user-group raychaos \
    && mkdir -p /app/results && chown raychaos:raychaos /app/results

USER 10001:10001
ENTRYPOINT ["raychaos"]
CMD ["--help"]
