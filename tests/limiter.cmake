# Compute limiter (src/limiter, docs/limiter.md). The tests run
# limiter_worker processes under the preloaded library over the fake
# driver's simulated GPU time and measure the shares they get; each prints
# what it measured. The suite stays under a minute on two cores.
add_executable(limiter_worker limiter/lim_worker.c)
target_link_libraries(limiter_worker PRIVATE fakecuda_driver dl pthread)
add_dependencies(limiter_worker libcushare)

function(cs_limiter_test name src)
  cs_add_test(${name} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/limiter/${src} ${ARGN})
  add_dependencies(${name} limiter_worker)
  set_tests_properties(${name} PROPERTIES TIMEOUT 60)
endfunction()

cs_limiter_test(limiter_law test_law.c ${CMAKE_SOURCE_DIR}/src/limiter/law.c
  LABELS sanitize)
cs_limiter_test(limiter_sig test_sig.c ${CMAKE_SOURCE_DIR}/src/limiter/sig.c
  LABELS sanitize)
cs_limiter_test(limiter_fair test_fair.c ${CMAKE_SOURCE_DIR}/src/limiter/fair.c
  LABELS sanitize)
cs_limiter_test(limiter_board test_board.c ${CMAKE_SOURCE_DIR}/src/limiter/board.c
  $<TARGET_OBJECTS:cs_common> LABELS sanitize)
cs_limiter_test(limiter_board_files test_board_files.c ${CMAKE_SOURCE_DIR}/src/limiter/board.c
  $<TARGET_OBJECTS:cs_common> LABELS sanitize)
cs_limiter_test(limiter_board_truncate test_board_truncate.c)
# Not under the sanitizers: they take SIGBUS for themselves.
cs_limiter_test(limiter_board_stamps_guard test_board_stamps_guard.c
  ${CMAKE_SOURCE_DIR}/src/limiter/board.c $<TARGET_OBJECTS:cs_common>)
# Plays a second, hostile user when run as root (tests/multiuser.h);
# skipped, with the reason printed, where that is impossible.
cs_limiter_test(limiter_board_hostile test_board_hostile.c
  ${CMAKE_SOURCE_DIR}/src/limiter/board.c $<TARGET_OBJECTS:cs_common>)
# Two root "pods" (mount namespaces) on one board: one cannot lock, squat
# or disown the other's file (root only; skipped, visibly, otherwise).
cs_limiter_test(limiter_board_pod test_board_pod.c
  ${CMAKE_SOURCE_DIR}/src/limiter/board.c $<TARGET_OBJECTS:cs_common>)
set_tests_properties(limiter_board_pod PROPERTIES TIMEOUT 120)
cs_limiter_test(limiter_share_long test_share.c ARGS long)
cs_limiter_test(limiter_share_short test_share.c ARGS short)
cs_limiter_test(limiter_paths test_paths.c)
cs_limiter_test(limiter_capture test_capture.c)
foreach(case disable default perdev)
  cs_limiter_test(limiter_policy_${case} test_policy.c ARGS ${case})
endforeach()
foreach(case recovery priority timeslice fulfil windows boost joined samples first)
  cs_limiter_test(limiter_contend_${case} test_contend.c ARGS ${case})
endforeach()
foreach(case launchbound floor saturating)
  cs_limiter_test(limiter_conserve_${case} test_conserve.c ARGS ${case})
endforeach()
# On a fake GPU that time-slices between contexts (FAKECUDA_TIMESLICE_US).
foreach(case launchbound equal)
  cs_limiter_test(limiter_slice_${case} test_conserve.c ARGS slice_${case})
endforeach()
cs_limiter_test(limiter_tenant test_tenant.c)
# Yield on activity: a lower-priority tenant launches only in a
# higher-priority one's quiet gaps, and freely once it has gone.
cs_limiter_test(limiter_priority_yield test_priority_yield.c ARGS pod)
# The same with the higher tenant in another pod (root: unshare -m).
cs_limiter_test(limiter_priority_yield_pods test_priority_yield.c ARGS pods)
# A higher-priority tenant that leaves no quiet gap keeps the lower one
# out for as long as it is active: the lower one stays busy on the board.
cs_limiter_test(limiter_priority_kept_out test_priority_yield.c ARGS kept-out)
# Beside a lower-priority tenant on a time-slicing GPU, the busy time NVML
# counts beyond both tenants' uses never paces the higher-priority one.
cs_limiter_test(limiter_priority_phantom test_priority_phantom.c)
# Concurrent devices (MPS): the fake MPS control daemon serves the clients.
foreach(case alone together filling)
  cs_limiter_test(limiter_mps_${case} test_mps.c ARGS ${case})
  set_property(TEST limiter_mps_${case} APPEND PROPERTY ENVIRONMENT
    "CS_FAKE_MPS_CONTROL=${CS_FAKE_DIR}/fake-nvidia-cuda-mps-control")
  add_dependencies(limiter_mps_${case} fakecuda_mps_control)
endforeach()
cs_limiter_test(limiter_suspend test_suspend.c)
foreach(case plain hami)
  cs_limiter_test(limiter_signals_${case} test_signals.c ARGS ${case})
