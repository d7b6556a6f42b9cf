#!/usr/bin/env bash
# The GPU machine's check of inferd: the GPU tests, then the measurements of bench/device_bench.py
# (TorchScript CNN on KIND_GPU vs the CPUs vs raw PyTorch; a ResNet-18-shaped CNN on KIND_GPU with
# --frontends 1 and 8 vs raw PyTorch, with the GPU gauges; the small MLP and fraud_xgboost at c=64
# with --frontends 1, 2, 4, 8 and with 1, 4 and 8 CPU instances). Writes into $OUT (partial results too, when a step fails):
#   device_check.json, device_check.md   the figures
#   pytest_gpu.log, pytest_unit.log      the tests' output
#   device_check.log                     this script's own output
#
# Before the run, here (with network), fetch the wheels the machine lacks into .whl/:
#   bash bench/device_wheels.sh
# (tritonclient 2.73.0, grpcio 1.85.3, protobuf 6.33.6, python-rapidjson 1.25, uvicorn 0.54.0,
#  httptools 0.9.0, orjson 3.13.0, pytest-asyncio 1.5.0, xgboost-cpu 3.2.0, onnxmltools 1.16.0:
#  each `python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12
#  --implementation cp --platform manylinux_2_28_x86_64 ... -d .whl NAME==VERSION`; about 16 MB)
#
# The run (the device tool): about 6 minutes, at most 8 (every step has its own timeout):
#   run(command="bash bench/device_check.sh", carry=[".whl"], timeout_s=540)
#
# Here, without a GPU (skips the GPU parts; a temp folder stands in for $OUT):
#   DEVICE_CHECK_CPU_ONLY=1 OUT=$(mktemp -d) PYTHON=.venv/bin/python bash bench/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/device_check.log") 2>&1
PYTHON=${PYTHON:-python3}
CPU_ONLY=${DEVICE_CHECK_CPU_ONLY:-0}
export PYTHONUNBUFFERED=1
echo "device check: $(date -u +%FT%TZ) OUT=$OUT cpu_only=$CPU_ONLY"

# 1. install: the carried wheels into /tmp/site, inferd itself from src/ (no build)
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1 && [ "$CPU_ONLY" != 1 ]; then
  timeout 45 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/site .whl/*.whl || echo "wheel install failed (rc $?)"
  export PYTHONPATH="/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
timeout 30 "$PYTHON" -c "import inferd, tritonclient.grpc, httptools, orjson; print('inferd', inferd.__version__)" \
  || echo "inferd does not import: the steps below will fail"
timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"

# 2. the GPU tests, and the unit tests of the device rules (the no-GPU ones skip there)
tests_summary="not run"
if [ "$CPU_ONLY" != 1 ]; then
  timeout 120 "$PYTHON" -m pytest -p no:randomly -p no:cacheprovider -q -m gpu tests/gpu \
    -W default --timeout 120 -rs >"$OUT/pytest_gpu.log" 2>&1
  echo "pytest -m gpu: rc $?"
  tests_summary=$(tail -n 1 "$OUT/pytest_gpu.log")
fi
timeout 45 "$PYTHON" -m pytest -p no:randomly -p no:cacheprovider -q \
  tests/unit/test_gpu_devices.py tests/gpu/test_without_gpu.py -W default --timeout 60 -rs \
  >"$OUT/pytest_unit.log" 2>&1
echo "device rule tests: rc $? ($(tail -n 1 "$OUT/pytest_unit.log"))"

# 3. the measurements (each step writes device_check.json / .md as it ends)
flags=()
[ "$CPU_ONLY" = 1 ] && flags+=(--cpu-only)
timeout 330 "$PYTHON" bench/device_bench.py "$OUT" "${flags[@]}" --tests "$tests_summary" \
  ${DEVICE_CHECK_COUNTS:+--counts "$DEVICE_CHECK_COUNTS"} \
  ${DEVICE_CHECK_FRONTENDS:+--frontends "$DEVICE_CHECK_FRONTENDS"}
echo "measurements: rc $?"
cat "$OUT/device_check.md" 2>/dev/null
echo "device check done: $(date -u +%FT%TZ)"
