# Prometheus laid out like prom/prometheus (what charts/sreforge's bundled Prometheus
# runs): /bin/prometheus as the entrypoint, uid/gid 65534, a default config at
# /etc/prometheus/prometheus.yml (the chart mounts its own there), the TSDB in /prometheus
# (an emptyDir in the chart), port 9090. The binary is hack/k8s-tools.sh's build, which
# hack/images.sh copies into the build context (outside the repository) as ./prometheus.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
RUN mkdir -p /etc/prometheus /prometheus \
 && printf '%s\n' 'global:' '  scrape_interval: 15s' 'scrape_configs:' \
      '  - job_name: prometheus' '    static_configs:' "      - targets: ['localhost:9090']" \
      > /etc/prometheus/prometheus.yml \
 && chown 65534:65534 /prometheus
COPY prometheus /bin/prometheus
USER 65534:65534
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
