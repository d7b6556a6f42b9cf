"""Drift and data-quality monitoring: reference profiles, live sketches, tests and alerts."""
