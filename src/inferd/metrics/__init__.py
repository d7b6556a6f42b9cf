"""Prometheus collectors that read components' state at scrape time, on an injected registry."""
