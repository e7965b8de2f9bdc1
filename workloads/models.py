"""Data sources and department secrets (see the package docstring)."""
