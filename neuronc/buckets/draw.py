"""The traffic as a histogram with the buckets drawn on it: text for the terminal, PNG or SVG (matplotlib)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from neuronc.errors import MISSING_LIBRARY, InvalidInputError

BAR_WIDTH = 40
ROWS = 16
PLOT_HINT = "pip install 'neuronc[plot]' (matplotlib)"


def text_histogram(
    histogram: Mapping[int, int], current: Sequence[int], suggested: Sequence[int], *, title: str, rows: int = ROWS
) -> list[str]:
    """Rows of ``lengths │bar count``; a row that holds a bucket says so (``◆`` current, ``◇`` suggested).

    Bins are equal ranges from 1 to the longest length or largest bucket, whichever is more.
    """
    top = max([*histogram, *current, *suggested, 1])
    width = max(1, math.ceil(top / rows))
    counts = [0] * rows
    for length, weight in histogram.items():
        counts[min(rows - 1, (length - 1) // width)] += weight
    peak = max(counts) or 1
    label_width = len(f"{(rows - 1) * width + 1}-{rows * width}")
    lines = [title]
    for row in range(rows):
        low, high = row * width + 1, (row + 1) * width
        if low > top:
            break
        bar = "█" * round(BAR_WIDTH * counts[row] / peak)
        if counts[row] and not bar:
            bar = "▏"
        marks = [f"◆ {b}" for b in current if low <= b <= high] + [f"◇ {b}" for b in suggested if low <= b <= high]
        label = f"{low}-{high}" if width > 1 else str(low)
        line = f"  {label:>{label_width}} │{bar:<{BAR_WIDTH}} {counts[row]:>7}"
        lines.append(line + ("  " + "  ".join(marks) if marks else ""))
    lines.append("  ◆ current bucket   ◇ suggested bucket")
    return lines


def write_plot(
    path: str | os.PathLike[str],
    panels: Sequence[tuple[str, Mapping[int, int], Sequence[int], Sequence[int]]],
) -> None:
    """Each (title, histogram, current, suggested) as a bar chart with the buckets as vertical lines.

    Raises EnvironmentIncompatibleError (exit 5, errors.MISSING_LIBRARY) when matplotlib is not installed.
    """
    target = Path(path)
    if target.suffix.lower() not in (".png", ".svg"):
        raise InvalidInputError(f"--plot {path}: give a .png or .svg file name")
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as exc:
        raise MISSING_LIBRARY.convert(exc, "--plot needs matplotlib", hint=PLOT_HINT) from None
    figure, axes = pyplot.subplots(len(panels), 1, figsize=(9, 3.2 * len(panels)), squeeze=False)
    for axis, (title, histogram, current, suggested) in zip(axes[:, 0], panels, strict=True):
        lengths = sorted(histogram)
        axis.bar(lengths, [histogram[v] for v in lengths], width=1.0, color="#7a8fa6")
        for i, b in enumerate(current):
            axis.axvline(b, color="#c0392b", linestyle="-", linewidth=1.2, label="current" if i == 0 else None)
        for i, b in enumerate(suggested):
            axis.axvline(b, color="#27ae60", linestyle="--", linewidth=1.2, label="suggested" if i == 0 else None)
        axis.set_title(title)
        axis.set_xlabel("tokens")
        axis.set_ylabel("count")
        axis.legend()
    figure.tight_layout()
    try:
        figure.savefig(target)
    except OSError as exc:
        raise InvalidInputError(f"--plot {path}: cannot write: {exc.strerror or exc}") from None
    finally:
        pyplot.close(figure)


__all__ = ["PLOT_HINT", "text_histogram", "write_plot"]
