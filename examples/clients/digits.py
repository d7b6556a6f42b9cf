#!/usr/bin/env python
"""Ask the ``digits`` example model which digit an 8x8 image shows, over HTTP or gRPC.

The image comes from scikit-learn's bundled digits data set, from the quarter of it that the
model never saw while training (the same split ``python -m inferd.examples.build`` uses).

    inferd serve --model-repository examples/models      # in another terminal
    python examples/clients/digits.py --index 7
    python examples/clients/digits.py --protocol grpc --index 7

Needs ``pip install 'inferd[examples]'`` (tritonclient[http,grpc] and scikit-learn).
"""

from __future__ import annotations

import argparse

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def held_out_digit(index: int) -> tuple[np.ndarray, int]:
    """Image ``index`` of the held-out set as a float32 [1, 64] batch, and its true digit."""
    images, digits = load_digits(return_X_y=True)
    _, test_images, _, test_digits = train_test_split(
        images, digits, test_size=0.25, random_state=0, stratify=digits
    )
    image = test_images[index].astype(np.float32).reshape(1, 64)
    return image, int(test_digits[index])


def show(image: np.ndarray) -> None:
    """Draw the 8x8 image with characters, darker for higher intensities (0..16)."""
    shades = " .:-=+*#%@"
    for row in image.reshape(8, 8):
        print("    " + "".join(shades[int(v) * (len(shades) - 1) // 16] * 2 for v in row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument(
        "--url", help="server address (default: localhost:8000 for HTTP, localhost:8001 for gRPC)"
    )
    parser.add_argument("--model", default="digits", help="model name")
    parser.add_argument("--index", type=int, default=0, help="held-out image to send (0-449)")
    parser.add_argument("--verbose", action="store_true", help="print the exchange")
    args = parser.parse_args()
    # both tritonclient modules offer the same classes: pick one, the code below is shared
    client_lib = grpcclient if args.protocol == "grpc" else httpclient
    url = args.url or ("localhost:8001" if args.protocol == "grpc" else "localhost:8000")

    image, truth = held_out_digit(args.index)
    print(f"held-out image #{args.index}:")
    show(image)

    client = client_lib.InferenceServerClient(url=url, verbose=args.verbose)

    # 1. Plain inference: the predicted label and all ten probabilities.
    pixels = client_lib.InferInput("input", list(image.shape), "FP32")
    pixels.set_data_from_numpy(image)
    result = client.infer(
        args.model,
        [pixels],
        outputs=[
            client_lib.InferRequestedOutput("label"),
            client_lib.InferRequestedOutput("probabilities"),
        ],
    )
    label = int(result.as_numpy("label")[0, 0])
    probabilities = result.as_numpy("probabilities")[0]
    verdict = "correct" if label == truth else "wrong"
    print(f"predicted {label} with probability {probabilities[label]:.4f}")
    print(f"true digit {truth} ({verdict})")

    # 2. The classification extension: the server keeps only the three most likely classes and
    #    returns each as the text "probability:index:label" (label from the model's labels.txt).
    result = client.infer(
        args.model,
        [pixels],
        outputs=[client_lib.InferRequestedOutput("probabilities", class_count=3)],
    )
    print("top 3 (classification extension):")
    for entry in result.as_numpy("probabilities")[0]:
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        value, index, name = text.split(":", 2)
        print(f"  digit {name:>2}  p={float(value):.4f}  (class index {index}, raw {text!r})")

    client.close()


if __name__ == "__main__":
    main()
