# Tests of the test tool tests/fakecuda (fake libcuda.so.1 / libnvidia-ml.so.1,
# never shipped). Each is fast (< 2 s) and runs in the sanitizer build too.
set(FAKECUDA_TEST_DIR ${CMAKE_CURRENT_LIST_DIR}/fakecuda)

function(fakecuda_test name source)
  cs_add_test(${name} SOURCES ${FAKECUDA_TEST_DIR}/${source} LABELS fakecuda sanitize tsan ${ARGN})
  target_compile_definitions(${name} PRIVATE FAKECUDA_DIR="${CMAKE_BINARY_DIR}/fakecuda")
endfunction()

# dlopen()s the built fakes and dlsym()s every row of hooks.def / drv.def.
fakecuda_test(fake_exports_every_hook test_fake_exports.c)
fakecuda_test(fake_procaddress test_fake_procaddress.c)
fakecuda_test(fake_multiprocess_memory test_fake_multiprocess_memory.c
  LIBS fakecuda_driver fakecuda_nvml)
fakecuda_test(fake_time_model test_fake_time_model.c
  LIBS fakecuda_driver fakecuda_nvml)
# Work reaching the device after a submission latency (FAKECUDA_SUBMIT_US).
fakecuda_test(fake_submit test_fake_submit.c LIBS fakecuda_driver fakecuda_nvml)
# The time-slicing device (FAKECUDA_TIMESLICE_US, fake_slice.c).
fakecuda_test(fake_timeslice test_fake_timeslice.c
  LIBS fakecuda_driver fakecuda_nvml)
fakecuda_test(fake_visible_devices test_fake_visible_devices.c
  LIBS fakecuda_driver fakecuda_nvml)
fakecuda_test(fake_memory_kinds test_fake_memory_kinds.c
  LIBS fakecuda_driver fakecuda_nvml
  ENV FAKECUDA_FAIL_cuMemAllocManaged=2 FAKECUDA_NVML_PID_OFFSET=100000)
fakecuda_test(fake_threads test_fake_threads.c LIBS fakecuda_driver fakecuda_nvml)
# NVML's process samples taken on the driver's clock, newer-than-stamp only.
fakecuda_test(fake_nvml_samples test_fake_nvml_samples.c
  LIBS fakecuda_driver fakecuda_nvml ENV FAKECUDA_NVML_SAMPLE_MS=50)
# Power / DVFS model; re-executes itself once per configuration (~2.2 s).
fakecuda_test(fake_power_model test_fake_power_model.c
  LIBS fakecuda_driver fakecuda_nvml)

# MPS (fake_mps.c): the client side of the control daemon's protocol (the
# test plays the daemon), the MPS attribute, occupancy, and (fake_common.c)
# concurrent kernels of clients on the timeline. Its children are forked
# (no exec) while the test's daemon thread runs; under ASan a child's
# leak check at exit could wait forever for an allocator lock that thread
# held at the fork (1 run in 20-40 on two busy cores; gdb: LockAllocator
# under __lsan::DoLeakCheck in exit), so leak checking is off for it.
fakecuda_test(fake_mps test_fake_mps.c LIBS fakecuda_driver fakecuda_nvml
  ENV ASAN_OPTIONS=detect_leaks=0)

# Stream capture (fake_capture.c): the rules, modes, fork/join, legacy
# stream, graph timing and graph memory.
fakecuda_test(fake_capture test_fake_capture.c LIBS fakecuda_driver fakecuda_nvml)

# The fake answers capture_probe.c's ~1100 questions about stream capture
# exactly as driver 580 on an H200 did (capture_probe.h200.txt), except the
# deliberate differences that capture_probe.deviations.sed applies.
add_executable(fake_capture_probe_bin ${FAKECUDA_TEST_DIR}/capture_probe.c)
target_compile_options(fake_capture_probe_bin PRIVATE -Wno-deprecated-declarations)
target_link_libraries(fake_capture_probe_bin PRIVATE fakecuda_driver pthread)
add_test(NAME fake_capture_probe
  COMMAND sh -c "\"$0\" > \"$1\" && sed -f \"$2\" \"$3\" | diff -u - \"$1\""
    $<TARGET_FILE:fake_capture_probe_bin> ${CMAKE_CURRENT_BINARY_DIR}/capture_probe.out
    ${FAKECUDA_TEST_DIR}/capture_probe.deviations.sed ${FAKECUDA_TEST_DIR}/capture_probe.h200.txt)
set_tests_properties(fake_capture_probe PROPERTIES LABELS "fakecuda;sanitize;tsan" TIMEOUT 60
  ENVIRONMENT "${CS_TEST_ENV}")

# The checked-in cuGetProcAddress table matches what gen_procs.py derives
# from this toolkit's cudaTypedefs.h.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME fake_procs_table_current
    COMMAND sh -c "\"$0\" \"$1\" \"$2\" | diff -u \"$3\" -"
      ${Python3_EXECUTABLE} ${FAKECUDA_TEST_DIR}/gen_procs.py
      ${CUDA_HOME}/include/cudaTypedefs.h ${FAKECUDA_TEST_DIR}/fake_procs.h)
  set_tests_properties(fake_procs_table_current PROPERTIES LABELS fakecuda TIMEOUT 60)
endif()
# The checkpoint API's state machine (fake_checkpoint.c).
fakecuda_test(fake_checkpoint test_fake_checkpoint.c LIBS fakecuda_driver)
