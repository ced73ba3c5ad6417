#!/usr/bin/env bash
# Screenshots of five pages of the built site in headless Chromium, into screenshots/:
# the home page, the PPO-over-a-RayCollector tutorial, two benchmark pages (a table of
# ratios, a plot of a series) and a page of the Python API reference (what a new user reads first, and the three tasks the docs serve).
#
#   apt-get install chromium    # Debian's; any Chromium or Chrome on PATH as CHROMIUM
#   bash docs/screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
browser="${CHROMIUM:-chromium}"
site="$(mktemp -d)"
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict -q -d "$site"
port=8765
(cd "$site" && exec python3 -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1) &
server=$!
sleep 1
mkdir -p screenshots
for page in "" tutorials/ppo-ray-collector/ benchmarks/learner_throughput/ benchmarks/ray_throughput/ reference/api/collectors/; do
  name="$(echo "${page:-home}" | tr '/' '_' | sed 's/_$//')"
  "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$site/.chromium" --hide-scrollbars --window-size=1280,1600 \
    --screenshot="screenshots/$name.png" "http://127.0.0.1:$port/$page" 2>/dev/null
  echo "screenshots/$name.png"
done
