# Entry-path interposition (issue: foundation).
set(CS_PRELOAD_ENV "LD_PRELOAD=${CS_LIB}")

cs_add_test(hook_paths SOURCES hook/test_hook_paths.c LIBS fakecuda_driver
  ENV ${CS_PRELOAD_ENV} "CUDA_DEVICE_MEMORY_LIMIT=1m"
      "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/hook_paths.ledger")
# Issue 13, finding 10: libc's dlsym/dlvsym are never handed out by name.
cs_add_test(hook_dl_escape SOURCES hook/test_dl_escape.c LIBS fakecuda_driver
  ENV ${CS_PRELOAD_ENV} "CUDA_DEVICE_MEMORY_LIMIT=1m"
      "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/hook_dl_escape.ledger")
cs_add_test(hook_no_cuda SOURCES hook/test_no_cuda.c
  ENV ${CS_PRELOAD_ENV} "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/no_cuda.ledger")
# A plain shell pipeline under the preload prints and exits as without it.
add_test(NAME hook_shell_unaffected
  COMMAND sh -c "printf 'a\\nb\\n' | sort -r | tr -d '\\n'")
set_tests_properties(hook_shell_unaffected PROPERTIES
  ENVIRONMENT "${CS_PRELOAD_ENV}" PASS_REGULAR_EXPRESSION "^ba")
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/tmp)
