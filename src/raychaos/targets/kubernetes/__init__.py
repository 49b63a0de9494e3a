"""targets/kubernetes."""
