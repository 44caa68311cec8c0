# GUI smoke tests: `kvscope gui --script ... --screenshot ...` under Xvfb, checked by tests/gui/check_gui.py
# (screenshot not blank, every panel drawn; exported attention equals a numpy recomputation from the
# exported q/k; logits equal `kvscope generate --dump-logits`). Skipped with a message when the GUI is not
# built or xvfb-run / numpy / PIL are missing.
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
  endif()
endif()
