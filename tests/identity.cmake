# Identity: HPID wire format, broker client and server, trusted procfs,
# post-init lock, tier resolution; fuzz targets for the parsers.
# Paths are relative to this file so the fragment also works when included
# from another build (tests/CMakeLists.txt includes every tests/*.cmake).
set(CS_ID_TESTS ${CMAKE_CURRENT_LIST_DIR}/identity)
get_filename_component(CS_ID_ROOT ${CMAKE_CURRENT_LIST_DIR}/.. ABSOLUTE)
set(CS_ID_FUZZ ${CS_ID_ROOT}/fuzz)

# Pure logic: also under ASan/UBSan.
cs_add_test(identity_hpid_golden SOURCES ${CS_ID_TESTS}/test_hpid_golden.c
            LIBS cs_common LABELS quick sanitize)
cs_add_test(identity_nstgid_parse SOURCES ${CS_ID_TESTS}/test_nstgid_parse.c
            LIBS cs_common LABELS quick sanitize)
cs_add_test(identity_resolve SOURCES ${CS_ID_TESTS}/test_resolve.c
            LIBS cs_common LABELS quick sanitize)

# Real PID and mount namespaces (needs root and unshare).
cs_add_test(identity_procfs_trust SOURCES ${CS_ID_TESTS}/test_procfs_trust.c
            LIBS cs_common LABELS quick sanitize)

# Broker: its connection table alone, the real server in-process, clients
# in child PID namespaces, fake servers, trust rejections, 300 concurrent
# clients, the bounds, the CLI daemon.
cs_add_test(broker_conns SOURCES ${CS_ID_TESTS}/test_broker_conns.c
            LIBS cs_common LABELS quick sanitize)
cs_add_test(broker_roundtrip SOURCES ${CS_ID_TESTS}/test_broker_roundtrip.c
            LIBS cs_common LABELS quick sanitize tsan)
# The same with the trickling client late after a wait, past the broker's
# deadline (tests/identity/late_wait.c): the broker's close then meets the
# client's next byte, which must count as the close it waits for.
add_library(late_wait MODULE ${CS_ID_TESTS}/late_wait.c)
target_include_directories(late_wait PRIVATE ${CMAKE_SOURCE_DIR}/src)
target_link_libraries(late_wait PRIVATE dl)
add_dependencies(broker_roundtrip late_wait)
add_test(NAME broker_roundtrip_late_client COMMAND broker_roundtrip)
set_tests_properties(broker_roundtrip_late_client PROPERTIES LABELS quick TIMEOUT 60
  ENVIRONMENT "${CS_TEST_ENV};CS_BUILD_DIR=${CMAKE_BINARY_DIR};LD_PRELOAD=$<TARGET_FILE:late_wait>")
cs_add_test(broker_trust_rejects SOURCES ${CS_ID_TESTS}/test_broker_trust.c
            LIBS cs_common LABELS quick sanitize tsan)
cs_add_test(broker_fake_servers SOURCES ${CS_ID_TESTS}/test_broker_fake.c
            LIBS cs_common LABELS quick sanitize tsan)
cs_add_test(broker_server_setup SOURCES ${CS_ID_TESTS}/test_broker_setup.c
            LIBS cs_common LABELS quick sanitize)
cs_add_test(broker_300_clients SOURCES ${CS_ID_TESTS}/test_broker_300.c
            LIBS cs_common LABELS quick sanitize tsan)
cs_add_test(broker_default_path SOURCES ${CS_ID_TESTS}/test_broker_default_path.c
            LIBS cs_common LABELS quick sanitize)
cs_add_test(broker_cli SOURCES ${CS_ID_TESTS}/test_broker_cli.c
            LIBS cs_common LABELS quick)

# Slowloris from a throwaway unprivileged user: needs
# root and useradd, else exits 77 and CTest reports it skipped, not passed.
cs_add_test(broker_slowloris SOURCES ${CS_ID_TESTS}/test_broker_slowloris.c
            LIBS cs_common LABELS quick sanitize tsan)

# Post-init lock: owner death at every injection point, 300 waiters,
# threads, fork.
cs_add_test(postinit_owner_death SOURCES ${CS_ID_TESTS}/test_postinit_owner_death.c
            LIBS cs_common LABELS quick)
cs_add_test(postinit_300_waiters SOURCES ${CS_ID_TESTS}/test_postinit_300.c
            LIBS cs_common LABELS quick ARGS blocking)
