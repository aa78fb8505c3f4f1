# A third-party service under test (substrate/<name>/source.toml): the release fetched at
# setup as a pinned, checksummed sdist, never committed. hack/images.sh stages the context
# with `sreforge sources context NAME --dest DIR`:
#   tree/           the release with the deployment's overlay (deploy/)
#   requirements.txt the pinned closure, installed with --no-deps (nothing unpinned)
#   sdists          the requirements built from their sdist (one name a line)
#   dist-info/      the project's metadata (entry points), without its code
#   patches/        the scenarios' regressions (SREFORGE_PATCH=patches/<scenario>.patch)
# As locally, the code that runs is the tree under test in the working directory (/app),
# first on sys.path for `python -m`; the overlay's init containers copy it from /app.
# SREFORGE_COMMAND: the scenario's command with {host} 0.0.0.0 and {port} 8080 (a
# Deployment may give its own `command`, as tests/integration/node does).
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS runtime
RUN groupadd --gid 10001 app \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin app \
 && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements.txt sdists /opt/deps/
RUN set -e; nb=""; for n in $(cat /opt/deps/sdists); do nb="$nb --no-binary $n"; done; \
    pip install --no-cache-dir --no-deps --only-binary :all: $nb -r /opt/deps/requirements.txt
COPY dist-info/ /opt/deps/dist-info/
RUN site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
 && name="$(sed -n 's/^Name: //p' /opt/deps/dist-info/METADATA | head -n1)" \
 && version="$(sed -n 's/^Version: //p' /opt/deps/dist-info/METADATA | head -n1)" \
 && cp -R /opt/deps/dist-info "$site/$(echo "$name" | tr - _)-$version.dist-info" \
 && rm -rf /opt/deps

FROM ${BASE_IMAGE} AS source
WORKDIR /src
COPY tree/ ./
ARG SREFORGE_PATCH=""
RUN --mount=type=bind,source=.,target=/context,readonly \
    if [ -n "$SREFORGE_PATCH" ]; then \
      git apply --whitespace=nowarn -p1 "/context/$SREFORGE_PATCH"; \
    fi

FROM runtime
WORKDIR /app
COPY --from=source /src/ ./
ARG SREFORGE_COMMAND
ENV SREFORGE_COMMAND=${SREFORGE_COMMAND} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp
USER 10001:10001
EXPOSE 8080
CMD ["/bin/sh", "-c", "exec $SREFORGE_COMMAND"]
