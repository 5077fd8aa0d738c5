# Memory slices through the whole library on the fake driver.
set(CS_MEM_ENV "LD_PRELOAD=${CS_LIB}" "FAKECUDA_MEM=1g")
function(cs_mem_test name src)
  cs_add_test(${name} SOURCES mem/${src} LIBS fakecuda_driver
    ENV ${CS_MEM_ENV}
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/${name}.ledger"
        "FAKECUDA_STATE=${CMAKE_BINARY_DIR}/tmp/${name}.fake" ${ARGN})
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/mem)
  # Each run starts from a fresh ledger and a fresh simulated device.
  set_property(TEST ${name} APPEND PROPERTY FIXTURES_REQUIRED ${name}_clean)
  add_test(NAME ${name}_clean COMMAND rm -f ${CMAKE_BINARY_DIR}/tmp/${name}.ledger
           ${CMAKE_BINARY_DIR}/tmp/${name}.fake)
  set_tests_properties(${name}_clean PROPERTIES FIXTURES_SETUP ${name}_clean)
endfunction()

cs_mem_test(mem_families test_families.c "CUDA_DEVICE_MEMORY_LIMIT=64m")
# The fake driver refuses the first free of each kind once.
cs_mem_test(mem_refused_free test_refused_free.c "CUDA_DEVICE_MEMORY_LIMIT=64m"
  "FAKECUDA_FAIL_cuMemFree_v2=700:1" "FAKECUDA_FAIL_cuArrayDestroy=700:1")
cs_mem_test(mem_views test_views.c "CUDA_DEVICE_MEMORY_LIMIT=64m" "FAKECUDA_CTX_BYTES=8m")
cs_mem_test(mem_views_reap test_views_reap.c "CUDA_DEVICE_MEMORY_LIMIT=64m"
  "FAKECUDA_CTX_BYTES=8m")
cs_mem_test(mem_race test_race.c "CUDA_DEVICE_MEMORY_LIMIT=64m")
cs_mem_test(mem_sigkill test_sigkill.c "CUDA_DEVICE_MEMORY_LIMIT=64m")
# Every knob with a bad value fails CUDA initialisation with one message.
cs_mem_test(mem_bad_config test_bad_config.c "CUDA_DEVICE_MEMORY_LIMIT=4x"
  "CS_EXPECT=CUDA_DEVICE_MEMORY_LIMIT='4x'|k/m/g")
cs_mem_test(mem_bad_config_log_level test_bad_config.c "CUSHARE_LOG_LEVEL=garbage"
  "CS_EXPECT=CUSHARE_LOG_LEVEL='garbage'|error, warn, info or debug")
cs_mem_test(mem_bad_config_device_index test_bad_config.c "CUDA_DEVICE_MEMORY_LIMIT_16=1g"
  "CS_EXPECT=CUDA_DEVICE_MEMORY_LIMIT_16=1g|i from 0 to 15")
cs_mem_test(mem_bad_config_sm_index test_bad_config.c "CUDA_DEVICE_SM_LIMIT_01=10"
  "CS_EXPECT=CUDA_DEVICE_SM_LIMIT_01=10|i from 0 to 15")
cs_mem_test(mem_ledger_truncated test_ledger_truncated.c "CUDA_DEVICE_MEMORY_LIMIT=64m")
# Plays a second, hostile user when run as root (tests/multiuser.h);
# skipped, with the reason printed, where that is impossible.
cs_mem_test(mem_ledger_foreign test_ledger_foreign.c)
# Shared memory against hostile markers, payer files and kept fds
# (docs/security.md): mem_hostile_share is the kept-fd case, the others one
# attacker each, skipped (visibly) unless root.
cs_mem_test(mem_hostile_share test_hostile_share.c)
foreach(case forged_user forged_pod pod_payer leased pid1)
  add_test(NAME mem_hostile_share_${case} COMMAND mem_hostile_share case ${case})
  get_test_property(mem_hostile_share ENVIRONMENT env)
  set_tests_properties(mem_hostile_share_${case} PROPERTIES ENVIRONMENT "${env}"
    SKIP_RETURN_CODE 77 TIMEOUT 120 FIXTURES_REQUIRED stale_ledgers)
