"""``inferd perf``: a load generator that speaks to any v2 server like perf_analyzer does."""
