#!/usr/bin/env bash
# Renders an `fp8train report --html` page in headless Chromium (Debian: apt-get install chromium)
# with every network access disabled, and saves a PNG: a check that the page draws offline, and
# the way docs/report-screenshot.png was made. Not part of CI.
#
#   scripts/report-screenshot.sh REPORT.html OUT.png [WIDTH] [HEIGHT]   # default 1400 x 2000
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,7p' "$0"; exit 2; }
html=$(realpath "$1"); out=$(realpath -m "$2"); width=${3:-1400}; height=${4:-2000}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
[ -n "$browser" ] || { echo "report-screenshot.sh: no chromium (apt-get install chromium)" >&2; exit 2; }
profile=$(mktemp -d); trap 'rm -rf "$profile"' EXIT
# A proxy on a closed port and a resolver that finds nothing: any request the page made would
# fail, so what renders is what the file holds. --virtual-time-budget lets the scripts finish.
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$profile" \
  --proxy-server=127.0.0.1:9 --host-resolver-rules="MAP * ~NOTFOUND" --no-first-run \
  --window-size="$width,$height" --virtual-time-budget=10000 --screenshot="$out" "file://$html" 2>/dev/null
[ -s "$out" ] || { echo "report-screenshot.sh: no screenshot written" >&2; exit 1; }
echo "wrote $out"
