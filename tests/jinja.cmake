# The Jinja engine (core/text/jinja/) against Jinja2 on real chat templates (tests/data/chat_templates/,
# sources.json says where each comes from):
#   1. "jinja: Jinja2 renderings"        tests/reference/chat_template_reference.py (Debian's python3-jinja2,
#                                        set up as transformers' apply_chat_template sets it up) renders every
#                                        template over hand-written and seeded random conversations, and the
#                                        one-rule templates of tests/data/jinja_snippets.json, into
#                                        ${CMAKE_BINARY_DIR}/jinja_reference/expected.jsonl
#   2. "jinja: templates == Jinja2"      jinja_tests "[reference]" renders the same and compares every byte;
#                                        where Jinja2 raises, kvscope must refuse (naming raise_exception's
#                                        message); it prints the first difference per template
# Without /usr/bin/python3 and its jinja2 both are reported as skipped, saying why.
find_program(KVSCOPE_JINJA_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(KVSCOPE_JINJA_PYTHON)
  execute_process(COMMAND ${KVSCOPE_JINJA_PYTHON} -c "import jinja2"
                  RESULT_VARIABLE kvscope_jinja_missing OUTPUT_QUIET ERROR_QUIET)
endif()
set(kvscope_jinja_out ${CMAKE_BINARY_DIR}/jinja_reference)
if(TARGET jinja_tests AND KVSCOPE_JINJA_PYTHON AND NOT kvscope_jinja_missing)
  add_test(NAME "jinja: Jinja2 renderings"
           COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1
                   ${KVSCOPE_JINJA_PYTHON} ${CMAKE_SOURCE_DIR}/tests/reference/chat_template_reference.py
                   ${CMAKE_SOURCE_DIR}/tests/data/chat_templates ${kvscope_jinja_out}/expected.jsonl
                   ${CMAKE_SOURCE_DIR}/tests/data/jinja_snippets.json)
  set_tests_properties("jinja: Jinja2 renderings" PROPERTIES FIXTURES_SETUP jinja_reference TIMEOUT 300)
  file(MAKE_DIRECTORY ${kvscope_jinja_out})

  add_test(NAME "jinja: templates == Jinja2" COMMAND jinja_tests "[reference]")
  set_tests_properties("jinja: templates == Jinja2" PROPERTIES
    FIXTURES_REQUIRED jinja_reference TIMEOUT 300 ENVIRONMENT "KVSCOPE_JINJA_EXPECTED=${kvscope_jinja_out}/expected.jsonl")
else()
  foreach(name "jinja: Jinja2 renderings" "jinja: templates == Jinja2")
    add_test(NAME "${name}" COMMAND sh -c "echo 'skipped: /usr/bin/python3 without jinja2 (apt install python3-jinja2)'; exit 77")
    set_tests_properties("${name}" PROPERTIES SKIP_RETURN_CODE 77)
  endforeach()
endif()

# 3. "jinja: kvscope chat-template"      tests/cli/check_chat_template.py: the command's stdout against Jinja2 on
#                                        a sample of the templates, --model folders (chat_template.jinja first),
#                                        --json's ids, and bad inputs (exit 2, one line)
if(TARGET kvscope AND KVSCOPE_JINJA_PYTHON AND NOT kvscope_jinja_missing)
  add_test(NAME "jinja: kvscope chat-template"
           COMMAND ${CMAKE_COMMAND} -E env PYTHONDONTWRITEBYTECODE=1
                   ${KVSCOPE_JINJA_PYTHON} ${CMAKE_SOURCE_DIR}/tests/cli/check_chat_template.py
                   --kvscope $<TARGET_FILE:kvscope> --work ${CMAKE_CURRENT_BINARY_DIR}/cli_work/chat_template)
  set_tests_properties("jinja: kvscope chat-template" PROPERTIES TIMEOUT 300)
endif()
