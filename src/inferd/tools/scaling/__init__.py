"""``inferd plan``: how a deployment of inferd replicas scales under Kubernetes'
HorizontalPodAutoscaler, simulated one second at a time from one replica's measured capacity
curve and a traffic trace.

Pure modules: :mod:`~inferd.tools.scaling.hpa` (the controller's rule),
:mod:`~inferd.tools.scaling.capacity` (the curve), :mod:`~inferd.tools.scaling.traffic`
(traces), :mod:`~inferd.tools.scaling.replica` (one pod's queue and metrics),
:mod:`~inferd.tools.scaling.latency` (histograms), :mod:`~inferd.tools.scaling.report`;
the loop: :mod:`~inferd.tools.scaling.simulate` and :mod:`~inferd.tools.scaling.sweep`.
:mod:`~inferd.tools.scaling.model_cache` sizes pods for models loaded on demand within a memory
budget (``inferd plan --models``).
"""
