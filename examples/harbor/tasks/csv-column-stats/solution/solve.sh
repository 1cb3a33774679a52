#!/bin/bash
set -euo pipefail
cat > /workspace/csvstats.py <<'PY'
"""Print count, min, max and mean of one numeric CSV column as JSON.

Usage: python3 csvstats.py FILE COLUMN
"""

import csv
import json
import sys


def fail(message):
    print("csvstats: " + message, file=sys.stderr)
    sys.exit(2)


def number(text):
    try:
        return int(text)
    except ValueError:
        return float(text)


def main():
    if len(sys.argv) != 3:
        fail("usage: csvstats.py FILE COLUMN")
    path, column = sys.argv[1], sys.argv[2]
    try:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        fail("%s: %s" % (path, e.strerror))
    if not rows or column not in rows[0]:
        fail("%s: no column %r" % (path, column))
    index = rows[0].index(column)
    values = []
    for line, row in enumerate(rows[1:], start=2):
        cell = row[index].strip() if index < len(row) else ""
        if not cell:
            continue
        try:
            values.append(number(cell))
        except ValueError:
            fail("%s: line %d: %r is not a number" % (path, line, cell))
    if values:
        result = {"count": len(values), "min": min(values), "max": max(values), "mean": sum(values) / len(values)}
    else:
        result = {"count": 0, "min": None, "max": None, "mean": None}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
PY
