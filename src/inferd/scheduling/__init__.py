"""Per-model scheduling: the pure policies, queues and the thin drivers that run them."""
