#!/usr/bin/env bash
# Install NVIDIA's perf_analyzer, the C++ load generator of Triton-compatible servers, on a Linux
# x86_64 machine with or without a GPU, from published packages only:
#   - the binary comes inside the tritonclient 2.40.0 wheel on PyPI (tritonclient-*.data/data/bin);
#   - it needs libcudart.so.12, taken from the nvidia-cuda-runtime-cu12 wheel on PyPI;
#   - and libb64.so.0d, Debian's libb64-0d package (installed with apt-get when run as root).
#
# usage:  bash scripts/get-perf-analyzer.sh [DEST]      (DEST: ~/.cache/perf_analyzer by default)
# The last line printed is the path of a wrapper that runs the binary with its library beside it:
#   export INFERD_PERF_ANALYZER="$(bash scripts/get-perf-analyzer.sh | tail -n 1)"
#   "$INFERD_PERF_ANALYZER" -m simple -u localhost:8000 --concurrency-range 1:4
# Running it again replaces what it installed in DEST; nothing outside DEST is written (but for
# the Debian package).
set -euo pipefail

TRITONCLIENT_VERSION=2.40.0
CUDART_VERSION=12.9.79
target=${1:-"$HOME/.cache/perf_analyzer"}
python=${PYTHON:-python3}

if ! ldconfig -p 2>/dev/null | grep -q 'libb64\.so\.0d'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing libb64-0d (Debian) for perf_analyzer" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libb64-0d >/dev/null
  else
    echo "perf_analyzer needs libb64.so.0d: install Debian's libb64-0d (sudo apt-get install" \
      "libb64-0d) and run this again" >&2
    exit 1
  fi
fi

wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
"$python" -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" \
  "tritonclient==$TRITONCLIENT_VERSION" "nvidia-cuda-runtime-cu12==$CUDART_VERSION" >&2

mkdir -p "$target"
# Take the two files out of the wheels (zip archives) by the end of their names.
"$python" - "$wheels" "$target" <<'PY'
import sys
import zipfile
from pathlib import Path

wheels, target = Path(sys.argv[1]), Path(sys.argv[2])
wanted = {"/data/bin/perf_analyzer": "perf_analyzer.bin", "/lib/libcudart.so.12": "libcudart.so.12"}
found = {}
for wheel in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            for suffix, name in wanted.items():
                if member.endswith(suffix):
                    (target / name).write_bytes(archive.read(member))
                    found[name] = member
missing = sorted(set(wanted.values()) - set(found))
if missing:
    sys.exit(f"not found in the downloaded wheels: {', '.join(missing)}")
PY
chmod 755 "$target/perf_analyzer.bin"

# The wrapper puts DEST first on the library path, so perf_analyzer finds libcudart there.
cat >"$target/perf_analyzer" <<WRAPPER
#!/usr/bin/env bash
export LD_LIBRARY_PATH="$target\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
exec "$target/perf_analyzer.bin" "\$@"
WRAPPER
chmod 755 "$target/perf_analyzer"

# A binary that cannot start (a library still missing) fails here, not in the first benchmark.
missing=$(LD_LIBRARY_PATH="$target" ldd "$target/perf_analyzer.bin" 2>/dev/null | grep 'not found' || true)
if [ -n "$missing" ]; then
  echo "perf_analyzer is installed in $target but cannot start; missing libraries:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "$target/perf_analyzer"
