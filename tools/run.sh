#!/usr/bin/env bash
# The main job on the embedded default model: build kvscope (Release) and open the step-through window.
# Without a display it runs the same session headless: the window's scripted mode under Xvfb when
# available, else a `generate --trace` demo that exports every step's attention.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh run
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF >/dev/null
cmake --build build -j"$(nproc)" --target kvscope
if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ]; then
  exec ./build/app/kvscope gui "$@"
fi
echo "no display: running a traced generation instead (kvscope generate --trace build/demo-trace)" >&2
./build/app/kvscope generate --prompt "The cat sat on the" --max-new-tokens 12 --trace build/demo-trace "$@"
echo "attention snapshots: build/demo-trace (PNG heatmaps, .npy arrays, meta.json per step)" >&2
