"""Draw report figures with Pillow, already a dependency. matplotlib would add ~40 MB for one heat map."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

_MARGIN_TOP = 40
_LABEL_CHARS = 14  # class names are cut to this many characters on the axes
Font = ImageFont.ImageFont | ImageFont.FreeTypeFont  # what load_font returns, scalable when Pillow has FreeType


def load_font(size: int) -> Font:
    try:
        return ImageFont.load_default(size=size)  # scalable when Pillow has FreeType
    except (TypeError, OSError):
        return ImageFont.load_default()


def draw_text(
    draw: ImageDraw.ImageDraw,
    xy: tuple[float, float],
    text: str,
    font: Font,
    fill: str | tuple[int, int, int],
    align: str,
) -> None:
    """Place text by its bounding box, since anchors need FreeType and the bitmap fallback font has none.
    align "center" centers on xy, "right" ends at x and centers vertically, "left" starts at x."""
    x0, y0, x1, y1 = draw.textbbox((0, 0), text, font=font)
    w, h = x1 - x0, y1 - y0
    x = {"center": xy[0] - w / 2, "right": xy[0] - w, "left": xy[0]}[align]
    draw.text((x - x0, xy[1] - h / 2 - y0), text, fill=fill, font=font)


def paste_vertical(image: Image.Image, text: str, font: Font, center: tuple[float, float]) -> None:
    """Paste text rotated 90 degrees (reading bottom to top), centered on `center`."""
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    width = int(measure.textbbox((0, 0), text, font=font)[2]) + 4
    strip = Image.new("RGB", (width, 16), "white")
    draw_text(ImageDraw.Draw(strip), (width / 2, 8), text, font, "black", "center")
    rotated = strip.rotate(90, expand=True)
    image.paste(rotated, (int(center[0] - rotated.width / 2), int(center[1] - rotated.height / 2)))


def confusion_matrix_png(
    matrix: Sequence[Sequence[int]], class_names: Sequence[str], path: str | Path, title: str = ""
) -> Path:
    """Draw a confusion matrix: rows are the true class, columns the predicted class.
    Each cell is shaded by its share of the row (the diagonal is recall) and shows its count if big enough."""
    k = len(matrix)
    cell = max(8, min(48, 720 // max(k, 1)))
    font, label_font = load_font(max(8, cell // 3)), load_font(12)
    names = [str(name)[:_LABEL_CHARS] for name in class_names]
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    label_w = 4 + int(max((measure.textbbox((0, 0), n, font=label_font)[2] for n in names), default=8))
    left, top = 28 + label_w + 8, _MARGIN_TOP + label_w + 6
    grid = k * cell
    title_w = int(measure.textbbox((0, 0), title, font=label_font)[2]) if title else 0
    image = Image.new("RGB", (max(left + grid + 16, title_w + 16), top + grid + 16), "white")
    draw = ImageDraw.Draw(image)
    draw.text((8, 4), title, fill="black", font=label_font)
    draw_text(draw, (left + grid / 2, _MARGIN_TOP - 10), "predicted class", label_font, "black", "center")
    paste_vertical(image, "true class", label_font, (14, top + grid / 2))

    for i, row in enumerate(matrix):
        total = sum(row) or 1
        for j, count in enumerate(row):
            share = count / total
            shade = int(255 * (1 - share))
            x0, y0 = left + j * cell, top + i * cell
            draw.rectangle([x0, y0, x0 + cell, y0 + cell], fill=(shade, shade, 255), outline=(220, 220, 220))
            if cell >= 20 and count:
                ink = "white" if share > 0.5 else "black"
                draw_text(draw, (x0 + cell / 2, y0 + cell / 2), str(count), font, ink, "center")
    for index, name in enumerate(names):
        center = index * cell + cell / 2
        draw_text(draw, (left - 6, top + center), name, label_font, "black", "right")
        # Column labels read bottom to top, ending just above their column
        strip = Image.new("RGB", (label_w, 16), "white")
        draw_text(ImageDraw.Draw(strip), (label_w - 2, 8), name, label_font, "black", "right")
        image.paste(strip.rotate(90, expand=True), (int(left + center - 8), top - label_w - 4))

    path = Path(path)
    image.save(path)
    return path


def predicted_vs_true_png(
    predicted: Sequence[float], true: Sequence[float], path: str | Path, title: str = "", unit: str = ""
) -> Path:
    """Plot each sample as a dot at (true, predicted) on equal axes, with the y = x line of a perfect model."""
    size, left, top, pad = 480, 64, _MARGIN_TOP + 8, 24
    values = [*predicted, *true] or [0.0, 1.0]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    low, high = low - 0.05 * span, high + 0.05 * span

    def at(x: float, y: float) -> tuple[float, float]:
        return left + (x - low) / (high - low) * size, top + size - (y - low) / (high - low) * size

    font = load_font(12)
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    title_w = int(measure.textbbox((0, 0), title, font=font)[2]) if title else 0
    image = Image.new("RGB", (max(left + size + pad, title_w + 16), top + size + 48), "white")
    draw = ImageDraw.Draw(image)
    draw.text((8, 4), title, fill="black", font=font)
    draw.rectangle([left, top, left + size, top + size], outline="black")
    draw.line([at(low, low), at(high, high)], fill=(200, 60, 60), width=1)
    for x, y in zip(true, predicted):
        cx, cy = at(x, y)
        draw.ellipse([cx - 2.5, cy - 2.5, cx + 2.5, cy + 2.5], fill=(40, 80, 200))
    for value in (low, (low + high) / 2, high):
        x, y = at(value, value)
        draw_text(draw, (x, top + size + 10), f"{value:.3g}", font, "black", "center")
        draw_text(draw, (left - 6, y), f"{value:.3g}", font, "black", "right")
    suffix = f" ({unit})" if unit else ""
    draw_text(draw, (left + size / 2, top + size + 30), f"true{suffix}", font, "black", "center")
    paste_vertical(image, f"predicted{suffix}", font, (14, top + size / 2))
    path = Path(path)
    image.save(path)
    return path
