"""The engines as installed on this host: each profile's engine version (its package's metadata, read by
the profile's own interpreter), the flags its parser accepts (its own help), cached per version, and each
profile checked against them at load, reload and check-profiles."""