endforeach()
cs_limiter_test(limiter_nolimit test_nolimit.c)
cs_limiter_test(limiter_free_path test_free.c)
# The interposer linked into the test itself (without dlsym.c), so the
# threaded limiter also runs under ThreadSanitizer.
set(CS_LIMITER_INPROC_SRC ${CS_LIB_SRC})
list(FILTER CS_LIMITER_INPROC_SRC EXCLUDE REGEX "src/hook/dlsym\\.c$")
cs_limiter_test(limiter_threads test_threads.c ${CS_LIMITER_INPROC_SRC}
  $<TARGET_OBJECTS:cs_common> LIBS fakecuda_driver LABELS tsan)

# The benchmark's GPU workload (bench/limiter), built next to `cushare` so
# `cushare bench limiter` finds it; it dlopens libcuda.so.1 at run time.
add_executable(limiter_workload ${CMAKE_SOURCE_DIR}/bench/limiter/workload.c)
target_include_directories(limiter_workload PRIVATE ${CMAKE_SOURCE_DIR}/bench/limiter)
target_link_libraries(limiter_workload PRIVATE dl)

# `cushare bench limiter` end to end on the fake (short runs; the table,
# the CSV and the limit row are checked, not the two-tenant ratio, which
# the fake's event timestamps distort: docs/limiter.md). Its exit status
# must be 0, or 1 with the FAIL verdict line: a target missed in a 0.5 s
# run on a shared CPU is printed, not failed (precision is what
# limiter_share_* test); a crash, usage error or missing verdict fails.
add_test(NAME limiter_bench_smoke COMMAND sh -c
  "rm -rf '${CMAKE_BINARY_DIR}/tmp/limiter/bench' && mkdir -p '${CMAKE_BINARY_DIR}/tmp/limiter/bench' && \
   FAKECUDA_STATE='${CMAKE_BINARY_DIR}/tmp/limiter/bench/gpu.state' nice -n -10 '${CS_CLI}' bench limiter \
   --secs 0.5 --warmup 0.2 --limits 50 --start-delay 0.5 --launchcost none \
   --out '${CMAKE_BINARY_DIR}/tmp/limiter/bench' > '${CMAKE_BINARY_DIR}/tmp/limiter/bench/out.txt' 2>&1; \
   rc=$?; cat '${CMAKE_BINARY_DIR}/tmp/limiter/bench/out.txt'; \
   test $rc -le 1 || { echo \"cushare bench limiter exited $rc\"; exit 1; }; \
   test $rc -eq 0 || grep -q '^FAIL: [0-9]* targets\\? missed' '${CMAKE_BINARY_DIR}/tmp/limiter/bench/out.txt' || \
     { echo \"cushare bench limiter exited 1 without a verdict\"; exit 1; }; \
   grep -q -- '--sm 50 (force) .*%' '${CMAKE_BINARY_DIR}/tmp/limiter/bench/out.txt' && \
   grep -q 'launch-bound' '${CMAKE_BINARY_DIR}/tmp/limiter/bench/out.txt' && \
   test -s '${CMAKE_BINARY_DIR}/tmp/limiter/bench/limiter-bench.csv'")
set_tests_properties(limiter_bench_smoke PROPERTIES TIMEOUT 60
  ENVIRONMENT "${CS_TEST_ENV};FAKECUDA_NS_PER_BLOCK=1")

# The same with --mps (tests/limiter/bench_mps.sh says what each case
# checks): the bench starts, or joins, the fake MPS control daemon and
# prints each mix time-sliced, concurrent and bare MPS side by side.
foreach(case started joined usage)
  add_test(NAME limiter_bench_mps_${case} COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/limiter/bench_mps.sh
    ${CS_CLI} ${CMAKE_BINARY_DIR}/tmp/limiter/bench_mps_${case} ${case})
  set_tests_properties(limiter_bench_mps_${case} PROPERTIES TIMEOUT 60
    ENVIRONMENT "${CS_TEST_ENV};FAKECUDA_NS_PER_BLOCK=1;CUSHARE_MPS_CONTROL=${CS_FAKE_DIR}/fake-nvidia-cuda-mps-control")
endforeach()

# The bench's own-speed row, computed from a stub workload's rates and
# gpu_us (tests/limiter/bench_own_speed.sh says what it checks).
add_test(NAME limiter_bench_own_speed COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/limiter/bench_own_speed.sh
  ${CS_CLI} ${CMAKE_BINARY_DIR}/tmp/limiter/bench_own_speed)
set_tests_properties(limiter_bench_own_speed PROPERTIES TIMEOUT 60 ENVIRONMENT "${CS_TEST_ENV}")

# The limiter tests measure shares of simulated GPU time over sub-second
# windows: they run one at a time so a busy 2-core CI machine does not
# starve the processes whose pacing they measure. (The smoke test above
# checks the bench pipeline, not its precision: limiter_share_* do that.)
get_property(cs_all_tests DIRECTORY PROPERTY TESTS)
foreach(t ${cs_all_tests})
  if(t MATCHES "^limiter_")
    set_tests_properties(${t} PROPERTIES RUN_SERIAL TRUE)
  endif()
endforeach()
