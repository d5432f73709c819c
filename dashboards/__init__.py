"""Observability: the project's own InfluxDB, metrics from run directories (batched, spooled
when the server is away), and Grafana dashboards as code (see ``dashboards/README.md``)."""

#: Default width of the bins of per-subframe series in InfluxDB, ms (full resolution stays in
#: the run directory).
DEFAULT_BIN_MS = 10
