# Parity tests: kvscope's CLI against the independent PyTorch reference in tools/kvscope_reference/.
# They need Debian's python3-torch and numpy (/usr/bin/python3); without them they are skipped with a
# message. Expected values are recomputed from generated model folders on every run (no stored goldens).
#
#   ctest -L parity                 every group
#   ctest -R parity.architectures   one group; each script prints one line per case and a reproducer on failure

find_program(KVSCOPE_TORCH_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVSCOPE_TORCH_PYTHON)
  execute_process(COMMAND ${KVSCOPE_TORCH_PYTHON} -c "import torch, numpy"
                  RESULT_VARIABLE kvscope_torch_missing OUTPUT_QUIET ERROR_QUIET)
endif()

if(NOT KVSCOPE_TORCH_PYTHON OR kvscope_torch_missing)
  message(STATUS "parity tests skipped: /usr/bin/python3 with torch and numpy not found (apt install python3-torch)")
else()
  set(kvscope_parity_dir ${CMAKE_CURRENT_SOURCE_DIR}/parity)
  set(kvscope_parity_work ${CMAKE_CURRENT_BINARY_DIR}/parity_work)

  # The reference and the harness checking themselves; needs no binary.
  add_test(NAME parity.selfcheck
           COMMAND ${KVSCOPE_TORCH_PYTHON} ${kvscope_parity_dir}/selfcheck.py --work ${kvscope_parity_work}/selfcheck)
  set_tests_properties(parity.selfcheck PROPERTIES LABELS "parity" TIMEOUT 300)

  foreach(group architectures windows chunks batches cli_errors sharing encoder_decoder llama mistral_gemma llama_checkpoints llama_features kv_quant cache_lab)
    add_test(NAME parity.${group}
             COMMAND ${KVSCOPE_TORCH_PYTHON} ${kvscope_parity_dir}/${group}.py
                     --kvscope $<TARGET_FILE:kvscope> --work ${kvscope_parity_work}/${group})
    set_tests_properties(parity.${group} PROPERTIES LABELS "parity" TIMEOUT 300)
  endforeach()

  # kvscope against the reference documents' own PyTorch code, read at run time from --seeds,
  # $KVSCOPE_SEEDS, <source>/../shared/seeds or /work/shared/seeds; skipped (77) when none exists.
  add_test(NAME parity.seeds
           COMMAND ${KVSCOPE_TORCH_PYTHON} ${kvscope_parity_dir}/seeds.py
                   --kvscope $<TARGET_FILE:kvscope> --work ${kvscope_parity_work}/seeds)
  set_tests_properties(parity.seeds PROPERTIES LABELS "parity" TIMEOUT 300 SKIP_RETURN_CODE 77)

  # The example folders in assets/ (tools/make_seed_models.py): the decoder-only ones loaded into the
  # reference documents' own code (skipped, 77, without the documents); the encoder-decoder against
  # tools/kvscope_reference/encoder_decoder.py (its self-checks always; kvscope's run skipped, 77, while
  # the engine does not read the folder as an encoder-decoder); and the folders regenerate byte for byte.
  add_test(NAME parity.seed_folders
           COMMAND ${KVSCOPE_TORCH_PYTHON} ${kvscope_parity_dir}/seed_folders.py
                   --kvscope $<TARGET_FILE:kvscope> --work ${kvscope_parity_work}/seed_folders)
  add_test(NAME parity.seed_folders_encoder_decoder
           COMMAND ${KVSCOPE_TORCH_PYTHON} ${kvscope_parity_dir}/seed_folders.py --encoder-decoder
                   --kvscope $<TARGET_FILE:kvscope> --work ${kvscope_parity_work}/seed_folders_ed)
  add_test(NAME parity.seed_folders_reproducible
           COMMAND ${KVSCOPE_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}/tools/make_seed_models.py --check ${CMAKE_SOURCE_DIR}/assets)
  set_tests_properties(parity.seed_folders parity.seed_folders_encoder_decoder parity.seed_folders_reproducible
                       PROPERTIES LABELS "parity" TIMEOUT 300 SKIP_RETURN_CODE 77)

  # assets/llama-gqa, the model picker's Llama-family example, is what tools/make_llama_example.py writes.
  add_test(NAME parity.llama_example_reproducible
           COMMAND ${KVSCOPE_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}/tools/make_llama_example.py --check ${CMAKE_SOURCE_DIR}/assets)
  set_tests_properties(parity.llama_example_reproducible PROPERTIES LABELS "parity" TIMEOUT 300)

  # The embedded model's tokenizer must be exactly what its generator writes (byte for byte). Its weights
  # are trained (`kvscope train`, assets/default/README.md); train.reproducible checks that cheaply.
  add_test(NAME parity.default_tokenizer_reproducible
           COMMAND ${KVSCOPE_TORCH_PYTHON} ${CMAKE_SOURCE_DIR}/tools/make_default_model.py --tokenizer-only
                   --check ${CMAKE_SOURCE_DIR}/assets/default --work ${kvscope_parity_work}/default_model
                   --cases ${CMAKE_CURRENT_SOURCE_DIR}/data/default_tokenizer_cases.json)
  set_tests_properties(parity.default_tokenizer_reproducible PROPERTIES LABELS "parity" TIMEOUT 300)

  # Keep the source tree free of __pycache__ folders.
  get_property(kvscope_parity_tests DIRECTORY PROPERTY TESTS)
  list(FILTER kvscope_parity_tests INCLUDE REGEX "^parity\\.")
  set_tests_properties(${kvscope_parity_tests} PROPERTIES ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endif()
