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
cs_mem_test(mem_views test_views.c "CUDA_DEVICE_MEMORY_LIMIT=64m" "FAKECUDA_CTX_BYTES=8m")
cs_mem_test(mem_race test_race.c "CUDA_DEVICE_MEMORY_LIMIT=64m")
cs_mem_test(mem_sigkill test_sigkill.c "CUDA_DEVICE_MEMORY_LIMIT=64m")
cs_mem_test(mem_bad_config test_bad_config.c "CUDA_DEVICE_MEMORY_LIMIT=4x")
cs_mem_test(mem_multi_gpu test_multi_gpu.c "FAKECUDA_DEVICES=2"
  "CUDA_DEVICE_MEMORY_LIMIT_0=64m" "CUDA_DEVICE_MEMORY_LIMIT_1=128m")
cs_mem_test(mem_nvml_only test_nvml_only.c "CUDA_DEVICE_MEMORY_LIMIT=64m")
cs_mem_test(identity_probe_legacy test_identity_probe.c "CUDA_DEVICE_MEMORY_LIMIT=64m"
  "CUDA_DEVICE_SM_LIMIT=50" "GPU_CORE_UTILIZATION_POLICY=force" "FAKECUDA_NVML_PID_OFFSET=100000"
  "FAKECUDA_NS_PER_BLOCK=1000" "CUSHARE_BOARD=${CMAKE_BINARY_DIR}/tmp/identity_probe_legacy.board")
