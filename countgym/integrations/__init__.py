"""Adapters to the libraries people train and evaluate with (TRL, verifiers, Inspect AI), one
import each, each behind its own extra; a missing library gives an error naming the extra."""
