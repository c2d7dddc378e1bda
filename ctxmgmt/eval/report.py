"""The report of an eval: a table for the terminal, JSON with a stable schema, and an SVG plot.

JSON schema ``ctxmgmt.eval/1`` (keys are only ever added)::

    {"schema": "ctxmgmt.eval/1",
     "windows": [int], "definitions": [str], "mask_last": int, "pricing": {...} | null,
     "categories": ["paths", "commands", "error_lines", "numbers"],
     "conversations": [{"id", "source", "messages", "calls"}],
     "rows": [{
        "name", "kind": "definition" | "sliding_window" | "observation_masking",
        "window", "of": the definition a sliding window is sized like (else null),
        "calls", "tokens_sent", "tokens_per_call": {"mean", "max"}, "estimated_cost",
        "reusable_prefix_share", "over_window", "invalid_requests", "refused", "trace_errors",
        "firings": {"fit", "summarizer", "clearing", "truncation", "window", "other"},
        "time_ms": {"median", "max"},
        "needed": {category: int}, "kept": {category: int},
        "kept_share": {category | "all": float | null},
        "per_conversation": [{"id", ...the same figures}],
        "per_call": [{"conversation", "call", "tokens", "reusable_prefix_tokens",
                      "estimated_cost", "over_window", "invalid", "refused", "trace_errors",
                      "fired": {kind: int}, "time_ms", "needed": {...}, "kept": {...}}]}]}

Costs are in the pricing's units per million tokens (relative prices when none is given).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from ..cache import Pricing
from .replay import ConversationLike, Row, evaluate_rows
from .specifics import CATEGORIES

__all__ = ["SCHEMA", "Report", "evaluate"]

SCHEMA = "ctxmgmt.eval/1"
_SHORT = {"paths": "paths", "commands": "cmds", "error_lines": "errors", "numbers": "ids"}
_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


@dataclass(slots=True)
class Report:
    """What :func:`ctxmgmt.evaluate` measured: one row per definition and window, and the
    baselines' rows beside them."""

    rows: list[Row]
    conversations: list[dict[str, Any]]
    windows: list[int]
    definitions: list[str]
    mask_last: int
    pricing: Pricing | None

    def row(self, name: str, window: int, kind: str = "definition", of: str | None = None) -> Row:
        """A row by its name (or, for a sliding window, the definition it is sized like)."""
        for r in self.rows:
            if r.kind == kind and r.window == window and (r.of == of if of else r.name == name):
                return r
        raise KeyError(f"no {kind} row {name!r} at window {window}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "windows": list(self.windows),
            "definitions": list(self.definitions),
            "mask_last": self.mask_last,
            "pricing": self.pricing.to_dict() if self.pricing else None,
            "categories": list(CATEGORIES),
            "conversations": list(self.conversations),
            "rows": [r.to_dict() for r in self.rows],
        }

    def table(self) -> str:
        """One line per row: the figures, and the share of needed specifics kept per category."""
        head = [
            "row",
            "window",
            "calls",
            "tokens",
            "tok/call",
            "cost",
            "reuse",
            "over",
            "invalid",
            "refused",
            "errors",
            "fit/sum/clear/trunc",
            "ms med/max",
            *(f"{_SHORT[c]} kept" for c in CATEGORIES),
        ]
        lines = [head]
        for r in self.rows:
            t = r.totals.to_dict()
            f = t["firings"]
            name = r.name if r.of is None else f"{r.name} (= {r.of})"
            shares = [
                "-"
                if t["kept_share"][c] is None
                else f"{t['kept_share'][c]:.0%} ({t['kept'][c]}/{t['needed'][c]})"
                for c in CATEGORIES
            ]
            mean = t["tokens_per_call"]["mean"]
            times = t["time_ms"]
            lines.append(
                [
                    name,
                    f"{r.window:,}",
                    str(t["calls"]),
                    f"{t['tokens_sent']:,}",
                    "-" if mean is None else f"{mean:,.0f}",
                    f"{t['estimated_cost']:.4f}",
                    "-" if t["reusable_prefix_share"] is None else f"{t['reusable_prefix_share']:.0%}",
                    str(t["over_window"]),
                    str(t["invalid_requests"]),
                    str(t["refused"]),
                    str(t["trace_errors"]),
                    f"{f['fit']}/{f['summarizer']}/{f['clearing']}/{f['truncation']}",
                    "-" if times["median"] is None else f"{times['median']:.1f}/{times['max']:.1f}",
                    *shares,
                ]
            )
        widths = [max(len(line[k]) for line in lines) for k in range(len(head))]
        out = []
        for n, line in enumerate(lines):
            cells = [
                c.ljust(w) if k == 0 else c.rjust(w)
                for k, (c, w) in enumerate(zip(line, widths, strict=True))
            ]
            out.append("  ".join(cells).rstrip())
            if n == 0:
                out.append("  ".join("-" * w for w in widths))
        return "\n".join(out)

    def svg(self) -> str:
        """For each window, two panels: the mean tokens sent at each call (over the
        conversations), and the share of needed specifics kept up to that call; one line per
        definition, its same-size sliding window dashed, observation masking grey."""
        width, left, right, panel, gap, top = 980, 70, 270, 150, 40, 34
        height = top + len(self.windows) * 2 * (panel + gap) + 10
        span = width - left - right
        parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>',
            f'<text x="{left}" y="18" font-size="14">ctxmgmt eval: {len(self.conversations)} conversations, '
            f"tokens per call and needed specifics kept</text>",
        ]
        colour = {d: _COLOURS[k % len(_COLOURS)] for k, d in enumerate(self.definitions)}
        y = top
        for window in self.windows:
            rows = [r for r in self.rows if r.window == window]
            series = [(r, _series(r)) for r in rows]
            n = max((len(s[0]) for _, s in series), default=0)
            titles = (
                f"mean tokens sent per call, window {window:,}",
                "share of needed specifics kept, so far",
            )
            for which, title in enumerate(titles):
                y0 = y + gap
                values = [s[which] for _, s in series]
                peak = (
                    1.0 if which else max((v for vs in values for v in vs if v is not None), default=0) or 1.0
                )
                parts.append(f'<text x="{left}" y="{y0 - 8}" font-weight="bold">{escape(title)}</text>')
                axis = y0 + panel
                parts.append(f'<line x1="{left}" x2="{left + span}" y1="{axis}" y2="{axis}" stroke="#999"/>')
                top_label = "100%" if which else f"{peak:,.0f}"
                parts.append(f'<text x="{left - 6}" y="{y0 + 8}" text-anchor="end">{top_label}</text>')
                parts.append(f'<text x="{left - 6}" y="{y0 + panel}" text-anchor="end">0</text>')
                parts.append(
                    f'<text x="{left + span}" y="{y0 + panel + 14}" text-anchor="end">call {n}</text>'
                )
                for k, ((r, _), vs) in enumerate(zip(series, values, strict=True)):
                    stroke = colour.get(r.of or r.name, "#888888")
                    dash = ' stroke-dasharray="5,3"' if r.kind == "sliding_window" else ""
                    points = " ".join(
                        f"{left + span * c / max(1, n - 1):.1f},{y0 + panel * (1 - v / peak):.1f}"
                        for c, v in enumerate(vs)
                        if v is not None
                    )
                    if points:
                        line = f'fill="none" stroke="{stroke}" stroke-width="1.4"{dash}'
                        parts.append(f'<polyline {line} points="{points}"/>')
                    label = r.name if r.of is None else f"{r.name} (= {r.of})"
                    ly = y0 + 12 + 14 * k
                    parts.append(
                        f'<line x1="{left + span + 10}" x2="{left + span + 30}" y1="{ly - 4}" y2="{ly - 4}" '
                        f'stroke="{stroke}" stroke-width="1.4"{dash}/>'
                    )
                    parts.append(f'<text x="{left + span + 36}" y="{ly}">{escape(label)}</text>')
                y = y0 + panel
        parts.append("</svg>")
        return "\n".join(parts) + "\n"


