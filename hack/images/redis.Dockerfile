# Redis for the scenarios whose service has dependencies = ["redis"]: Debian's
# redis-server, non-root, no persistence (a cache that starts empty). hack/images.sh
# builds it on its debootstrap base as sreforge/redis:7 (no registry needed); the context
# is unused.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 sreforge \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sreforge
USER 10001:10001
WORKDIR /tmp
EXPOSE 6379
# no RDB, no AOF: nothing is written; any client on the pod network may connect
CMD ["redis-server", "--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", \
     "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""]
