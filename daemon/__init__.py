"""k25-ctl: the control plane of a GPU inference host."""

__version__ = "0.1.0"
