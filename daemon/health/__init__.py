"""The GPUs' health: what the driver reports (Xid lines of the kernel log), and NVIDIA's catalog of what
each Xid means and what to do about it."""
