"""The only code that touches the machine: systemd over D-Bus, the journal, processes, /dev/shm, GPUs.
Each piece is a small typed Protocol with its real implementation beside it."""
