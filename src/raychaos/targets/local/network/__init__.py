"""targets/local/network."""
