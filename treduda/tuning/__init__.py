"""Tuning: GPU descriptions, the analytic model, the kernel walk, the search and its cache."""