endforeach()
# The slice file's limit wins over a ledger the tenant made or edits.
add_test(NAME mem_slice_authority COMMAND ${CMAKE_SOURCE_DIR}/tests/mem/slice_authority.sh
         ${CMAKE_BINARY_DIR})
set_tests_properties(mem_slice_authority PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 77
  FIXTURES_REQUIRED stale_ledgers ENVIRONMENT "${CS_TEST_ENV}")
cs_mem_test(mem_multi_gpu test_multi_gpu.c "FAKECUDA_DEVICES=2"
  "CUDA_DEVICE_MEMORY_LIMIT_0=64m" "CUDA_DEVICE_MEMORY_LIMIT_1=128m")
cs_mem_test(mem_nvml_only test_nvml_only.c "CUDA_DEVICE_MEMORY_LIMIT=64m")
cs_mem_test(identity_probe_legacy test_identity_probe.c "CUDA_DEVICE_MEMORY_LIMIT=64m"
  "CUDA_DEVICE_SM_LIMIT=50" "GPU_CORE_UTILIZATION_POLICY=force" "FAKECUDA_NVML_PID_OFFSET=100000"
  "FAKECUDA_NS_PER_BLOCK=1000" "CUSHARE_BOARD=${CMAKE_BINARY_DIR}/tmp/identity_probe_legacy.board")
# Contexts (src/mem/ctx.c): 16 or 24 MiB each on the fake; on the H200 every
# context, first or further, costs 518 MiB. Each runs twice: preloaded, and
# with the interposer linked in (label sanitize: ASan+UBSan build; tsan),
# so the sanitizers check them without a runtime preloaded first
# (hook_preload_threads* run the preloaded path itself under them).
set(CS_MEM_INPROC_SRC ${CS_LIB_SRC})
list(FILTER CS_MEM_INPROC_SRC EXCLUDE REGEX "src/hook/dlsym\\.c$")
function(cs_mem_ctx_test name src)
  cs_mem_test(${name} ${src} ${ARGN})
  set(inproc ${name}_inproc)
  cs_add_test(${inproc} SOURCES mem/${src} mem/inproc.c ${CS_MEM_INPROC_SRC}
    $<TARGET_OBJECTS:cs_common> LIBS fakecuda_driver LABELS sanitize tsan
    ENV "FAKECUDA_MEM=1g"
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/${inproc}.ledger"
        "FAKECUDA_STATE=${CMAKE_BINARY_DIR}/tmp/${inproc}.fake" ${ARGN})
  target_include_directories(${inproc} PRIVATE ${CMAKE_SOURCE_DIR}/tests/mem)
  # cushare_limiter_stats is looked up with dlsym, as under the preload.
  set_target_properties(${inproc} PROPERTIES ENABLE_EXPORTS ON)
  set_property(TEST ${inproc} APPEND PROPERTY FIXTURES_REQUIRED ${inproc}_clean)
  add_test(NAME ${inproc}_clean COMMAND rm -f ${CMAKE_BINARY_DIR}/tmp/${inproc}.ledger
           ${CMAKE_BINARY_DIR}/tmp/${inproc}.fake)
  set_tests_properties(${inproc}_clean PROPERTIES FIXTURES_SETUP ${inproc}_clean)
  set_tests_properties(${name} ${inproc} PROPERTIES TIMEOUT 60)
endfunction()
cs_mem_ctx_test(mem_ctx_budget test_ctx_budget.c "CUDA_DEVICE_MEMORY_LIMIT=32m"
  "FAKECUDA_CTX_BYTES=24m" "FAKECUDA_CTX_EXTRA_BYTES=24m")
