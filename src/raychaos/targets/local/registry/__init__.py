"""targets/local/registry."""
