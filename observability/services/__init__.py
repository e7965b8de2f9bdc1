"""Observability use cases: collect GPU use, flag idle jobs, right-size, explain (hints), export metrics."""
