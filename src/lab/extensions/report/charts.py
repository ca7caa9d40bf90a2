"""Draw line charts as inline SVG strings: one chart per metric, one line per run, x = global optimizer step."""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

# Tableau 10: distinguishable, readable on white
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
WIDTH, HEIGHT = 440, 250
LEFT, RIGHT, TOP, BOTTOM = 60, 14, 12, 34


@dataclass
class Series:
    label: str
    points: list[tuple[float, float]]  # (step, value); a non-finite value is marked, not drawn
    color: str
    emphasis: bool = False  # a sweep's best run, drawn thicker and on top


def nice_ticks(low: float, high: float, count: int = 5, integer: bool = False) -> list[float]:
    """Return round ticks covering [low, high], 1, 2 or 5 times a power of ten apart (whole numbers if `integer`)."""
    if not high > low:  # a single value gets a band around it
        pad = abs(low) * 0.1 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    step = max(step, 1) if integer else step
    first = math.floor(low / step) * step
    ticks = [first + i * step for i in range(math.ceil((high - first) / step) + 1)]
    return [round(t, 12) for t in ticks]


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def line_chart(title: str, series: list[Series]) -> str:
    finite = [(x, y) for s in series for x, y in s.points if math.isfinite(y)]
    if not finite:
        finite = [(x, 0.0) for s in series for x, _ in s.points] or [(0.0, 0.0)]
    xs, ys = [x for x, _ in finite], [y for _, y in finite]
    x_ticks, y_ticks = nice_ticks(min(xs), max(xs), integer=True), nice_ticks(min(ys), max(ys))
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return TOP + (y1 - y) / (y1 - y0) * plot_h

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="plot"/>',
    ]
    for y in y_ticks:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py(y):.1f}" y2="{py(y):.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 5}" y="{py(y) + 4:.1f}" text-anchor="end">{_fmt(y)}</text>')
    for x in x_ticks:
        parts.append(f'<text x="{px(x):.1f}" y="{HEIGHT - BOTTOM + 15}" text-anchor="middle">{_fmt(x)}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 4}" text-anchor="middle" class="axis">step</text>')
    for s in sorted(series, key=lambda s: s.emphasis):  # emphasised line last, so it is on top
        width = 3 if s.emphasis else 1.6
        segments: list[list[tuple[float, float]]] = [[]]
        for x, y in s.points:
            if math.isfinite(y):
                segments[-1].append((x, y))
            else:  # NaN/inf: break the line, red mark on the top edge
                segments.append([])
                parts.append(
                    f'<text x="{px(x):.1f}" y="{TOP + 10}" text-anchor="middle" class="nonfinite">&#215;'
                    f"<title>{escape(s.label)}: {y} at step {_fmt(x)}</title></text>"
                )
        for segment in segments:
            if len(segment) == 1:
                (x, y) = segment[0]
                parts.append(
                    f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="{width + 1}" fill="{s.color}">'
                    f"<title>{escape(s.label)}: {_fmt(y)} at step {_fmt(x)}</title></circle>"
                )
            elif segment:
                points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in segment)
                parts.append(
                    f'<polyline points="{points}" fill="none" stroke="{s.color}" stroke-width="{width}">'
                    f"<title>{escape(s.label)}: last {_fmt(segment[-1][1])}</title></polyline>"
                )
    parts.append("</svg>")
    return "".join(parts)
