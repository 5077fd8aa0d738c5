# `cushare run` (src/cli/cmd_run.c): the limits it is given, signal relay,
# and what a SIGKILL of it leaves. One source; the case is its argument.
# The commands run under the preload, so no sanitizer build runs them.
foreach(case limits signals killed terminal)
  cs_add_test(cli_run_${case} SOURCES cli/test_run.c LIBS cs_common fakecuda_driver
    ARGS ${case} ENV "CUSHARE_LOG_LEVEL=warn" "FAKECUDA_MEM=1g")
  set_tests_properties(cli_run_${case} PROPERTIES TIMEOUT 120)
endforeach()
# cli_help_errors: every subcommand's help and `cushare help CMD`, each
# usage error documented in docs/cli.md (text and exit status 2), and the
# words of `cushare top`'s frame.
add_test(NAME cli_help_errors COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/help_errors.sh)
set_tests_properties(cli_help_errors PROPERTIES
  ENVIRONMENT "${CS_TEST_ENV};CS_BUILD_DIR=${CMAKE_BINARY_DIR};CS_SOURCE_DIR=${CMAKE_SOURCE_DIR};CUSHARE_LOG_LEVEL=warn;FAKECUDA_MEM=16g"
  TIMEOUT 180)
