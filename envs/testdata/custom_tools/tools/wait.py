"""wait: sleeps for {"seconds": N} seconds, for the timeout test."""
import json
import sys
import time

seconds = json.load(sys.stdin)["seconds"]
print(f"waiting {seconds}s", flush=True)
time.sleep(seconds)
print("done")