cs_mem_ctx_test(mem_ctx_lifecycle test_ctx_lifecycle.c "CUDA_DEVICE_MEMORY_LIMIT=64m"
  "FAKECUDA_CTX_BYTES=16m" "FAKECUDA_CTX_EXTRA_BYTES=8m")
# The same with 300 other processes listed by NVML before ours: the charge
# is measured from NVML's list, which must be read whole (no 256 cap).
cs_mem_ctx_test(mem_ctx_lifecycle_300procs test_ctx_lifecycle.c "CUDA_DEVICE_MEMORY_LIMIT=64m"
  "FAKECUDA_CTX_BYTES=16m" "FAKECUDA_CTX_EXTRA_BYTES=8m" "FAKECUDA_NVML_EXTRA_PROCS=300")
cs_mem_ctx_test(mem_ctx_cycles test_ctx_cycles.c "CUDA_DEVICE_MEMORY_LIMIT=64m"
  "FAKECUDA_CTX_BYTES=16m" "FAKECUDA_CTX_EXTRA_BYTES=8m" "FAKECUDA_NS_PER_BLOCK=1000"
  "CUDA_DEVICE_SM_LIMIT=25" "GPU_CORE_UTILIZATION_POLICY=force")
cs_mem_ctx_test(mem_ctx_sigkill test_ctx_sigkill.c "CUDA_DEVICE_MEMORY_LIMIT=64m"
  "FAKECUDA_CTX_BYTES=16m" "FAKECUDA_CTX_EXTRA_BYTES=8m")
# cuInit's set-up beside the driver's cuInit (src/hook/init.c), forced into
# that order by the ledger's test hook, and failing closed there: one
# in-process executable (the hook is not exported), one test per case.
add_executable(mem_init_overlap mem/test_init_overlap.c mem/inproc.c ${CS_MEM_INPROC_SRC}
  $<TARGET_OBJECTS:cs_common>)
target_link_libraries(mem_init_overlap PRIVATE fakecuda_driver cs_test_support dl pthread m)
target_include_directories(mem_init_overlap PRIVATE ${CMAKE_SOURCE_DIR}/tests
  ${CMAKE_SOURCE_DIR}/tests/mem)
set_target_properties(mem_init_overlap PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(mem_init_overlap fakecuda_driver fakecuda_nvml)
foreach(case overlap fail)
  set(name mem_init_overlap_${case})
  add_test(NAME ${name} COMMAND mem_init_overlap ${case})
  set_tests_properties(${name} PROPERTIES TIMEOUT 60 LABELS "sanitize;tsan"
    FIXTURES_REQUIRED ${name}_clean ENVIRONMENT
    "${CS_TEST_ENV};FAKECUDA_MEM=1g;CUDA_DEVICE_MEMORY_LIMIT=64m;CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/${name}.ledger;FAKECUDA_STATE=${CMAKE_BINARY_DIR}/tmp/${name}.fake")
  add_test(NAME ${name}_clean COMMAND rm -f ${CMAKE_BINARY_DIR}/tmp/${name}.ledger
           ${CMAKE_BINARY_DIR}/tmp/${name}.fake)
  set_tests_properties(${name}_clean PROPERTIES FIXTURES_SETUP ${name}_clean)
endforeach()

# Private ledgers (no CUDA_DEVICE_MEMORY_SHARED_CACHE) leave nothing behind:
# killed, exec'd, fork children; dead files swept, live and foreign kept.
# One source, the case is its argument; "foreign" needs root (else SKIP).
foreach(case leftovers sweep foreign)
  set(name mem_private_${case})
  cs_add_test(${name} SOURCES mem/test_private_ledger.c LIBS cs_common fakecuda_driver
    ARGS ${case} ENV "LD_PRELOAD=${CS_LIB}" "FAKECUDA_MEM=1g" "CUDA_DEVICE_MEMORY_LIMIT=64m"
      "CUSHARE_LOG_LEVEL=warn")
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/mem
    ${CMAKE_SOURCE_DIR}/tests/ledger)
  set_tests_properties(${name} PROPERTIES TIMEOUT 120)
