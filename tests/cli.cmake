# Command-line smoke tests: the benchmarks run end to end (figures not asserted: speed lives in the
# benchmark, not in tests), and the README's headless demo exports a trace.
add_test(NAME cli.generate_trace_demo
         COMMAND kvscope generate --prompt "The cat sat on the" --max-new-tokens 6
                 --trace ${CMAKE_CURRENT_BINARY_DIR}/demo-trace --json)
set_tests_properties(cli.generate_trace_demo PROPERTIES TIMEOUT 120 PASS_REGULAR_EXPRESSION "\"generated_ids\": ?\\[")
# The benchmarks' --json, read by tests/cli/check_bench_json.py: every key the README's tables and
# tools/bench_*.sh read is there, in order, with its type (counts and bytes as integers); for --sharing
# the generated tokens agree across layouts and the prompt cache file gives the same first token; the
# chart is a PNG. Without /usr/bin/python3 the benchmarks only run.
find_program(KVSCOPE_CLI_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
function(kvscope_bench_test name which)
  if(KVSCOPE_CLI_PYTHON)
    add_test(NAME ${name} COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_bench_json.py
                                  ${which} --kvscope $<TARGET_FILE:kvscope> -- ${ARGN})
  elseif(which STREQUAL "sharing")
    add_test(NAME ${name} COMMAND kvscope bench --sharing --quick --json ${ARGN})
  else()
    add_test(NAME ${name} COMMAND kvscope bench --quick --json ${ARGN})
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
endfunction()
if(NOT KVSCOPE_CLI_PYTHON)
  message(STATUS "cli.bench_* only run the benchmarks: /usr/bin/python3 not found to check their JSON")
endif()
kvscope_bench_test(cli.bench_quick bench --chart ${CMAKE_CURRENT_BINARY_DIR}/bench_quick.png)
# Matrices used from the file's mapping instead of 2 MiB pages (weights.h).
kvscope_bench_test(cli.bench_quick_mapped bench --map-weights)
# bench --matmul on a ragged shape (K % 16 != 0, a partial group of weight rows) in both float formats, and on
# quantized blocks (random integers, finite scales; K whole blocks) of a 32- and a 256-weight format.
foreach(dtype f32 bf16 q5_0 q4_k)
  set(k 200)
  if(dtype MATCHES "^q")
    set(k 512)
  endif()
  add_test(NAME cli.bench_matmul_quick_${dtype}
           COMMAND kvscope bench --matmul --quick --json --rows 3 --k ${k} --n 10 --dtype ${dtype})
  set_tests_properties(cli.bench_matmul_quick_${dtype} PROPERTIES TIMEOUT 120 RUN_SERIAL TRUE
                       PASS_REGULAR_EXPRESSION "\"memory_us\"")
endforeach()
kvscope_bench_test(cli.bench_sharing_quick sharing --chart ${CMAKE_CURRENT_BINARY_DIR}/bench_sharing_quick.png)
# The same with bfloat16 weights and KV cache (the pool must be made in the cache's dtype).
kvscope_bench_test(cli.bench_sharing_quick_bf16 sharing --dtype bf16)
# generate on a terminal (a pseudo-terminal): the progress bar says what runs and is cleared before the result.
if(KVSCOPE_CLI_PYTHON)
  # generate --edit: the edit's KL, top-1 and movers in --json against numpy from --dump-logits with and
  # without it, the traced step's edits, bad --edit values in one line (exit 2).
  add_test(NAME cli.cache_edits
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_cache_edits_cli.py --kvscope $<TARGET_FILE:kvscope>
                   --assets ${CMAKE_SOURCE_DIR}/assets --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/cache_edits)
  set_tests_properties(cli.cache_edits PROPERTIES TIMEOUT 300)
  add_test(NAME cli.terminal_output
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_terminal_output.py --kvscope $<TARGET_FILE:kvscope>)
  set_tests_properties(cli.terminal_output PROPERTIES TIMEOUT 120)
  # generate's stdout, --json "text" and trace.json hold the real text (what detokenize writes).
  add_test(NAME cli.text_output
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_text_output.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/text_output)
  set_tests_properties(cli.text_output PROPERTIES TIMEOUT 120)
  # --trace files describe themselves: softmax over scores.npy rows (-inf where masked) is weights.npy,
  # meta.json gives every file's dtype, shape, axes and meaning, PNGs have room for axes (numpy only).
  add_test(NAME cli.trace_files
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_trace_files.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/trace_files)
  set_tests_properties(cli.trace_files PROPERTIES TIMEOUT 120)
  # A Gemma 3 folder: each layer's own mask rule in meta.json's mask.layers and every layer's mask.npy
  # against the rule applied to the positions (numpy), with the model's windows and a session window;
  # inspect's head_dim, K/V head count and norm form from config.json.
  add_test(NAME cli.gemma_views
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_gemma_views.py --kvscope $<TARGET_FILE:kvscope>
                   --assets ${CMAKE_SOURCE_DIR}/assets --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/gemma_views)
  set_tests_properties(cli.gemma_views PROPERTIES TIMEOUT 180)
  # Sliding layers store only their window (issue 43): Gemma 3 and Mistral folders, the KV bytes held
  # after N positions written C at a time from config.json alone (sum over layers of min(N, W_l - 1 + C)),
  # against inspect --json, generate --json and lab --json.
  add_test(NAME cli.sliding_storage
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_sliding_storage.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/sliding_storage)
  set_tests_properties(cli.sliding_storage PROPERTIES TIMEOUT 180)
  # A GGUF file where a folder would go (issue 45): inspect's bits per weight and per-tensor types from the
  # file's own tensor infos, chat-template against python3-jinja2, a prompt cache written and read back, a
  # file without a template refused in one line; files from the independent numpy writer (Q8_0, Q4_K).
  add_test(NAME cli.gguf_file
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_gguf_file.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/gguf_file)
  set_tests_properties(cli.gguf_file PROPERTIES TIMEOUT 180)
  # Figures for papers: --format svg heatmaps are well-formed XML with a rect per cell, hatched where
  # mask.npy is 0; --scale 2 PNGs are twice the size of --scale 1 ones (numpy and xml.etree only).
  add_test(NAME cli.svg_export
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_svg_export.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/svg_export)
  set_tests_properties(cli.svg_export PROPERTIES TIMEOUT 180)
  # kvscope chat on a tiny Llama 3 chat folder: each turn's --json counts (rows reused = earlier turns,
  # computed = the new turn), the same replies with the cache off, stdin and .jsonl turns, bad inputs.
  add_test(NAME cli.chat
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_chat.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/chat)
  set_tests_properties(cli.chat PROPERTIES TIMEOUT 180)
  # tools/make_llama_model.py's folders (a tiny Llama with SmolLM2-135M's vocabulary size, a tiny Gemma 3): the
  # tokenizer it writes against transformers.js (@lenml/tokenizers from the npm fixture, when node is found), its
  # chat template against python3-jinja2, text prompts, heads, chat and lab on them; chat without --model.
  find_program(KVSCOPE_NODE node)
  find_program(KVSCOPE_NPM npm)
  if(KVSCOPE_NODE AND KVSCOPE_NPM)
    add_test(NAME cli.made_model
             COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_made_model.py --kvscope $<TARGET_FILE:kvscope>
                     --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/made_model --node-modules ${CMAKE_BINARY_DIR}/npm/node_modules)
    set_tests_properties(cli.made_model PROPERTIES FIXTURES_REQUIRED tokenizer_npm)
  else()
    add_test(NAME cli.made_model
             COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_made_model.py --kvscope $<TARGET_FILE:kvscope>
                     --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/made_model)
  endif()
  set_tests_properties(cli.made_model PROPERTIES TIMEOUT 300)
  # Without the window (sanitizer builds) the gui cases are skipped.
  set(kvscope_cli_no_gui "")
  if(NOT KVSCOPE_GUI)
    set(kvscope_cli_no_gui "--no-gui")
  endif()
  # Every command: the output rule and the exit-code table (docs/cli.md "Exit codes"), one-line errors.
  add_test(NAME cli.errors
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_errors.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/errors ${kvscope_cli_no_gui})
  # Nothing lost: a foreign file or folder with kvscope-like names where each command writes is refused in
  # one line before any work and kept byte for byte; kvscope replaces and removes only what it wrote.
  add_test(NAME cli.ownership
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_ownership.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/ownership ${kvscope_cli_no_gui})
  set_tests_properties(cli.ownership PROPERTIES TIMEOUT 600)
  # --help texts that run as printed (detokenize's example, gui's script commands) and complete JSON.
  add_test(NAME cli.help_and_json
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_help_and_json.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/help_and_json ${kvscope_cli_no_gui})
  set_tests_properties(cli.errors cli.help_and_json PROPERTIES TIMEOUT 180)
  # Inputs that are not regular files (FIFOs, /dev/zero, folders) or are over their size limit
  # (core/io/read_file.h), stdin from /dev/zero included: one 'error:' line and exit 1 under a 2 GiB
  # address-space limit, each run with a timeout that turns a hang into a failure.
  # A sanitizer reserves terabytes of address space for its shadow memory: under it the scripts run
  # without their 2 GiB address-space limit (the Release stage runs them with it).
  set(kvscope_cli_memory_limit "")
  if(KVSCOPE_SANITIZE OR KVSCOPE_TSAN)
    set(kvscope_cli_memory_limit "--no-memory-limit")
  endif()
  add_test(NAME cli.bounded_inputs
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_bounded_inputs.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/bounded_inputs ${kvscope_cli_no_gui} ${kvscope_cli_memory_limit})
  set_tests_properties(cli.bounded_inputs PROPERTIES TIMEOUT 600)
  # generate --evict on assets/llama-gqa (GQA): every eviction the trace records, and its score, recomputed
  # in numpy from the exported attention weights with tests/reference/eviction_reference.py's rules.
  add_test(NAME cli.eviction_trace
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_eviction_trace.py --kvscope $<TARGET_FILE:kvscope>
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/eviction_trace)
  set_tests_properties(cli.eviction_trace PROPERTIES TIMEOUT 180)
  # Issue 41: a NaN/inf weight, a degenerate config.json value or a step that overflows float32 is one
  # stderr line and exit 1; a padded vocabulary's ids show as "<id N>" in text, --json, trace and detokenize.
  add_test(NAME cli.numerics
           COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_numerics.py --kvscope $<TARGET_FILE:kvscope>
                   --assets ${CMAKE_SOURCE_DIR}/assets --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/numerics ${kvscope_cli_memory_limit})
  set_tests_properties(cli.numerics PROPERTIES TIMEOUT 300)
  # The window and generate share one max-new-tokens default (a scripted window under xvfb-run; 77 = skipped).
  if(KVSCOPE_GUI)
    add_test(NAME cli.gui_defaults
             COMMAND ${KVSCOPE_CLI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/check_gui_defaults.py --kvscope $<TARGET_FILE:kvscope>
                     --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/gui_defaults)
    set_tests_properties(cli.gui_defaults PROPERTIES LABELS "gui" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endif()
endif()
add_test(NAME cli.version COMMAND kvscope --version)
set_tests_properties(cli.version PROPERTIES PASS_REGULAR_EXPRESSION "^kvscope [0-9]+\\.[0-9]+\\.[0-9]+\n$")
