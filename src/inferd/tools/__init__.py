"""Tools built around serving: the load generator (``perf``) and the configuration analyzer."""
