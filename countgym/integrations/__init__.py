"""Adapters to the libraries people train and evaluate with (TRL, Inspect AI), one import each.

Each adapter imports its library lazily and names the extra to install when it is missing.
"""
