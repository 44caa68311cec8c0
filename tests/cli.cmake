# Command-line smoke tests: the benchmark runs end to end (figures not asserted: speed lives in the
# benchmark, not in tests), and the README's headless demo exports a trace.
add_test(NAME cli.bench_quick COMMAND kvscope bench --quick --json --chart ${CMAKE_CURRENT_BINARY_DIR}/bench_quick.png)
set_tests_properties(cli.bench_quick PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE
  PASS_REGULAR_EXPRESSION "\"decode_tokens_per_s\": \\{\"batch1\"")
add_test(NAME cli.generate_trace_demo
         COMMAND kvscope generate --prompt "The cat sat on the" --max-new-tokens 6
                 --trace ${CMAKE_CURRENT_BINARY_DIR}/demo-trace --json)
set_tests_properties(cli.generate_trace_demo PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "\"generated_ids\": \\[")
