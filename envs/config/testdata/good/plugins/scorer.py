"""An external plugin for the config fixture: it answers every hook with nothing."""
import json
import sys

json.load(sys.stdin)
print("{}")
