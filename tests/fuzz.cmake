# A short libFuzzer pass over every tests/fuzz/fuzz_*.cpp target. tools/fuzz.sh builds its own clang
# tree (kvscope_core instrumented with -fsanitize=fuzzer-no-link,address,undefined) under this build
# dir, and exits 77 when clang or libFuzzer is missing, which ctest reports as skipped.
# Long runs: tools/fuzz.sh 3600 (see the script's header).
find_program(KVSCOPE_BASH bash)
if(KVSCOPE_BASH)
  add_test(NAME "fuzz: short pass" COMMAND ${KVSCOPE_BASH} ${CMAKE_SOURCE_DIR}/tools/fuzz.sh 10)
  set_tests_properties("fuzz: short pass" PROPERTIES
    ENVIRONMENT "KVSCOPE_FUZZ_BUILD=${CMAKE_BINARY_DIR}/fuzz-build"
    SKIP_RETURN_CODE 77
    RUN_SERIAL TRUE
    TIMEOUT 1800
    LABELS "fuzz;slow")
endif()
