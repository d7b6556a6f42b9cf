#!/usr/bin/env sh
# Classify one handwritten digit with curl and the KServe v2 JSON protocol.
#
#   inferd serve --model-repository examples/models      # in another terminal
#   sh examples/clients/digits_curl.sh [--url localhost:8000]
#
# The 64 numbers below are image #0 of the held-out quarter of scikit-learn's digits data set:
# an 8x8 picture of a "2", pixel intensities 0..16, laid out one image row per line. The
# request asks for two outputs: the predicted `label`, and `probabilities` reduced by the
# classification extension to the three most likely digits, each as "probability:index:label".
#
# Expected answer (probabilities may differ in the last digits):
#   label [2]; probabilities ["0.688531:2:2", "0.215460:3:3", "0.091120:0:0"]
# Pipe it through `python -m json.tool` or `jq` to read it more comfortably.
set -eu

URL=localhost:8000
while [ $# -gt 0 ]; do
  case "$1" in
    --url) URL="$2"; shift 2 ;;
    --url=*) URL="${1#--url=}"; shift ;;
    *) echo "usage: $0 [--url HOST:PORT]" >&2; exit 2 ;;
  esac
done
case "$URL" in
  http://* | https://*) ;;
  *) URL="http://$URL" ;;
esac

curl --silent --show-error --fail-with-body \
  -H 'Content-Type: application/json' \
  "$URL/v2/models/digits/infer" \
  --data-binary @- <<'JSON'
{
  "id": "digits-curl-example",
  "inputs": [
    {
      "name": "input",
      "datatype": "FP32",
      "shape": [1, 64],
      "data": [
         0,  0,  7, 16, 14,  3,  0,  0,
         0,  0,  9, 14, 11, 15,  0,  0,
         0,  0,  1,  5,  0, 15,  5,  0,
         0,  0,  0,  0,  0, 16,  5,  0,
         0,  0,  0,  0,  3, 16,  4,  0,
         0,  0,  0,  1, 12, 14,  1,  0,
         0,  0,  5, 12, 16, 16, 14,  1,
         0,  0,  8, 16, 14, 10, 13,  3
      ]
    }
  ],
  "outputs": [
    { "name": "label" },
    { "name": "probabilities", "parameters": { "classification": 3 } }
  ]
}
JSON
echo
