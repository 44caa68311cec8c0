# kvscope train is reproducible: two short runs of the command that made assets/default (same options,
# fewer steps) must write byte-identical model folders. The full reproduction (assets/default/README.md)
# takes minutes and is documented, not run here.
set(kvscope_train_work ${CMAKE_CURRENT_BINARY_DIR}/train_work)
add_test(NAME train.reproducible
         COMMAND sh -c "set -e; rm -rf \"$1/a\" \"$1/b\"
                        \"$0\" train --steps 20 --out \"$1/a\" --log-every 10
                        \"$0\" train --steps 20 --out \"$1/b\" --log-every 10 --threads 1
                        for f in config.json model.safetensors vocab.json merges.txt; do cmp \"$1/a/$f\" \"$1/b/$f\"; done"
                 $<TARGET_FILE:kvscope> ${kvscope_train_work})
set_tests_properties(train.reproducible PROPERTIES TIMEOUT 300)
