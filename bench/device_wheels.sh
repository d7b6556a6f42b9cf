#!/usr/bin/env bash
# Fetch (here, with network) the wheels that bench/device_check.sh installs on the GPU machine,
# which has no network. They land in .whl/ (git-ignored through .git/info/exclude) and travel
# with the working tree when the run names it in carry (the tree must stay under 64 MiB).
#
#   bash bench/device_wheels.sh
#
# Already on the GPU machine's image (not fetched): torch, numpy, onnx, onnxruntime (CPU),
# prometheus-client, pyyaml, ml-dtypes, h11, click, uvloop, nvidia-ml-py,
# pytest, pytest-timeout, hypothesis, httpx, scikit-learn.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
mkdir -p .whl
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
WHEELS=(
  tritonclient==2.73.0        # the tests' oracle (grpc client; the http client is not used)
  grpcio==1.85.3              # tritonclient's generated stubs need grpcio >= 1.81.1
  protobuf==6.33.6            # and protobuf 6.30+ (the image's versions are not known here)
  python-rapidjson==1.25      # tritonclient's dependency
  uvicorn==0.54.0             # inferd's HTTP edge
  httptools==0.9.0
  orjson==3.13.0
  pytest-asyncio==1.5.0       # pyproject's asyncio_mode needs it under --strict-config
  xgboost-cpu==3.2.0          # fraud_xgboost (backend fil): reads the model
  onnxmltools==1.16.0         # and converts it for its default runtime, ONNX Runtime
)
for wheel in "${WHEELS[@]}"; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d .whl "$wheel"
done
du -sh .whl
