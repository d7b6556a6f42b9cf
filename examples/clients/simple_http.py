#!/usr/bin/env python
"""Send two vectors to a ``simple*`` example model over HTTP and check the sum and difference.

    inferd serve --model-repository examples/models      # in another terminal
    python examples/clients/simple_http.py                         # int32
    python examples/clients/simple_http.py --model simple_int8     # int8, wraps past 127
    python examples/clients/simple_http.py --model simple_string   # decimal numbers as text

Needs ``pip install 'tritonclient[http]'``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import tritonclient.http as httpclient

# model name -> (v2 datatype on the wire, numpy dtype used to build and check the values)
MODELS = {
    "simple": ("INT32", np.int32),
    "simple_int8": ("INT8", np.int8),
    "simple_string": ("BYTES", np.int32),  # sent as decimal text, computed as int32
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="localhost:8000", help="server HTTP address")
    parser.add_argument("--model", default="simple", choices=sorted(MODELS))
    parser.add_argument("--verbose", action="store_true", help="print the HTTP exchange")
    args = parser.parse_args()

    datatype, dtype = MODELS[args.model]
    # one batch row of 16 values each: 0, 1, ..., 15 and sixteen ones
    first = np.arange(16, dtype=dtype).reshape(1, 16)
    second = np.ones((1, 16), dtype=dtype)
    if args.model == "simple_int8":
        first[0, -1] = 127  # 127 + 1 does not fit in int8: the model wraps to -128
    want_sum = (first.astype(np.int32) + second).astype(dtype)
    want_diff = (first.astype(np.int32) - second).astype(dtype)

    def wire(values: np.ndarray) -> np.ndarray:
        if datatype == "BYTES":
            return np.array([[str(v).encode() for v in row] for row in values], dtype=object)
        return values

    client = httpclient.InferenceServerClient(url=args.url, verbose=args.verbose)
    inputs = []
    for name, values in (("INPUT0", first), ("INPUT1", second)):
        tensor = httpclient.InferInput(name, [1, 16], datatype)
        tensor.set_data_from_numpy(wire(values))
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    result = client.infer(args.model, inputs, outputs=outputs)
    client.close()

    def values(name: str) -> np.ndarray:
        got = result.as_numpy(name)
        if datatype == "BYTES":  # decimal text back to numbers
            return np.array([[int(v) for v in row] for row in got], dtype=dtype)
        return got

    got_sum, got_diff = values("OUTPUT0"), values("OUTPUT1")
    ok = True
    for i in range(16):
        a, b, s, d = int(first[0, i]), int(second[0, i]), int(got_sum[0, i]), int(got_diff[0, i])
        mark = "" if (s, d) == (want_sum[0, i], want_diff[0, i]) else "   <-- unexpected"
        ok = ok and not mark
        print(f"{a:4} + {b} = {s:4}    {a:4} - {b} = {d:4}{mark}")
    print("PASS" if ok else "FAIL: the server returned unexpected values")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
