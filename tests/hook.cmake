# Entry-path interposition.
set(CS_PRELOAD_ENV "LD_PRELOAD=${CS_LIB}")

cs_add_test(hook_paths SOURCES hook/test_hook_paths.c LIBS fakecuda_driver
  ENV ${CS_PRELOAD_ENV} "CUDA_DEVICE_MEMORY_LIMIT=1m"
      "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/hook_paths.ledger")
# libc's dlsym/dlvsym are never handed out by name.
cs_add_test(hook_dl_escape SOURCES hook/test_dl_escape.c LIBS fakecuda_driver
  ENV ${CS_PRELOAD_ENV} "CUDA_DEVICE_MEMORY_LIMIT=1m"
      "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/hook_dl_escape.ledger")
# Every ABI version of an intercepted entry point has its own wrapper.
cs_add_test(hook_versions SOURCES hook/test_hook_versions.c LABELS sanitize)
target_include_directories(hook_versions PRIVATE ${CMAKE_SOURCE_DIR}/src
                           ${CMAKE_SOURCE_DIR}/tests/fakecuda)
cs_add_test(hook_no_cuda SOURCES hook/test_no_cuda.c
  ENV ${CS_PRELOAD_ENV} "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/no_cuda.ledger")
# A plain shell pipeline under the preload prints and exits as without it.
add_test(NAME hook_shell_unaffected
  COMMAND sh -c "printf 'a\\nb\\n' | sort -r | tr -d '\\n'")
set_tests_properties(hook_shell_unaffected PROPERTIES
  ENVIRONMENT "${CS_PRELOAD_ENV}" PASS_REGULAR_EXPRESSION "^ba")
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/tmp)

# The preload path under the sanitizers: a sanitizer
# build of libcushare.so preloaded into a multi-threaded program. In the
# TSan build (label tsan) the program is instrumented too and the library
# is preloaded alone, as `cushare run` does; hook_preload_threads_plain runs
# an uninstrumented copy with the runtime preloaded first, the recipe for
# programs not built with TSan. ASan insists on coming first in any case
# (label sanitize). docs/testing.md.
set(CS_THREADS_ENV "CUDA_DEVICE_MEMORY_LIMIT=256m" "CUDA_DEVICE_SM_LIMIT=50"
    "GPU_CORE_UTILIZATION_POLICY=force" "FAKECUDA_NS_PER_BLOCK=100")
function(cs_preload_threads_test name preload)
  cs_add_test(${name} SOURCES hook/test_preload_threads.c LIBS fakecuda_driver ${ARGN}
    ENV "LD_PRELOAD=${preload}" ${CS_THREADS_ENV}
        "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/${name}.ledger"
        "FAKECUDA_STATE=${CMAKE_BINARY_DIR}/tmp/${name}.fake"
        "CUSHARE_BOARD=${CMAKE_BINARY_DIR}/tmp/${name}.board")
endfunction()
if(CUSHARE_SANITIZE STREQUAL "thread")
  list(APPEND CS_THREADS_ENV "CS_EXPECT_RUNTIME=__tsan_init")
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libtsan.so
                  OUTPUT_VARIABLE CS_LIBTSAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  cs_preload_threads_test(hook_preload_threads_plain "${CS_LIBTSAN} ${CS_LIB}" LABELS tsan)
  # Built without the sanitizer: the preloaded runtime checks the library.
  target_compile_options(hook_preload_threads_plain PRIVATE -fno-sanitize=all)
  target_link_options(hook_preload_threads_plain PRIVATE -fno-sanitize=all)
  cs_preload_threads_test(hook_preload_threads ${CS_LIB} LABELS tsan)
elseif(CUSHARE_SANITIZE MATCHES "address")
  list(APPEND CS_THREADS_ENV "CS_EXPECT_RUNTIME=__asan_init")
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE CS_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  cs_preload_threads_test(hook_preload_threads "${CS_LIBASAN} ${CS_LIB}" LABELS sanitize)
else()
  cs_preload_threads_test(hook_preload_threads ${CS_LIB} LABELS tsan)
endif()
