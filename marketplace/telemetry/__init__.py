"""What operators see of the running service: logs and metrics."""

# prometheus-client's variable naming the folder where worker processes keep their metrics.
MULTIPROCESS_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
# What `serve --workers N` tells its workers: N.
WORKERS_VARIABLE = "MARKETPLACE_SERVE_WORKERS"
