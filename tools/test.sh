#!/usr/bin/env bash
# Every test, from a fresh clone: installs what it needs, builds (Release), runs ctest (unit, parity
# against PyTorch, tokenizer against npm tiktoken, GUI under Xvfb, a short fuzz pass), then rebuilds the
# unit tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them again, then builds the
# tests that run threads with ThreadSanitizer and runs those.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh test
jobs=$(nproc)
# The ledger of files kvscope wrote outside its folders (core/io/ownership.h): the tests' own, not the user's.
export XDG_STATE_HOME="$PWD/build-state"

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

# The tests that start threads (the pool, the kernels and sessions that fork on it, the GUI's command
# queue and its worker), with ThreadSanitizer: a data race fails the stage (halt_on_error). Only these
# areas: TSan slows code 5-15x, and the other areas reach the pool through the same kernels and session
# steps these run. Script tests (parity, gui, slow) are left out too, and so is the session test that
# sweeps prompt lengths and chunk sizes (~2 min under TSan, one fork pattern repeated; "1 and 2 threads"
# covers the threads). Measured on 2 cores: build ~3-7 min (load-dependent), tests ~30 s.
echo "== ThreadSanitizer, portable kernels: thread pool, kernels, session, session group, GUI controller" >&2
tsan_areas="thread_pool kernels session session_group gui_controller"
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVSCOPE_TSAN=ON -DKVSCOPE_GUI=OFF -DKVSCOPE_NATIVE=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target $(printf '%s_tests ' $tsan_areas)
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/../tests/tsan.supp" \
   ctest -j"$jobs" --output-on-failure --timeout 1800 -LE "slow|gui|parity" \
         -R "^($(echo $tsan_areas | tr ' ' '|'))\\." -E "^session\\.cached, uncached and chunked runs")
