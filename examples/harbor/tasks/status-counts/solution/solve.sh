#!/bin/bash
set -euo pipefail
cat > /workspace/status_counts.sh <<'SH'
#!/bin/bash
# Print "CODE COUNT" per HTTP status code in an access log, lowest code first.
# The status code is the second-to-last field of each non-blank line.
set -euo pipefail
awk 'NF >= 2 { n[$(NF - 1)]++ } END { for (c in n) print c, n[c] }' "$1" | sort -n
SH
chmod +x /workspace/status_counts.sh
