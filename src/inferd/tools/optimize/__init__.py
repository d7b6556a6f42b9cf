"""``inferd optimize``: candidates built from a served model (graph optimizations, lower
precision, quantization with calibration, pruning, distillation), each measured for speed and
checked for accuracy against the baseline; the best one within the budgets is written into the
repository as a new version."""
