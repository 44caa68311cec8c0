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
#   gui.compare  the Cache on vs off panel on the default model at both sizes: both charts' value and step
#              ticks label what is plotted; the FLOPs plotted equal `generate --trace`'s with and without the
#              cache; the prefill (the same work both ways) is one time, the faster median, and said so; the
#              reason line shows exactly when the step's FLOPs and times disagree, with their ratios and the
#              weights' bytes of `inspect --json`; tests/gui/check_compare.py
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
#   gui.dpi    high-DPI under real input (xdotool) at UI scales 1, 1.5 and 2 on screens 1x, 1.5x, 2x 1280x720,
#              the scale from --ui-scale and from the screen (Xft.dpi in the X resources): the dumped font is
#              16*S px and a panel title's ink on the screenshot S times its height at 1; hovered cells of the
#              attention map and the KV cache's K map are the cells under the pointer (from the map's
#              rectangle and size) with numpy's weight / k from `generate --trace`; `ui-scale` at run time
#              rebuilds the font, and 1.5 -> 2 -> 1.5 gives the layout of 1.5 (the style never scaled twice);
#              the View menu to 150 % when the window has one; no widget less visible at 1.5 and 2 than at 1
#              (first and other tabs); bad scales: one line, exit 2; tests/gui/check_dpi.py
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
#   gui.layout every panel reachable and legible at 1280x720 and 1920x1080 (a decoder-only session, paged
#              batches of 3 and 6, the encoder-decoder, a chat, the Cache lab, a Gemma 3 ids-only folder with
#              the Rotary tab, the help overlay): windows inside the viewport and not overlapping, every panel
#              a window or a tab, named items not cut off by their window; the Memory pool, every lab row, the
#              Model panel's picker, Open folder, shape line and chips wholly on screen; chat turn labels and
#              the timeline's colour notes drawn over nothing; the help lists every declared shortcut and
#              panel; tests/gui/check_layout.py
#   gui.feedback  at 1280x720: unapplied option edits shown as pending while steps use the applied options;
#              a failed model load / export shown in the Model / Export panel in the window's words, the
#              previous export no longer shown as the result, dismissed; tests/gui/check_feedback.py
#   gui.input  the interactive window driven by real X events (xdotool: typing, clicks, Space, Backspace;
#              Space+Backspace tapped faster than a frame with both cores busy; a hover tooltip),
#              widgets found through --layout-dump; tests/gui/check_input.py
#   gui.lessons every guided lesson (assets/lessons/) end to end in script mode (lesson N, lesson-do, lesson-next),
#              the values its checks compared against tokenize, generate --trace + numpy, config.json, the
#              Memory dump and lab --json; each lesson's first step drawn at 1280x720; lesson 4 on random weights
#              fails with its message, an early Next, a bad lesson file and --lesson 99 refused in one line;
#              tests/gui/check_lessons.py
#   gui.lessons_input  the interactive window opened with --lesson 1 (xdotool): Next disabled until the check
#              passes, Do it for me / Next / Finish by mouse through all three steps (the check's row count =
#              `kvscope tokenize`'s), Close; tests/gui/check_lessons_input.py
#   gui.help_input  F1, ?, Escape and the Controls' "?" button open and close the help overlay; a ? typed into
#              the prompt box stays there; tests/gui/check_help_input.py
#   gui.workspaces_input  keys 1-5 and the bar switch workspaces without changing the session (steps, prompt,
#              status, shown step, layer, head); a digit typed into the prompt stays there; closed by SIGTERM,
#              the window leaves settings.json with its workspace and size, and a second window opens there;
#              a settings.json the user wrote is honoured and kept byte for byte, a bad one gives the
#              defaults, each with one warning line; tests/gui/check_workspaces_input.py
#   gui.first_minutes_input  a newcomer's first five minutes (xdotool): the Learn menu, lessons 1 and 2 followed
#              by the learner's own keys and clicks (Space, Next, the cache switch), never "Do it for me": every
#              check passes, the prompt's tokens as `kvscope tokenize` counts them, the FLOPs ratio >= 5;
#              tests/gui/check_first_minutes_input.py (--shots DIR: the pictures of docs/window.md)
#
# Every script takes --kvscope BIN --work DIR (+ the arguments given below) and shares tests/gui/guitest.py
# (arguments, xvfb-run at a size, script runs, PNG and JSON reading, one-line failures); it exits 77 (skipped)
# when a tool it needs is missing.
#
#   ctest -L gui
function(kvscope_gui_test name script timeout)
  add_test(NAME gui.${name}
           COMMAND ${KVSCOPE_GUI_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gui/${script}.py --kvscope $<TARGET_FILE:kvscope>
                   ${ARGN} --work ${CMAKE_CURRENT_BINARY_DIR}/gui_work/${name})
  set_tests_properties(gui.${name} PROPERTIES LABELS "gui" TIMEOUT ${timeout} SKIP_RETURN_CODE 77
                       ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endfunction()

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
    kvscope_gui_test(smoke check_gui 300)
    kvscope_gui_test(memory check_memory 300 --model ${CMAKE_SOURCE_DIR}/assets/default)
    kvscope_gui_test(encoder_decoder check_encoder_decoder 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(rotary check_rotary 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(rotary_input check_rotary_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(logit_lens check_logit_lens 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(compare check_compare 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(kv_quant check_kv_quant 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(figures check_figures 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(figures_input check_figures_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(lab check_lab 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(cache_edits check_cache_edits 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(cache_edits_input check_cache_edits_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(eviction_input check_eviction_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(kv_quant_input check_kv_quant_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(lab_input check_lab_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(dpi check_dpi 1200 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(kv_groups_input check_kv_groups_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(layer_windows_input check_layer_windows_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(chat check_chat 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(chat_input check_chat_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(help_input check_help_input 300)
    kvscope_gui_test(workspaces_input check_workspaces_input 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(first_minutes_input check_first_minutes_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(lessons check_lessons 900 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(lessons_input check_lessons_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(kv_groups check_kv_groups 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(layer_windows check_layer_windows 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(sink_positions check_sink_positions 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(long_context check_long_context 300 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(long_context_input check_long_context_input 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(layout check_layout 600 --assets ${CMAKE_SOURCE_DIR}/assets)
    kvscope_gui_test(feedback check_feedback 600)
    find_program(KVSCOPE_XDOTOOL xdotool)
    find_program(KVSCOPE_IMPORT import)
    if(KVSCOPE_XDOTOOL AND KVSCOPE_IMPORT)
      kvscope_gui_test(input check_input 600)
    else()
      message(STATUS "gui.input skipped: xdotool or ImageMagick's import not found (apt install xdotool imagemagick)")
    endif()
  endif()
endif()
