"""The capture sink: copies of production requests, mirrored by the balancer, sampled and kept."""
