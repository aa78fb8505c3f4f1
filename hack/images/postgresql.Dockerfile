# PostgreSQL for the scenarios whose service has dependencies = ["postgresql"]: Debian's
# server, non-root (uid 10001), its cluster made at start in /var/lib/sreforge-pg (an
# emptyDir in the pod: a database that starts empty, as locally), trust authentication
# for the pod network (the Incident's NetworkPolicy lets only the target reach it), the
# socket in /tmp. hack/images.sh builds it on its debootstrap base as
# sreforge/postgresql:15; the context is unused.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends postgresql \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 sreforge \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin sreforge \
 && ln -s "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)" /usr/local/lib/pgbin
ENV PGDATA=/var/lib/sreforge-pg/data
USER 10001:10001
WORKDIR /tmp
EXPOSE 5432
# initdb (user postgres, trust from any address), then the server in the foreground: no fsync (a test
# database, thrown away with the pod), listening on every address, socket in /tmp
CMD ["sh", "-c", "set -e; if [ ! -s \"$PGDATA/PG_VERSION\" ]; then /usr/local/lib/pgbin/initdb -D \"$PGDATA\" -U postgres --auth=trust --no-sync >/dev/null; echo 'host all all 0.0.0.0/0 trust' >>\"$PGDATA/pg_hba.conf\"; fi; exec /usr/local/lib/pgbin/postgres -D \"$PGDATA\" -c listen_addresses='*' -c unix_socket_directories=/tmp -c fsync=off -c synchronous_commit=off -c full_page_writes=off"]
