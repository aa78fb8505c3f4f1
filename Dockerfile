# syntax=docker/dockerfile:1
# The SREForge operator image: kopf runs sreforge.handlers.
#   docker build -t ghcr.io/sreforge/operator:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN pip install --no-cache-dir --upgrade pip \
 && pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
# git: the CI gate applies patches with `git apply`
RUN apt-get update \
 && apt-get install -y --no-install-recommends git \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 sreforge \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sreforge
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# scenarios are data the operator reads (rules, briefs, regression patches)
COPY --chown=root:root scenarios/ /opt/sreforge/scenarios/
WORKDIR /opt/sreforge
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["kopf", "run", "--standalone", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz", "-m", "sreforge.handlers"]
