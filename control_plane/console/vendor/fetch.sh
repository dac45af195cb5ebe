#!/bin/sh
# Reproduces the vendored front-end libraries from the npm registry (built files only, with
# their licences). The console is served from these committed copies, so `make serve` needs no
# network; run this only to upgrade: sh control_plane/console/vendor/fetch.sh
set -eu
HTM=3.1.1       # htm/preact/standalone: Preact + hooks + htm tagged templates, one ES module
PREACT=10.29.8  # only for its licence: the standalone build bundles Preact
UPLOT=1.6.32    # uPlot time-series charts
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "htm@$HTM" "preact@$PREACT" "uplot@$UPLOT" >/dev/null
for pkg in htm-$HTM preact-$PREACT uplot-$UPLOT; do mkdir "$pkg"; tar xzf "$pkg.tgz" -C "$pkg"; done
cp htm-$HTM/package/preact/standalone.module.js "$here/preact-htm.module.js"
cp htm-$HTM/package/LICENSE "$here/LICENSE.htm"
cp preact-$PREACT/package/LICENSE "$here/LICENSE.preact"
cp uplot-$UPLOT/package/dist/uPlot.iife.min.js "$here/uPlot.iife.min.js"
cp uplot-$UPLOT/package/dist/uPlot.min.css "$here/uPlot.min.css"
cp uplot-$UPLOT/package/LICENSE "$here/LICENSE.uplot"
printf 'htm %s (Apache-2.0; the standalone build bundles Preact)\npreact %s (MIT)\nuplot %s (MIT)\n' "$HTM" "$PREACT" "$UPLOT" \
  > "$here/VERSIONS"
(cd "$here" && sha256sum preact-htm.module.js uPlot.iife.min.js uPlot.min.css > SHA256SUMS)
echo "vendored into $here"