def _series(row: Row) -> tuple[list[float | None], list[float | None]]:
    """(mean tokens at each call number, the share of needed specifics kept up to it)."""
    sums: list[int] = []
    counts: list[int] = []
    needed: list[int] = []
    kept: list[int] = []
    for c in row.calls:
        k = c.call - 1
        while len(sums) <= k:
            sums.append(0)
            counts.append(0)
            needed.append(0)
            kept.append(0)
        if c.refused is None:
            sums[k] += c.tokens
            counts[k] += 1
        needed[k] += sum(c.needed.values())
        kept[k] += sum(c.kept.values())
    tokens: list[float | None] = [s / n if n else None for s, n in zip(sums, counts, strict=True)]
    shares: list[float | None] = []
    total_needed = total_kept = 0
    for a, b in zip(needed, kept, strict=True):
        total_needed += a
        total_kept += b
        shares.append(total_kept / total_needed if total_needed else None)
    return tokens, shares


def evaluate(
    conversations: Iterable[ConversationLike],
    definitions: Sequence[Any] = ("default",),
    windows: Sequence[int] | int = (16_000,),
    *,
    pricing: Pricing | None = None,
    mask_last: int = 3,
    baselines: bool = True,
    per_call: bool = True,
    models: Any = None,
    store: bool = True,
) -> Report:
    """Replay conversations call by call through definitions at windows, with the baselines.

    ``conversations``: objects with ``id``, ``system_prompt``, ``messages`` (OpenAI chat),
    ``tools`` and ``model`` (:class:`~ctxmgmt.eval.Chat`, or the readers' conversations);
    read one at a time. ``definitions``: :class:`~ctxmgmt.Definition`, paths, shipped names
    or dicts. ``pricing``: prices per million tokens (default: the relative prices of each
    conversation's provider). ``mask_last``: the tool results observation masking keeps.
    ``per_call``: keep each call's figures (the JSON's ``per_call``, the SVG). ``store``:
    replay each definition with a throwaway offload store, as a deployment with one would
    (``False``: as one without).

    >>> report = ctxmgmt.evaluate([ctxmgmt.eval.Chat("run-1", messages)], ["default"], [16000])
    >>> print(report.table())
    """
    if isinstance(windows, int):
        windows = [windows]
    rows, listed = evaluate_rows(
        conversations,
        definitions,
        windows,
        pricing=pricing,
        mask_last=mask_last,
        baselines=baselines,
        per_call=per_call,
        models=models,
        store=store,
    )
    names = list(dict.fromkeys(r.name for r in rows if r.kind == "definition"))
    return Report(rows, listed, list(windows), names, mask_last, pricing)
