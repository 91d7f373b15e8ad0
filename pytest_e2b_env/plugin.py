"""pytest hooks of pytest-e2b-env (being built)."""