add_test(NAME postinit_300_waiters_polling COMMAND postinit_300_waiters polling)
set_tests_properties(postinit_300_waiters_polling PROPERTIES LABELS quick TIMEOUT 300)
cs_add_test(postinit_threads SOURCES ${CS_ID_TESTS}/test_postinit_threads.c
            LIBS cs_common LABELS quick sanitize tsan)
cs_add_test(postinit_fork SOURCES ${CS_ID_TESTS}/test_postinit_fork.c
            LIBS cs_common LABELS quick sanitize)

# Fuzz targets. The replay drivers run the seed corpora through the targets
# with the project compiler (under ASan/UBSan in the sanitize build); with
# clang's libFuzzer available, the targets also fuzz for 10 s each.
cs_add_test(identity_fuzz_replay_hpid
            SOURCES ${CS_ID_FUZZ}/replay_main.c ${CS_ID_FUZZ}/fuzz_hpid.c
            LIBS cs_common LABELS quick sanitize ARGS ${CS_ID_FUZZ}/corpus_hpid)
cs_add_test(identity_fuzz_replay_nstgid
            SOURCES ${CS_ID_FUZZ}/replay_main.c ${CS_ID_FUZZ}/fuzz_nstgid.c
            LIBS cs_common LABELS quick sanitize ARGS ${CS_ID_FUZZ}/corpus_nstgid)

if(NOT DEFINED CS_HAVE_LIBFUZZER)
  find_program(CS_FUZZ_CLANG NAMES clang clang-14)
  set(_have OFF)
  if(CS_FUZZ_CLANG)
    set(_probe ${CMAKE_BINARY_DIR}/cs_libfuzzer_probe.c)
    file(WRITE ${_probe}
         "#include <stddef.h>\n#include <stdint.h>\n"
         "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)"
         " { (void)d; (void)n; return 0; }\n")
    execute_process(COMMAND ${CS_FUZZ_CLANG} -fsanitize=fuzzer,address ${_probe}
                            -o ${CMAKE_BINARY_DIR}/cs_libfuzzer_probe
                    RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
    if(_rc EQUAL 0)
      set(_have ON)
    endif()
  endif()
  set(CS_HAVE_LIBFUZZER ${_have} CACHE INTERNAL "clang -fsanitize=fuzzer works")
  if(NOT _have)
    message(STATUS "libFuzzer unavailable (install clang and libclang-rt-14-dev): "
                   "fuzz targets run as corpus replays only")
  endif()
endif()

if(CS_HAVE_LIBFUZZER)
  set(_fuzz_flags -g -O1 -fsanitize=fuzzer,address,undefined
      -fno-sanitize-recover=undefined
      -I${CS_ID_ROOT}/include -I${CS_ID_ROOT}/src)
  set(_hpid_src ${CS_ID_FUZZ}/fuzz_hpid.c ${CS_ID_ROOT}/src/identity/hpid.c)
  set(_nstgid_src ${CS_ID_FUZZ}/fuzz_nstgid.c ${CS_ID_ROOT}/src/identity/procfs.c
      ${CS_ID_ROOT}/src/core/log.c)
  foreach(_t hpid nstgid)
    add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/fuzz_${_t}
      COMMAND ${CS_FUZZ_CLANG} ${_fuzz_flags} ${_${_t}_src} -o ${CMAKE_BINARY_DIR}/fuzz_${_t}
      DEPENDS ${_${_t}_src} ${CS_ID_ROOT}/src/identity/identity.h
      COMMENT "libFuzzer target fuzz_${_t}" VERBATIM)
    add_custom_target(fuzz_${_t}_target ALL DEPENDS ${CMAKE_BINARY_DIR}/fuzz_${_t})
    # New inputs go to a build-tree corpus; the seed corpus stays read-only.
    add_test(NAME identity_fuzz_${_t}
      COMMAND sh -c "mkdir -p \"$1\" && exec \"$2\" -max_total_time=10 -runs=5000000 -timeout=5 -rss_limit_mb=1024 -print_final_stats=1 \"$1\" \"$3\""
              sh ${CMAKE_BINARY_DIR}/fuzz_corpus_${_t} ${CMAKE_BINARY_DIR}/fuzz_${_t}
              ${CS_ID_FUZZ}/corpus_${_t})
    set_tests_properties(identity_fuzz_${_t} PROPERTIES LABELS "fuzz" TIMEOUT 120)
  endforeach()
endif()
