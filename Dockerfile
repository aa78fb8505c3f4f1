# The SREForge operator image: kopf runs sreforge.handlers. The same image runs the
# built-in load generator (python -m sreforge.load) and the patch init container
# (python -m sreforge.runtime.kube apply-patch). Build from the repository root (BuildKit):
#   docker build -t ghcr.io/sreforge/operator:0.1.0 .
# BASE_IMAGE: any Debian-like image with python3 >= 3.11 and its venv module (the
# default, or hack/images.sh's debootstrap base); the packages go to /opt/venv.
# Layers, first to last: git and the venv, the dependencies (from pyproject.toml), the
# sreforge package, the scenarios: a changed scenario rebuilds only the last one.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
RUN python3 -m venv /opt/build
WORKDIR /src
COPY pyproject.toml README.md ./
# the dependencies alone, so that their layer outlives changes to the code
RUN /opt/build/bin/python -c "import tomllib; \
print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
    > /requirements.txt
COPY operator/ operator/
RUN /opt/build/bin/pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM ${BASE_IMAGE}
# git: the CI gate applies patches with `git apply`
RUN command -v git >/dev/null || { apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/*; } \
 && groupadd --gid 10001 sreforge \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sreforge \
 && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN --mount=type=bind,from=build,source=/requirements.txt,target=/tmp/requirements.txt \
    pip install --no-cache-dir -r /tmp/requirements.txt
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-deps /wheels/*.whl
# scenarios are data the operator reads (rules, briefs, regression patches)
COPY --chown=root:root scenarios/ /opt/sreforge/scenarios/
WORKDIR /opt/sreforge
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["kopf", "run", "--standalone", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz", "-m", "sreforge.handlers"]
