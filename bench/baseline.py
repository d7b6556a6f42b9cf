"""Ratios of every server's figures to the canned-response baseline of the same run.

The canned server (bench/servers/canned.py) answers from precomputed bytes on inferd's own
HTTP and gRPC stacks, so its figures are what those stacks cost on this machine with no
server work at all. Pure functions over the run's cells (anything with the attributes of
``run.Cell``); no measuring here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

CANNED = "canned"
HTTP_BINARY = "perf_analyzer/http-binary"
GRPC = "perf_analyzer/grpc"


def canned_cells(cells: Iterable[Any], model: str) -> dict[tuple[str, int], Any]:
    """The baseline's measured cells by (client, concurrency)."""
    return {
        (c.client, c.concurrency): c
        for c in cells
        if c.model == model and c.server == CANNED and c.throughput is not None
    }


def _ratio(a: float | None, b: float | None, digits: int = 2) -> str:
    return "—" if a is None or not b else f"{a / b:.{digits}f}"


def cell_ratios(cell: Any, canned: dict[tuple[str, int], Any]) -> tuple[str, str]:
    """(throughput / canned, p50 / canned) for the same client and concurrency."""
    base = canned.get((cell.client, cell.concurrency))
    if base is None or cell.server == CANNED:
        return "—", "—"
    return _ratio(cell.throughput, base.throughput), _ratio(cell.p50_us, base.p50_us)


def _find(cells: list[Any], server: str, variant: str, client: str, c: int) -> Any | None:
    for cell in cells:
        key = (cell.server, cell.batching, cell.client, cell.concurrency)
        if key == (server, variant, client, c) and cell.throughput is not None:
            return cell
    return None


def _with_ratio(cell: Any | None, base: Any | None, attr: str) -> str:
    if cell is None:
        return "—"
    value = getattr(cell, attr)
    text = f"{value / 1e3:.2f}" if attr == "p50_us" else f"{value:.0f}"
    return text if base is None else f"{text} ({_ratio(value, getattr(base, attr))}x)"


def _between(a: Any | None, b: Any | None, attr: str) -> str:
    return "—" if a is None or b is None else _ratio(getattr(a, attr), getattr(b, attr))


def summary(cells: list[Any], model: str, low: int, high: int) -> list[str]:
    """Markdown: per server variant, the c=``low`` p50 and the c=``high`` throughput of HTTP
    binary and gRPC, as ratios to the baseline and between the two protocols."""
    mine = [c for c in cells if c.model == model]
    if not canned_cells(mine, model):
        return []
    variants = list(
        dict.fromkeys((c.server, c.batching) for c in mine if c.server in (CANNED, "inferd"))
    )
    out = [
        f"Against the canned-response baseline (inferd's HTTP and gRPC stacks answering "
        f"precomputed bytes; same clients, same run). p50 at c={low}, throughput at c={high}:",
        "",
        "| server | batching | HTTP bin p50 ms (/ canned) | gRPC p50 ms (/ canned) | "
        f"gRPC p50 / HTTP p50 (c={low}) | HTTP bin infer/s (/ canned) | "
        f"gRPC infer/s (/ canned) | gRPC / HTTP bin infer/s (c={high}) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for server, variant in variants:

        def at(client: str, c: int, srv: str = server, var: str = variant) -> Any | None:
            return _find(mine, srv, var, client, c)

        def base(client: str, c: int, srv: str = server) -> Any | None:
            return None if srv == CANNED else _find(mine, CANNED, CANNED, client, c)

        p50s = [_with_ratio(at(k, low), base(k, low), "p50_us") for k in (HTTP_BINARY, GRPC)]
        thrs = [_with_ratio(at(k, high), base(k, high), "throughput") for k in (HTTP_BINARY, GRPC)]
        p50_between = _between(at(GRPC, low), at(HTTP_BINARY, low), "p50_us")
        thr_between = _between(at(GRPC, high), at(HTTP_BINARY, high), "throughput")
        out.append(
            f"| {server} | {variant} | {p50s[0]} | {p50s[1]} | {p50_between} | "
            f"{thrs[0]} | {thrs[1]} | {thr_between} |"
        )
    out.append("")
    return out
