#!/usr/bin/env bash
# Renders a plan's HTML report to a PNG with headless Chromium:
#
#   scripts/render-report.sh <plan.bin> <out.png> [width,height]
#
# The report comes from `dmuon-plan <plan.bin> --emit=html` (the same page as
# `dmuonc --emit=html`); it is self-contained (inline CSS and SVG, no scripts),
# and Chromium runs with networking features off and a fresh profile, so the
# screenshot needs no network. Installs Debian's `chromium` package with
# apt-get when no Chromium is found. Not used by CI (the lit tests check the
# HTML's structure instead).
#
# Environment: DMUON_PLAN (the dmuon-plan binary; default: build/bin, then
# build-*/bin, then PATH), CHROMIUM (the browser binary).
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 <plan.bin> <out.png> [width,height]" >&2
  exit 2
fi
plan=$1
out=$2
size=${3:-1400,1800}
root=$(cd "$(dirname "$0")/.." && pwd)

if [[ ! -f $plan ]]; then
  echo "$0: error: '$plan': no such file" >&2
  exit 1
fi

tool=${DMUON_PLAN:-}
if [[ -z $tool ]]; then
  for c in "$root"/build/bin/dmuon-plan "$root"/build-*/bin/dmuon-plan; do
    if [[ -x $c ]]; then tool=$c; break; fi
  done
fi
tool=${tool:-$(command -v dmuon-plan || true)}
if [[ -z $tool ]]; then
  echo "$0: error: dmuon-plan not found; build it or set DMUON_PLAN" >&2
  exit 1
fi

browser=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [[ -z $browser ]]; then
  echo "$0: chromium not found; installing the Debian package" >&2
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo=sudo; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    chromium fonts-dejavu-core >/dev/null
  browser=$(command -v chromium)
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$tool" "$plan" --emit=html -o "$work/report.html"

mkdir -p "$(dirname "$out")"
out_abs=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
rm -f "$out_abs"
# The flags keep Chromium off the network and out of the user's profile.
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --hide-scrollbars --user-data-dir="$work/profile" \
  --screenshot="$out_abs" --window-size="$size" "file://$work/report.html" \
  >"$work/chromium.log" 2>&1 || {
  cat "$work/chromium.log" >&2
  echo "$0: error: chromium failed" >&2
  exit 1
}
if [[ ! -s $out_abs ]]; then
  cat "$work/chromium.log" >&2
  echo "$0: error: chromium wrote no screenshot" >&2
  exit 1
fi
echo "$out"
