# GUI tests under Xvfb. Skipped with a message when the GUI is not built or a tool is missing.
#   gui.smoke  `kvscope gui --script ... --screenshot ...`, checked by tests/gui/check_gui.py (screenshot
#              not blank, every panel drawn; exported attention equals a numpy recomputation from the
#              exported q/k; logits equal `kvscope generate --dump-logits`)
#   gui.memory a batch of 3 sequences sharing a prompt over one block pool (script lines options, suffix,
#              sequence, memory-json): the Memory panel's figures (blocks mapped vs unshared, copies on
#              write, positions adopted), also after step back, against numbers computed from token counts;
#              a prompt cache file written, then loaded by a longer prompt, a damaged one refused; Save
#              figure's block tables hold the tables' pool block ids, shaded by sharer count; tests/gui/check_memory.py
#   gui.encoder_decoder  assets/encoder-decoder: loaded from the default model with no input typed, it steps
#              with the default source and an empty prompt; with a typed source and prompt the cross map
#              shown (S columns of source tokens) and the encoder map equal `kvscope generate --trace` and the
#              independent PyTorch reference (tools/kvscope_reference/encoder_decoder.py); both caches drawn;
#              tests/gui/check_encoder_decoder.py
#   gui.rotary the Rotary panel on assets/llama-gqa, as shipped and with llama3 rope_scaling: per-pair
#              frequencies and angles, the selected key and query turned back to before rotation, the score
#              by distance, against numpy from the rows `kvscope generate --trace` exports; its Save figure (SVG):
#              every line an affine image of numpy's values, the marker at the scored distance; tests/gui/check_rotary.py
#   gui.rotary_input  the interactive window on assets/llama-gqa (xdotool): Prefill, the Rotary tab, a click in
#              the attention map; the tab's positions follow the click and its score equals numpy's q·k/sqrt(D)
#              from `generate --trace`; tests/gui/check_rotary_input.py
#   gui.kv_groups_input  the interactive window on assets/llama-gqa (xdotool): clicks on query heads and K/V
#              heads in the KV cache panel select the query head and its K/V head (or the K/V head's group),
#              against config.json; tests/gui/check_kv_groups_input.py
#   gui.layer_windows_input  the interactive window on a Gemma 3 folder (xdotool): Prefill, two Decode
#              steps, then "layer +" / "layer -": the timeline's note and the per-layer fill follow each
#              layer's window from config.json; tests/gui/check_layer_windows_input.py
#   gui.logit_lens  the Logit lens tab on assets/llama-gqa at both sizes: for a selected position, every
#              depth's five tokens and probabilities equal numpy's final norm and output layer over the
#              residual stream `generate --trace` exports; tests/gui/check_logit_lens.py
#   gui.kv_quant  the K/V quant tab on the default model at both sizes: for int8, fp8 and int4 (G 8, R 4)
#              its largest K error, V error, score change and weight change equal numpy's reconstruction
#              (tests/reference/kv_quant_reference.py) of the rows `generate --trace` exports; an int8 session is named
#              instead of compared; a group that does not divide D is refused; tests/gui/check_kv_quant.py
#   gui.lab    the Cache lab tab (script `lab`) on the default model's prompt at both sizes: every row's bytes
#              per token, loss, KL and top-1 equal `kvscope lab --json` on the same text; after a prefill the
#              tab says the sequence changed; a refused configuration keeps the last measurement;
#              tests/gui/check_lab.py
#   gui.cache_edits  the Cache edits tab on assets/llama-gqa at both sizes: `evict` shows the next
#              prediction's KL, top-1 and movers equal to numpy's from the exported logits of an unedited and
#              the edited run, the export lists the edit, back back gives the unedited logits bit for bit;
#              bad edits: one line and a non-zero exit, or the tab's problem box; tests/gui/check_cache_edits.py
#   gui.cache_edits_input  the same tab under real input (xdotool): the position stepper and Evict give what
#              the script shows, Restore of an unevicted position shows the problem box, Step back undoes the
#              edit; tests/gui/check_cache_edits_input.py
#   gui.eviction_input  Session options' eviction controls under real input (xdotool) on assets/llama-gqa: h2o
#              picked in the combo, a budget typed, Apply, Prefill, two Space decodes, Export session (all heads):
#              every eviction equals numpy replaying h2o from the exported weights, and hovering each row of the
#              KV cache panel's K map shows "evicted" with numpy's deciding score exactly where numpy evicted; the
#              timeline marks the evicting steps (a mark's tooltip: positions per layer and K/V head, score range),
#              the Mask panel says "N visible, M evicted", Cache on vs off says why it is off;
#              tests/gui/check_eviction_input.py
#   gui.kv_quant_input  the K/V quant tab under real input on the default model: format radios clicked (fp8,
#              int8), cells of the K and V error maps hovered: each tooltip's position, channel and error equal
#              numpy's reconstruction (tests/reference/kv_quant_reference.py) of the rows `generate --trace` exports;
#              tests/gui/check_kv_quant_input.py
#   gui.lab_input  the Cache lab tab under real input: configurations typed (one an h2o budget), Measure clicked:
#              every row equals `kvscope lab --json` on the same text; after Prefill the tab says the sequence
#              changed; tests/gui/check_lab_input.py
#   gui.chat   a Llama 3 chat folder (tests/cli/check_chat.py builds it), three `chat` lines at both sizes: the
#              timeline's turn marks, the conversation shown and the Cache on vs off panel's rows reused /
#              computed per turn (cache off: the whole conversation) against `kvscope chat --json` (with and
#              without --no-cache); bad messages refused in one line with the turns unchanged; step back
#              across a turn; tests/gui/check_chat.py
#   gui.chat_input  the interactive window on the same folder (xdotool): typing into the chat box and Enter
#              twice; the turn marks equal `kvscope chat --json`'s; tests/gui/check_chat_input.py
#   gui.kv_groups  K/V head groups on a 9-query / 3-K/V-head folder at 1280x720 and 1920x1080: the KV cache
#              panel's groups, title and bytes meter (model, multi-head, multi-query, held) and the all-heads
#              view's group frames against config.json; a multi-head folder shows none; tests/gui/check_kv_groups.py
#   gui.layer_windows  a Gemma 3 folder (sliding window 4, every third layer full) at both sizes: the KV cache
#              panel's per-layer fill (seen of stored) and stated saving, and the timeline's note for a
#              sliding and a full layer, against config.json; tests/gui/check_layer_windows.py
#   gui.sink_positions  Controls' "sinks at cache positions" (script sink-cache=1) on assets/llama-gqa: the
#              Attention panel's weights equal StreamingLLM's numbering computed in numpy from the rows
#              `generate --trace` exports, and differ from text positions; tests/gui/check_sink_positions.py
#   gui.long_context  an 8192-token prefill of a random rotary model: the attention overview's texels equal
#              numpy's max of the softmax weights over each block (layer 0 recomputed from the weights), no more
#              texels than the map's pixels; zoomed 128x the texture holds exact cells equal to numpy's;
#              tests/gui/check_long_context.py
#   gui.long_context_input  the same 8192-token prefill in the interactive window (xdotool): ids typed, Prefill and
#              "head +" clicked, the map zoomed with the mouse wheel (the reported zoom grows 1.25x a notch and keeps
#              the cell under the mouse; the panel does not scroll), a screenshot with cells, cells hovered: the tooltip's query and key are the cell under the
#              pointer and its weight equals numpy's; zoomed back out, a hovered pixel's block maximum equals
#              numpy's; tests/gui/check_long_context_input.py
#   gui.figures  Save figure (script save-figure) on the default model at 1280x720: the KV cache, mask, K/V
#              quantization, heads and cache on/off figures as PNG (scale 2) and SVG; the SVGs parse as XML with
#              their titles and axis names; every cell's colour (SVG fill and PNG pixel), read back through the
#              figure's colour bar, equals numpy's value from `generate --trace` rows, tests/reference/kv_quant_reference.py
#              and `kvscope heads --json`; a file of another kind in the way and a figure before any step are
#              refused in one line, changing nothing; tests/gui/check_figures.py
#   gui.figures_input  the KV cache panel's Save figure button clicked in the interactive window (xdotool):
#              the line beside it names the K and V files written; a file of another kind in the way is
#              refused in that line and kept; tests/gui/check_figures_input.py
#   gui.layout every panel reachable and legible at 1280x720 and 1920x1080 (a decoder-only session, a paged
#              batch, the encoder-decoder): windows inside the viewport and not overlapping, every panel a
#              window or a tab, named items not cut off by their window; tests/gui/check_layout.py
#   gui.feedback  at 1280x720: unapplied option edits shown as pending while steps use the applied options;
#              a failed model load / export shown in the Model / Export panel in the window's words, the
#              previous export no longer shown as the result, dismissed; tests/gui/check_feedback.py
#   gui.input  the interactive window driven by real X events (xdotool: typing, clicks, Space, Backspace;
#              Space+Backspace tapped faster than a frame with both cores busy; a hover tooltip),
#              widgets found through --layout-dump; tests/gui/check_input.py
#
#   ctest -L gui
if(KVSCOPE_GUI)
  find_program(KVSCOPE_XVFB_RUN xvfb-run)
  find_program(KVSCOPE_GUI_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
  if(KVSCOPE_GUI_PYTHON)
    execute_process(COMMAND ${KVSCOPE_GUI_PYTHON} -c "import numpy, PIL"
                    RESULT_VARIABLE kvscope_gui_py_missing OUTPUT_QUIET ERROR_QUIET)
  endif()
  if(NOT KVSCOPE_XVFB_RUN)
    message(STATUS "gui tests skipped: xvfb-run not found (apt install xvfb)")
  elseif(NOT KVSCOPE_GUI_PYTHON OR kvscope_gui_py_missing)
    message(STATUS "gui tests skipped: /usr/bin/python3 with numpy and PIL not found (apt install python3-numpy python3-pil)")
  else()
    add_test(NAME gui.smoke
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_gui.py
                     --kvscope $<TARGET_FILE:kvscope> --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/smoke)
    set_tests_properties(gui.smoke PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.memory
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_memory.py
                     --kvscope $<TARGET_FILE:kvscope> --model ${CMAKE_SOURCE_DIR}/assets/default
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/memory)
    set_tests_properties(gui.memory PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.encoder_decoder
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_encoder_decoder.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/encoder_decoder)
    set_tests_properties(gui.encoder_decoder PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.rotary
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_rotary.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/rotary)
    set_tests_properties(gui.rotary PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.rotary_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_rotary_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/rotary_input)
    set_tests_properties(gui.rotary_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.logit_lens
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_logit_lens.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/logit_lens)
    set_tests_properties(gui.logit_lens PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.kv_quant
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_kv_quant.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/kv_quant)
    set_tests_properties(gui.kv_quant PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.figures
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_figures.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/figures)
    set_tests_properties(gui.figures PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.figures_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_figures_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/figures_input)
    set_tests_properties(gui.figures_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.lab
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_lab.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/lab)
    set_tests_properties(gui.lab PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.cache_edits
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_cache_edits.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/cache_edits)
    set_tests_properties(gui.cache_edits PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.cache_edits_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_cache_edits_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/cache_edits_input)
    set_tests_properties(gui.cache_edits_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.eviction_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_eviction_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/eviction_input)
    set_tests_properties(gui.eviction_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.kv_quant_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_kv_quant_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/kv_quant_input)
    set_tests_properties(gui.kv_quant_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.lab_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_lab_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/lab_input)
    set_tests_properties(gui.lab_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.kv_groups_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_kv_groups_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/kv_groups_input)
    set_tests_properties(gui.kv_groups_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.layer_windows_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_layer_windows_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/layer_windows_input)
    set_tests_properties(gui.layer_windows_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.chat
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_chat.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/chat)
    set_tests_properties(gui.chat PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.chat_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_chat_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/chat_input)
    set_tests_properties(gui.chat_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.kv_groups
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_kv_groups.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/kv_groups)
    set_tests_properties(gui.kv_groups PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.layer_windows
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_layer_windows.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/layer_windows)
    set_tests_properties(gui.layer_windows PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.sink_positions
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_sink_positions.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/sink_positions)
    set_tests_properties(gui.sink_positions PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.long_context
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_long_context.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/long_context)
    set_tests_properties(gui.long_context PROPERTIES LABELS "gui" TIMEOUT 300)
    add_test(NAME gui.long_context_input
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_long_context_input.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/long_context_input)
    set_tests_properties(gui.long_context_input PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.layout
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_layout.py
                     --kvscope $<TARGET_FILE:kvscope> --assets ${CMAKE_SOURCE_DIR}/assets
                     --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/layout)
    set_tests_properties(gui.layout PROPERTIES LABELS "gui" TIMEOUT 600)
    add_test(NAME gui.feedback
             COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_feedback.py
                     --kvscope $<TARGET_FILE:kvscope> --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/feedback)
    set_tests_properties(gui.feedback PROPERTIES LABELS "gui" TIMEOUT 600)
    find_program(KVSCOPE_XDOTOOL xdotool)
    find_program(KVSCOPE_IMPORT import)
    if(KVSCOPE_XDOTOOL AND KVSCOPE_IMPORT)
      add_test(NAME gui.input
               COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/check_input.py
                       --kvscope $<TARGET_FILE:kvscope> --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/input)
      set_tests_properties(gui.input PROPERTIES LABELS "gui" TIMEOUT 600)
    else()
      message(STATUS "gui.input skipped: xdotool or ImageMagick's import not found (apt install xdotool imagemagick)")
    endif()
  endif()
endif()
