# `cushare run` (src/cli/cmd_run.c): the limits it is given, signal relay,
# and what a SIGKILL of it leaves. One source; the case is its argument.
# The commands run under the preload, so no sanitizer build runs them.
foreach(case limits signals killed terminal)
  cs_add_test(cli_run_${case} SOURCES cli/test_run.c LIBS cs_common fakecuda_driver
    ARGS ${case} ENV "CUSHARE_LOG_LEVEL=warn" "FAKECUDA_MEM=1g")
  set_tests_properties(cli_run_${case} PROPERTIES TIMEOUT 120)
endforeach()
