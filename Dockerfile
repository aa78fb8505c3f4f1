# Two images from one Dockerfile. Build from the repository root (BuildKit):
#   docker build -t ghcr.io/sreforge/operator:0.1.0 .                 (the last stage)
#   docker build --target runner -t ghcr.io/sreforge/runner:0.1.0 .
# runner: the sreforge package and git, NO scenarios: what the operator runs in tenant
#   namespaces (the built-in load generator and prober, python -m sreforge.load; the
#   patch init containers, python -m sreforge.runtime.kube apply-patch). Nothing a pod
#   there can read tells a root cause, a regression, a fix or a decoy.
# operator: the runner plus the scenarios the operator reads (scenario.toml, rules,
#   brief, root cause, regression; never fixes/ or decoys/) and the services' source;
#   kopf runs sreforge.handlers in the operator's own namespace only.
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

FROM ${BASE_IMAGE} AS runner
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
WORKDIR /opt/sreforge
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
ENTRYPOINT ["python", "-m", "sreforge.load"]

# the scenarios without what only graders and tests use (fixes, decoys)
FROM ${BASE_IMAGE} AS scenarios
COPY scenarios/ /scenarios/
RUN rm -rf /scenarios/*/fixes /scenarios/*/decoys

FROM runner AS operator
# scenarios are data the operator reads (rules, briefs, root causes, regression patches)
COPY --from=scenarios --chown=root:root /scenarios/ /opt/sreforge/scenarios/
# the services' source trees: each Incident's MCP tools show its deploy history and a
# read-only workspace, made from them and the scenario's history (runtime/kube/mcp.py)
COPY --chown=root:root substrate/ /opt/sreforge/substrate/
EXPOSE 8090
EXPOSE 8080
ENTRYPOINT ["kopf", "run", "--standalone", "--all-namespaces", "--liveness=http://0.0.0.0:8080/healthz", "-m", "sreforge.handlers"]
