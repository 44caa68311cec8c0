# Command-line smoke tests: the benchmark runs end to end (figures not asserted: speed lives in the
# benchmark, not in tests), and the README's headless demo exports a trace.
add_test(NAME cli.bench_quick COMMAND kvscope bench --quick --json --chart ${CMAKE_CURRENT_BINARY_DIR}/bench_quick.png)
set_tests_properties(cli.bench_quick PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE
  PASS_REGULAR_EXPRESSION "\"decode_tokens_per_s\": \\{[ \n]*\"batch1\"")
add_test(NAME cli.generate_trace_demo
         COMMAND kvscope generate --prompt "The cat sat on the" --max-new-tokens 6
                 --trace ${CMAKE_CURRENT_BINARY_DIR}/demo-trace --json)
set_tests_properties(cli.generate_trace_demo PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "\"generated_ids\": ?\\[")
# bench --sharing on the default model: every JSON key the README's table reads is there (figures not
# asserted), the generated tokens agree across layouts, and the chart is written.
add_test(NAME cli.bench_sharing_quick
         COMMAND kvscope bench --sharing --quick --json --chart ${CMAKE_CURRENT_BINARY_DIR}/bench_sharing_quick.png)
set_tests_properties(cli.bench_sharing_quick PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE
  PASS_REGULAR_EXPRESSION "\"tokens_agree\": true.*\"layout\": \"shared\".*\"kv_bytes_after_prefill\": [0-9]+, \"ideal_bytes_after_prefill\": [0-9]+, \"ratio_after_prefill\": [0-9.]+.*\"rss_kv_bytes\": -?[0-9]+, \"prefill_positions_computed\": [0-9]+, \"prefill_positions_skipped\": [0-9]+, \"prefill_seconds\": [0-9.e+-]+, \"prefill_flops\": [0-9.e+-]+.*\"layout\": \"paged\".*\"layout\": \"ring\".*\"prompt_file\": \\{\"positions\": [0-9]+, \"file_bytes\": [0-9]+.*\"prefill_prompt_with_file_seconds\": \\{\"min\".*\"same_first_token\": true")
# The same with bfloat16 weights and KV cache (the pool must be made in the cache's dtype).
add_test(NAME cli.bench_sharing_quick_bf16 COMMAND kvscope bench --sharing --quick --json --dtype bf16)
set_tests_properties(cli.bench_sharing_quick_bf16 PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE
  PASS_REGULAR_EXPRESSION "\"tokens_agree\": true.*\"layout\": \"shared\".*\"same_first_token\": true")
