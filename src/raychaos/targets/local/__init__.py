"""targets/local."""
