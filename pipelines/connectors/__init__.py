"""Connectors: fetch from the systems a platform team already runs and land files; never write the warehouse.

`http.py` is the HTTP plumbing they share; `scrape.py` scrapes dcgm-exporter endpoints,
`prometheus.py` backfills DCGM history from Prometheus, `slurm.py` lands Slurm accounting and
squeue snapshots, `kubernetes.py` connects to the API server, `kueue.py` lands Kueue Workloads,
`k8s_audit.py` serves the audit webhook, `allocator.py` is the allocator's HTTP client.
"""
