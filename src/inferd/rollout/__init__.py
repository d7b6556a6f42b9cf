"""Traffic policies between the versions of a model: shadow, split, bandit and canary.

The statistics are pure modules with no I/O: ``bayes`` (running reward figures and the
Bayesian comparison of two variants), ``bandit`` (Thompson sampling), ``canary`` (the staged
rollout as a pure judgement of a window of counts), ``sticky`` (stable hashing of a request key
to a variant) and ``latency`` (bounded latency windows). Importing this package imports none
of them.
"""
