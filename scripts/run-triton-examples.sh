#!/usr/bin/env bash
# Run every *.py in a folder (e.g. Triton's own client example scripts, fetched separately)
# against a running server and print PASS or FAIL per script. Nothing is downloaded.
#
#   scripts/run-triton-examples.sh DIR [HTTP_URL] [GRPC_URL]
#
# A script whose name contains "grpc" gets `-u GRPC_URL` (default localhost:8001), every other
# one `-u HTTP_URL` (default localhost:8000). PASS means exit status 0 within $TIMEOUT_S seconds
# (default 60). Set PYTHON to choose the interpreter (default: python3). The exit status is the
# number of failed scripts (capped at 255). Logs go to $LOG_DIR (default: DIR/logs).
set -u

dir=${1:?usage: $0 DIR [HTTP_URL] [GRPC_URL]}
http_url=${2:-localhost:8000}
grpc_url=${3:-localhost:8001}
python=${PYTHON:-python3}
timeout_s=${TIMEOUT_S:-60}
log_dir=${LOG_DIR:-$dir/logs}
mkdir -p "$log_dir"

failed=0
total=0
for script in "$dir"/*.py; do
    [ -e "$script" ] || continue
    name=$(basename "$script" .py)
    case "$name" in
        *grpc*) url=$grpc_url ;;
        *) url=$http_url ;;
    esac
    total=$((total + 1))
    log="$log_dir/$name.log"
    if timeout "$timeout_s" "$python" "$script" -u "$url" >"$log" 2>&1; then
        printf 'PASS  %s\n' "$name"
    else
        status=$?
        failed=$((failed + 1))
        printf 'FAIL  %s (exit %d): %s\n' "$name" "$status" "$(tail -n 1 "$log" | cut -c1-160)"
    fi
done
printf '%d of %d passed\n' "$((total - failed))" "$total"
exit $((failed > 255 ? 255 : failed))
