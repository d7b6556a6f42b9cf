"""The run's tables: raw ONNX Runtime (grid and cross-check), the canned baseline's ratios and
every server cell, from the cells of one run (``run.Cell``); no measuring here."""

from __future__ import annotations

from typing import Any

import baseline


def _raw_best(cell: Any) -> float:
    """A raw throughput point's figure for the limit: the better of the grid and its
    cross-check (disturbances only ever lower a figure)."""
    check = cell.extra.get("check") or {}
    return max(cell.throughput or 0.0, check.get("throughput") or 0.0)


def limits(cells: list[Any], model: str) -> dict[str, Any]:
    raw = [c for c in cells if c.model == model and c.server == "onnxruntime"]
    lat = [c for c in raw if c.extra.get("kind") == "latency"]
    thr = [c for c in raw if c.extra.get("kind") == "throughput"]
    best_lat = min(lat, key=lambda c: c.p50_us or 1e18)
    best_thr = max(thr, key=_raw_best)
    by_batch: dict[int, float] = {}
    for c in thr:
        b = c.extra["batch"]
        by_batch[b] = max(by_batch.get(b, 0.0), _raw_best(c))
    return {
        "p50_us": best_lat.p50_us,
        "p99_us": best_lat.p99_us,
        "latency_layout": best_lat.batching,
        "throughput": _raw_best(best_thr),
        "throughput_layout": best_thr.batching,
        "throughput_batch": best_thr.extra["batch"],
        "throughput_by_batch": by_batch,
    }


def ms(us: float | None) -> str:
    return "—" if us is None else f"{us / 1e3:.2f}"


def _raw_pair(cell: Any) -> str:
    check = (cell.extra.get("check") or {}).get("throughput")
    text = f"{cell.throughput or 0:.0f} / " + ("—" if check is None else f"{check:.0f}")
    return text + (" !" if cell.note else "")


def tables(cells: list[Any], model_names: list[str]) -> str:
    out: list[str] = []
    concurrency = sorted({c.concurrency for c in cells if c.server != "onnxruntime"}) or [1]
    for model in model_names:
        if not any(c.model == model for c in cells):
            continue
        lim = limits(cells, model)
        out.append(f"### {model}\n")
        out.append(
            f"Raw ONNX Runtime (the limit): batch-1 p50 {ms(lim['p50_us'])} ms, p99 "
            f"{ms(lim['p99_us'])} ms ({lim['latency_layout']}); best throughput "
            f"{lim['throughput']:.1f}/s ({lim['throughput_layout']}, batch "
            f"{lim['throughput_batch']}).\n"
        )
        grid = [c for c in cells if c.model == model and c.extra.get("kind") == "throughput"]
        layouts = sorted({c.batching for c in grid})
        batches = sorted({c.extra["batch"] for c in grid})
        out.append(
            "| raw ORT throughput (inferences/s): grid / cross-check | "
            + " | ".join(f"batch {b}" for b in batches)
            + " |"
        )
        out.append("|---|" + "---|" * len(batches))
        for layout in layouts:
            row = {c.extra["batch"]: _raw_pair(c) for c in grid if c.batching == layout}
            out.append(f"| {layout} | " + " | ".join(row.get(b, "—") for b in batches) + " |")
        out.append("")
        out.append(
            "Grid: in the bench process, the best of several windows per point; cross-check: a "
            "plain `session.run` loop in a fresh process. The limit is the better of the two; "
            "`!` marks a point where they differ by more than 15 % or other processes took CPU."
        )
        out.append("")
        flagged = [c for c in grid if c.note]
        for c in flagged:
            out.append(f"- {c.batching}, batch {c.extra['batch']}: {c.note}")
        if flagged:
            out.append("")
        out += baseline.summary(cells, model, min(concurrency), max(concurrency))
        out += _server_table([c for c in cells if c.model == model], lim)
        out.append("")
    return "\n".join(out)


def _server_table(cells: list[Any], lim: dict[str, Any]) -> list[str]:
    """One model's server cells; the ratio-to-canned columns only when the baseline ran."""
    canned = baseline.canned_cells(cells, cells[0].model) if cells else {}
    heads = ["server", "batching", "client", "conc", "infer/s", "p50 ms", "p99 ms"]
    heads += ["thr / ORT best", "p50 / ORT b1"]
    heads += ["thr / canned", "p50 / canned"] if canned else []
    heads += ["avg batch", "load1", "others (cores)", "note"]
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for c in cells:
        if c.server == "onnxruntime":
            continue
        row = [c.server, c.batching, c.client, str(c.concurrency)]
        row += ["—" if c.throughput is None else f"{c.throughput:.1f}", ms(c.p50_us), ms(c.p99_us)]
        row.append("—" if c.throughput is None else f"{c.throughput / lim['throughput']:.2f}")
        row.append("—" if c.p50_us is None else f"{c.p50_us / lim['p50_us']:.1f}")
        row += list(baseline.cell_ratios(c, canned)) if canned else []
        row += [str(c.extra.get(k, "")) for k in ("avg_batch", "load1", "others_cores")]
        out.append("| " + " | ".join([*row, c.note]) + " |")
    return out