endforeach()

# Fork while another thread holds each lock of the library: the child's
# first CUDA work completes. The executable
# interposes pthread_mutex_lock (exported) to hold the lock provably.
add_executable(mem_fork_locks mem/test_fork_locks.c)
target_link_libraries(mem_fork_locks PRIVATE cs_test_support fakecuda_driver dl pthread m)
target_include_directories(mem_fork_locks PRIVATE ${CMAKE_SOURCE_DIR}/tests
  ${CMAKE_SOURCE_DIR}/tests/mem)
set_target_properties(mem_fork_locks PROPERTIES ENABLE_EXPORTS ON)
add_dependencies(mem_fork_locks libcushare fakecuda_driver fakecuda_nvml)
foreach(case init init_setup contexts track pools graph slots shares vmm ledger_guard arm watch_start
        limiter_contexts limiter_devices watcher_tick tenant park graph_charges)
  add_test(NAME mem_fork_${case} COMMAND mem_fork_locks ${case})
  set_tests_properties(mem_fork_${case} PROPERTIES TIMEOUT 60 ENVIRONMENT
    "${CS_TEST_ENV};CS_BUILD_DIR=${CMAKE_BINARY_DIR};${CS_MEM_ENV};CUDA_DEVICE_MEMORY_LIMIT=64m;CUDA_DEVICE_SM_LIMIT=50;GPU_CORE_UTILIZATION_POLICY=force;FAKECUDA_NS_PER_BLOCK=100;CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/mem_fork_${case}.ledger;FAKECUDA_STATE=${CMAKE_BINARY_DIR}/tmp/mem_fork_${case}.fake;CUSHARE_BOARD=${CMAKE_BINARY_DIR}/tmp/mem_fork_${case}.board")
endforeach()

# Memory shared between processes (VMM exports over SCM_RIGHTS, legacy IPC,
# across tenants): ledger = fake device after every step and after a SIGKILL
# at every step; preloaded and in-process (ASan/UBSan, TSan builds).
cs_mem_ctx_test(mem_vmm_share test_vmm_share.c "CUDA_DEVICE_MEMORY_LIMIT=64m")

# The H200 VMM-sharing program (tests/gpu/vmm_sharing/vmm_share.c) on the fake
# driver: creator and importer processes of one tenant over a unix socket.
add_executable(vmm_share_fake ${CMAKE_SOURCE_DIR}/tests/gpu/vmm_sharing/vmm_share.c)
target_link_libraries(vmm_share_fake PRIVATE fakecuda_driver)
add_dependencies(vmm_share_fake libcushare)
add_test(NAME mem_vmm_share_pair COMMAND sh ${CMAKE_SOURCE_DIR}/tests/mem/vmm_share_pair.sh
         $<TARGET_FILE:vmm_share_fake> ${CMAKE_BINARY_DIR}/tmp/mem_vmm_share_pair)
set_tests_properties(mem_vmm_share_pair PROPERTIES TIMEOUT 120
  FIXTURES_REQUIRED "stale_ledgers;mem_vmm_share_pair_clean"
  ENVIRONMENT "${CS_TEST_ENV};${CS_MEM_ENV};CUDA_DEVICE_MEMORY_LIMIT=256m;CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/mem_vmm_share_pair.ledger;FAKECUDA_STATE=${CMAKE_BINARY_DIR}/tmp/mem_vmm_share_pair.fake")
add_test(NAME mem_vmm_share_pair_clean COMMAND rm -f ${CMAKE_BINARY_DIR}/tmp/mem_vmm_share_pair.ledger
         ${CMAKE_BINARY_DIR}/tmp/mem_vmm_share_pair.fake)
set_tests_properties(mem_vmm_share_pair_clean PROPERTIES FIXTURES_SETUP mem_vmm_share_pair_clean)
