#!/bin/bash
set -euo pipefail
cat > /app/report.py <<'PY'
"""Print total sales per region from a CSV file.

Usage: python3 report.py SALES_CSV
"""

import csv
import sys


def totals(path):
    result = {}
    with open(path, newline="") as f:
        reader = csv.reader(f)
        next(reader, None)  # the header
        for row in reader:
            if not row or not any(cell.strip() for cell in row):
                continue
            region = row[1]
            result[region] = result.get(region, 0.0) + int(row[3]) * float(row[4])
    return result


def main():
    by_region = totals(sys.argv[1])
    for region, total in sorted(by_region.items(), key=lambda kv: (-kv[1], kv[0])):
        print("%s,%.2f" % (region, total))


if __name__ == "__main__":
    main()
PY
