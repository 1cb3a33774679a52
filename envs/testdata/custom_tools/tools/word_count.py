"""word_count: the custom tool of the custom_tools test config.

It reads its arguments, {"path": ...}, as JSON from stdin (never from the
command line) and prints the number of words of the file as JSON.
"""
import json
import sys

args = json.load(sys.stdin)
path = args["path"]
try:
    with open(path, encoding="utf-8") as f:
        words = len(f.read().split())
except OSError as e:
    print(f"word_count: {path}: {e.strerror}", file=sys.stderr)
    sys.exit(2)
print(json.dumps({"path": path, "words": words}))
