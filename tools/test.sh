#!/usr/bin/env bash
# Every test, from a fresh clone: installs what it needs, builds (Release), runs ctest (unit, parity
# against PyTorch, tokenizer against npm tiktoken, GUI under Xvfb, a short fuzz pass), then rebuilds the
# unit tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh test
jobs=$(nproc)

echo "== Release build and full test suite" >&2
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-test -j"$jobs"
(cd build-test && ctest -j"$jobs" --output-on-failure --timeout 1800)

# Without -march=native: this build also runs the portable (non-AVX-512) kernels through every test.
echo "== AddressSanitizer + UndefinedBehaviorSanitizer, portable kernels" >&2
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSCOPE_SANITIZE=ON -DKVSCOPE_GUI=OFF -DKVSCOPE_NATIVE=OFF >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest -j"$jobs" --output-on-failure --timeout 1800 -LE "slow|gui")
