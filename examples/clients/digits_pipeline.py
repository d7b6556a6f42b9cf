#!/usr/bin/env python
"""Send a raw 8x8 image to the ``digits_pipeline`` ensemble and print the digit's name.

The server runs three models for the one request: ``digits_preprocess`` rescales the 0-255
pixels, ``digits`` classifies them, ``digits_postprocess`` names the most probable digit. The
image comes from the held-out quarter of scikit-learn's digits data set, scaled to 0-255 as a
camera would give it.

    inferd serve --model-repository examples/models      # in another terminal
    python examples/clients/digits_pipeline.py --index 7
    python examples/clients/digits_pipeline.py --protocol grpc --batch 4

Needs ``pip install 'inferd[examples]'`` (tritonclient[http,grpc] and scikit-learn).
"""

from __future__ import annotations

import argparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

NAMES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def held_out_images(start: int, count: int) -> tuple[np.ndarray, list[int]]:
    """Held-out images ``start``.. as a UINT8 [count, 8, 8] batch (0-255), and their digits."""
    images, digits = load_digits(return_X_y=True)
    _, test_images, _, test_digits = train_test_split(
        images, digits, test_size=0.25, random_state=0, stratify=digits
    )
    chosen = test_images[start : start + count]
    raw = np.round(chosen * (255.0 / 16.0)).astype(np.uint8).reshape(-1, 8, 8)
    return raw, [int(d) for d in test_digits[start : start + count]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument(
        "--url", help="server address (default: localhost:8000 for HTTP, localhost:8001 for gRPC)"
    )
    parser.add_argument("--model", default="digits_pipeline", help="ensemble name")
    parser.add_argument("--index", type=int, default=0, help="first held-out image (0-449)")
    parser.add_argument("--batch", type=int, default=1, help="images in the request (1-32)")
    args = parser.parse_args()
    client_lib = grpcclient if args.protocol == "grpc" else httpclient
    url = args.url or ("localhost:8001" if args.protocol == "grpc" else "localhost:8000")

    images, truths = held_out_images(args.index, args.batch)
    client = client_lib.InferenceServerClient(url=url)
    image = client_lib.InferInput("image", list(images.shape), "UINT8")
    image.set_data_from_numpy(images)
    outputs = [client_lib.InferRequestedOutput(n) for n in ("digit", "confidence")]
    result = client.infer(args.model, [image], outputs=outputs)

    digits = result.as_numpy("digit")
    confidence = result.as_numpy("confidence")
    wrong = 0
    for row, truth in enumerate(truths):
        name = digits[row, 0].decode()
        mark = "ok" if name == NAMES[truth] else "WRONG"
        wrong += name != NAMES[truth]
        print(
            f"image #{args.index + row}: {name} ({confidence[row, 0]:.3f}), "
            f"truly {NAMES[truth]}: {mark}"
        )
    if wrong:
        raise SystemExit(f"{wrong} of {len(truths)} images misread")


if __name__ == "__main__":
    main()
