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
# A compiler cache when there is one: a rerun (or another clone) recompiles only what changed. Paths under
# this clone are hashed relative to it, so clones in other places share the entries.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
fi
# The sanitizer builds compile at -O1 with line tables only (-g1): reports keep function names and lines,
# and the three sanitizer trees build in about half the time -O2 -g takes (measured on one file: 62 s vs 121 s).
sanitizer_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
                 "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")

echo "== Release build and full test suite" >&2
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build build-test -j"$jobs"
(cd build-test && ctest -j"$jobs" --output-on-failure --timeout 1800)

# Without -march=native: this build also runs the portable (non-AVX-512) kernels through every test.
echo "== AddressSanitizer + UndefinedBehaviorSanitizer, portable kernels" >&2
cmake -S . -B build-asan "${sanitizer_flags[@]}" "${launcher[@]}" -DKVSCOPE_SANITIZE=ON -DKVSCOPE_GUI=OFF -DKVSCOPE_NATIVE=OFF >/dev/null
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
cmake -S . -B build-tsan "${sanitizer_flags[@]}" "${launcher[@]}" -DKVSCOPE_TSAN=ON -DKVSCOPE_GUI=OFF -DKVSCOPE_NATIVE=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target $(printf '%s_tests ' $tsan_areas)
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/../tests/tsan.supp" \
   ctest -j"$jobs" --output-on-failure --timeout 1800 -LE "slow|gui|parity" \
         -R "^($(echo $tsan_areas | tr ' ' '|'))\\." -E "^session\\.cached, uncached and chunked runs")
