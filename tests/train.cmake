# kvscope train is reproducible: two short runs of the recipe that made assets/default
# (tools/train_default_model.sh --quick: the same options for 16 steps, through both curriculum phases)
# must write byte-identical model folders, one of them on a single thread. The full reproduction
# (assets/default/README.md) takes minutes and is documented, not run here.
set(kvscope_train_work ${CMAKE_CURRENT_BINARY_DIR}/train_work)
add_test(NAME train.reproducible
         COMMAND sh -c "set -e; rm -rf \"$1/a\" \"$1/b\"; mkdir -p \"$1\"
                        sh \"$2\" \"$0\" \"$1/a\" --quick
                        sh \"$2\" \"$0\" \"$1/b\" --quick --threads 1
                        for f in config.json model.safetensors vocab.json merges.txt; do cmp \"$1/a/$f\" \"$1/b/$f\"; done"
                 $<TARGET_FILE:kvscope> ${kvscope_train_work} ${CMAKE_SOURCE_DIR}/tools/train_default_model.sh)
set_tests_properties(train.reproducible PROPERTIES TIMEOUT 300)
