"""Print total sales per region from a CSV file.

Usage: python3 report.py SALES_CSV
"""

import csv
import sys


def totals(path):
    result = {}
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    for row in rows[2:]:
        region = row[1]
        units = int(row[3])
        price = int(float(row[4]))
        result[region] = units * price
    return result


def main():
    by_region = totals(sys.argv[1])
    for region, total in sorted(by_region.items(), key=lambda kv: kv[1]):
        print("%s,%.2f" % (region, total))


if __name__ == "__main__":
    main()
