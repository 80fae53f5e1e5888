"""Adapters to the libraries people train and evaluate with (each behind its own extra)."""
