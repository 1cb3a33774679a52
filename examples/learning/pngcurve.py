"""Write a line chart as a PNG with the standard library only (no matplotlib).

    from pngcurve import write_curve
    write_curve("curve.png", {"MEAN REWARD": [0.2, 0.5, 0.9]}, title="CHOOSE_OP")

Values are plotted against their index (the iteration); the y axis runs from
0 to 1 (values outside are clipped). Labels use a built-in 3x5 pixel font of
digits, upper-case letters and a few signs; other characters are drawn as
blanks.
"""

from __future__ import annotations

import struct
import zlib
from typing import Dict, List, Sequence, Tuple

__all__ = ["write_curve", "COLORS"]

RGB = Tuple[int, int, int]

#: COLORS are the series' colours, in order.
COLORS: List[RGB] = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40)]

# _FONT maps a character to five rows of three pixels ("1" is ink).
_FONT = {
    "0": "111 101 101 101 111", "1": "010 110 010 010 111", "2": "111 001 111 100 111",
    "3": "111 001 111 001 111", "4": "101 101 111 001 001", "5": "111 100 111 001 111",
    "6": "111 100 111 101 111", "7": "111 001 001 001 001", "8": "111 101 111 101 111",
    "9": "111 101 111 001 111", ".": "000 000 000 000 010", ",": "000 000 000 010 100", "-": "000 000 111 000 000",
    "_": "000 000 000 000 111", "(": "010 100 100 100 010", ")": "010 001 001 001 010",
    "/": "001 001 010 100 100", ":": "000 010 000 010 000", " ": "000 000 000 000 000",
    "A": "010 101 111 101 101", "B": "110 101 110 101 110", "C": "111 100 100 100 111",
    "D": "110 101 101 101 110", "E": "111 100 110 100 111", "F": "111 100 110 100 100",
    "G": "111 100 101 101 111", "H": "101 101 111 101 101", "I": "111 010 010 010 111",
    "J": "001 001 001 101 111", "K": "101 101 110 101 101", "L": "100 100 100 100 111",
    "M": "101 111 111 101 101", "N": "110 101 101 101 101", "O": "111 101 101 101 111",
    "P": "110 101 110 100 100", "Q": "111 101 101 111 001", "R": "110 101 110 101 101",
    "S": "111 100 111 001 111", "T": "111 010 010 010 010", "U": "101 101 101 101 111",
    "V": "101 101 101 101 010", "W": "101 101 111 111 101", "X": "101 101 010 101 101",
    "Y": "101 101 010 010 010", "Z": "111 001 010 100 111",
}


class _Canvas:
    """_Canvas is an RGB raster with a few drawing primitives."""

    def __init__(self, w: int, h: int, bg: RGB = (255, 255, 255)) -> None:
        self.w, self.h = w, h
        self.px = [bytearray(bytes(bg) * w) for _ in range(h)]

    def dot(self, x: int, y: int, c: RGB) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            self.px[y][3 * x : 3 * x + 3] = bytes(c)

    def rect(self, x0: int, y0: int, x1: int, y1: int, c: RGB) -> None:
        for y in range(max(0, y0), min(self.h, y1 + 1)):
            for x in range(max(0, x0), min(self.w, x1 + 1)):
                self.px[y][3 * x : 3 * x + 3] = bytes(c)

    def line(self, x0: int, y0: int, x1: int, y1: int, c: RGB, width: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        r = width // 2
        for i in range(steps + 1):
            x = round(x0 + (x1 - x0) * i / steps)
            y = round(y0 + (y1 - y0) * i / steps)
            self.rect(x - r, y - r, x + r, y + r, c)

    def text(self, x: int, y: int, s: str, c: RGB = (0, 0, 0), scale: int = 2) -> int:
        """text draws s with its top-left corner at (x, y) and returns its width."""
        for i, ch in enumerate(s.upper()):
            rows = _FONT.get(ch, _FONT[" "]).split()
            for ry, row in enumerate(rows):
                for rx, bit in enumerate(row):
                    if bit == "1":
                        self.rect(x + (4 * i + rx) * scale, y + ry * scale, x + (4 * i + rx) * scale + scale - 1, y + ry * scale + scale - 1, c)
        return 4 * len(s) * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(row) for row in self.px)

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def write_curve(path: str, series: Dict[str, Sequence[float]], title: str = "", xlabel: str = "ITERATION", width: int = 720, height: int = 420) -> None:
    """write_curve plots each series (values in [0, 1] against their index) with a legend and writes a PNG to path."""
    cv = _Canvas(width, height)
    left, right, top, bottom = 60, width - 20, 40, height - 50
    grey, dark = (220, 220, 220), (60, 60, 60)
    n = max((len(v) for v in series.values()), default=0)

    def sx(i: float) -> int:
        return left + round((right - left) * (i / (n - 1) if n > 1 else 0.5))

    def sy(v: float) -> int:
        return bottom - round((bottom - top) * min(1.0, max(0.0, v)))

    for k in range(5):  # horizontal grid and y ticks at 0, 0.25, ... 1
        v = k / 4
        cv.line(left, sy(v), right, sy(v), grey)
        label = f"{v:.2f}"
        cv.text(left - 8 - 8 * len(label), sy(v) - 5, label, dark)
    step = max(1, (n + 9) // 10)
    ticks = list(range(0, n, step))
    if ticks:  # the last tick moves to the last iteration (less than a step away, so labels do not touch)
        ticks[-1] = n - 1
    for i in ticks:  # x ticks: at most about ten iteration numbers
        cv.line(sx(i), bottom, sx(i), bottom + 4, dark)
        label = str(i)
        cv.text(sx(i) - 4 * len(label), bottom + 8, label, dark)
    cv.line(left, top, left, bottom, dark)
    cv.line(left, bottom, right, bottom, dark)
    cv.text((left + right) // 2 - 4 * len(xlabel), height - 20, xlabel, dark)
    if title:
        cv.text(left, 12, title, (0, 0, 0))
    lx = right - 8 - max((8 * len(name) + 24 for name in series), default=0)
    for j, (name, vals) in enumerate(series.items()):
        c = COLORS[j % len(COLORS)]
        pts = [(sx(i), sy(v)) for i, v in enumerate(vals)]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            cv.line(x0, y0, x1, y1, c, width=3)
        for x, y in pts:
            cv.rect(x - 3, y - 3, x + 3, y + 3, c)
        ly = bottom - 20 - 16 * (len(series) - 1 - j)
        cv.rect(lx, ly + 1, lx + 14, ly + 8, c)
        cv.text(lx + 20, ly, name, dark)
    with open(path, "wb") as f:
        f.write(cv.png())
