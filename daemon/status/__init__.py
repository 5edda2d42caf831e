"""What the host looks like now, for reads: the host sampler (GPUs, stray processes), the inventory
(profiles and units) and the Prometheus exporter."""
