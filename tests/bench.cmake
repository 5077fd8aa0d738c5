# `cushare bench init` (docs/bench-init.md): the percentile definition as a
# unit test, and the whole command on the fake driver. The command finds
# libcushare.so through CUSHARE_LIBRARY (CS_TEST_ENV) and the fake
# libcuda.so.1 through LD_LIBRARY_PATH; no test needs a GPU or gnuplot.

cs_add_test(bench_init_percentiles
  SOURCES bench/test_percentiles.c ${CMAKE_SOURCE_DIR}/src/bench/stats.c
  LABELS unit sanitize)

# A preload whose cuInit kills the process: baseline workers resolve it.
add_library(bench_crash_cuinit SHARED bench/crash_cuinit.c)
set_target_properties(bench_crash_cuinit PROPERTIES C_VISIBILITY_PRESET hidden)

foreach(scenario smoke failures crash timeout json usage)
  cs_add_test(bench_init_${scenario} SOURCES bench/test_bench_init.c
    ARGS ${scenario}
    LABELS bench
    ENV "CS_BENCH_CRASH_LIB=$<TARGET_FILE:bench_crash_cuinit>")
  add_dependencies(bench_init_${scenario} bench_crash_cuinit)
endforeach()

# `cushare bench` finds the harness cushare-bench and execs it, from the
# build tree and from an install prefix, and says what to do without it
# (tests/bench/harness.sh says what each case checks).
foreach(case missing installed)
  add_test(NAME bench_harness_${case} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench/harness.sh ${case})
  set_tests_properties(bench_harness_${case} PROPERTIES LABELS bench TIMEOUT 120
    ENVIRONMENT "${CS_TEST_ENV};CS_BUILD_DIR=${CMAKE_BINARY_DIR};CS_INSTALL_BINDIR=${CMAKE_INSTALL_PREFIX}/bin")
endforeach()

# The fair-share benchmark (bench/limiter/fair.py): its medians, spreads and
# worst-of-the-repetitions verdicts, and its warm tenants driven end to end
# with stub workloads that answer from a table (no GPU, no timing).
add_test(NAME bench_fair_report
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/bench/fair_report_test.py)
set_tests_properties(bench_fair_report PROPERTIES LABELS bench TIMEOUT 120)
