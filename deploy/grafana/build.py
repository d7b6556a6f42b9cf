"""Writes inferd-dashboard.json, the Grafana dashboard of an inferd server (or a fleet of them).

    .venv/bin/python deploy/grafana/build.py            # rewrite inferd-dashboard.json
    .venv/bin/python deploy/grafana/build.py --check    # exit 1 if the file is out of date

The dashboard is generated so that every panel is built the same way (one data source
variable, the same label filters, units, legends) and laid out without gaps or overlaps; edit
dashboard_panels.py and on_demand_panels.py (the panels), not the JSON. docs/dashboards.md
describes the panels.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "inferd-dashboard.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WIDTH = 24  # Grafana's grid is 24 columns wide

# the panels live beside this script; put its folder on the path when it is loaded by file
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dashboard_panels import ROWS, M, Panel, Row, Target  # noqa: E402
from on_demand_panels import on_demand_row  # noqa: E402

ALL_ROWS = (*ROWS, on_demand_row)

# -- JSON --------------------------------------------------------------------------------------


def _thresholds(steps: list[tuple[float, str]]) -> dict[str, Any]:
    steps = steps or [(0, "green")]
    return {
        "mode": "absolute",
        "steps": [
            {"color": colour, "value": None if i == 0 else value}
            for i, (value, colour) in enumerate(steps)
        ],
    }


def _target(t: Target, ref: str, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "datasource": DATASOURCE,
        "refId": ref,
        "expr": t.expr,
        "legendFormat": t.legend or "__auto",
        "range": not t.instant,
        "instant": t.instant,
    }
    if kind == "table":
        out["format"] = "table"
    return out


def _panel_json(p: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": p.unit, "thresholds": _thresholds(p.thresholds)}
    if p.min is not None:
        defaults["min"] = p.min
    if p.max is not None:
        defaults["max"] = p.max
    options: dict[str, Any]
    if p.kind == "timeseries":
        defaults["custom"] = {
            "drawStyle": "line",
            "lineWidth": 1,
            "fillOpacity": 20 if p.stacked else 5,
            "showPoints": "never",
            "spanNulls": False,
            "stacking": {"mode": "normal" if p.stacked else "none", "group": "A"},
            "scaleDistribution": {"type": "log", "log": 10} if p.log_scale else {"type": "linear"},
            "thresholdsStyle": {"mode": "line" if p.thresholds else "off"},
        }
        defaults["color"] = {"mode": "palette-classic"}
        options = {
            "legend": {
                "showLegend": True,
                "displayMode": "table",
                "placement": "bottom",
                "calcs": ["mean", "max", "lastNotNull"],
            },
            "tooltip": {"mode": "multi", "sort": "desc"},
        }
    elif p.kind == "stat":
        defaults["color"] = {"mode": "thresholds"}
        if p.mappings:
            defaults["mappings"] = [
                {
                    "type": "value",
                    "options": {
                        value: {"text": text, "index": i}
                        for i, (value, text) in enumerate(p.mappings.items())
                    },
                }
            ]
        options = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "textMode": "auto",
        }
    else:  # table
        options = {"showHeader": True, "cellHeight": "sm", "footer": {"show": False}}
    panel: dict[str, Any] = {
        "id": panel_id,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": p.height, "w": p.width, "x": x, "y": y},
        "targets": [_target(t, chr(ord("A") + i), p.kind) for i, t in enumerate(p.targets)],
        "fieldConfig": {
            "defaults": defaults,
            "overrides": [
                {
                    "matcher": {"id": "byFrameRefID", "options": ref},
                    "properties": [
                        {"id": "custom.axisPlacement", "value": "right"},
                        {"id": "unit", "value": unit},
                    ],
                }
                for ref, unit in p.right_axis.items()
            ],
        },
        "options": options,
    }
    if p.kind == "table":
        panel["transformations"] = [
            {
                "id": "organize",
                "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}},
            }
        ]
    return panel


def _layout(rows: list[Row]) -> list[dict[str, Any]]:
    """Rows one under another; a row's panels left to right, wrapping at the grid's width."""
    panels: list[dict[str, Any]] = []
    next_id = 1
    y = 0
    for row in rows:
        header: dict[str, Any] = {
            "id": next_id,
            "type": "row",
            "title": row.title,
            "collapsed": False,
            "panels": [],
            "gridPos": {"h": 1, "w": WIDTH, "x": 0, "y": y},
        }
        if row.repeat:
            header["repeat"] = row.repeat
        panels.append(header)
        next_id += 1
        y += 1
        x, line_height = 0, 0
        for p in row.panels:
            if x + p.width > WIDTH:
                x, y, line_height = 0, y + line_height, 0
            panels.append(_panel_json(p, next_id, x, y))
            next_id += 1
            x += p.width
            line_height = max(line_height, p.height)
        y += line_height
    return panels


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,  # on time range change
        "multi": True,
        "includeAll": True,
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "options": [],
        "regex": "",
        "sort": 1,
        "hide": 0,
    }


def dashboard() -> dict[str, Any]:
    return {
        "uid": "inferd-overview",
        "title": "inferd",
        "description": "An inferd server (or several): service, per model, rollout, drift. "
        "Generated by deploy/grafana/build.py.",
        "tags": ["inferd", "inference"],
        "schemaVersion": 38,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,  # shared crosshair
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "fiscalYearStartMonth": 0,
        "liveNow": False,
        "links": [],
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                },
                {
                    "datasource": DATASOURCE,
                    "enable": True,
                    "iconColor": "red",
                    "name": "Canary rollbacks",
                    "expr": f"changes(inferd_rollout_canary_rollbacks_total{{{M}}}[2m]) > 0",
                    "titleFormat": "canary of {{model}} rolled back",
                    "step": "60s",
                },
            ]
        },
        "templating": {
            "list": [
                {
                    "type": "datasource",
                    "name": "datasource",
                    "label": "Data source",
                    "query": "prometheus",
                    "current": {},
                    "options": [],
                    "refresh": 1,
                    "regex": "",
                    "hide": 0,
                },
                _variable("instance", "Instance", "label_values(inferd_server_ready, instance)"),
                _variable(
                    "model",
                    "Model",
                    'label_values(nv_inference_request_success{instance=~"$instance"}, model)',
                ),
            ]
        },
        "panels": _layout([make() for make in ALL_ROWS]),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run {Path(__file__).name} to rewrite it")
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}: {len(dashboard()['panels'])} panels")
    return 0


if __name__ == "__main__":
    sys.exit(main())
