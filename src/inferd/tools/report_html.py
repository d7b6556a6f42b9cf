"""The frame of a tool's ``report.html``, shared by ``inferd analyze`` and ``inferd optimize``:
one page that opens offline, the house style for its tables, and plotly charts of which the first
carries plotly.js itself and the others use it."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["HtmlPage"]

_STYLE = """
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #f3f3f3; }} {left} {{ text-align: left; }}
{rows}
.bad {{ color: #b00020; }} .good {{ color: #1b7f3b; }}
"""


class HtmlPage:
    """A page titled ``title``: add HTML fragments and charts in order, then :meth:`render`.

    ``left_cells`` is the CSS selector of the table cells aligned left (every other cell is
    aligned right); ``row_styles`` the CSS rules of the marked rows (``tr.best { ... }``)."""

    def __init__(self, title: str, *, left_cells: str, row_styles: str) -> None:
        style = _STYLE.format(left=left_cells, rows=row_styles)
        self._parts = [
            "<!DOCTYPE html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(title)}</title><style>{style}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
        ]
        self._plotly_in = False

    def add(self, *fragments: str) -> None:
        """HTML fragments, as they are (escape what they quote)."""
        self._parts += fragments

    def chart(self, figure: Any) -> None:
        """A plotly figure (None: nothing); the first carries plotly.js itself."""
        if figure is None:
            return
        self._parts.append(figure.to_html(full_html=False, include_plotlyjs=not self._plotly_in))
        self._plotly_in = True

    def render(self) -> str:
        return "\n".join([*self._parts, "</body></html>"])
