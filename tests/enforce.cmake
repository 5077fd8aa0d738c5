# Enforcement without the tenant's cooperation (docs/interposition.md) and
# library replacement under a running tenant
# (HAMi#753). slice_probe reaches the driver only through dlopen and never
# sets LD_PRELOAD. The scripts skip (77) with the reason when they cannot
# run here (not root, no mount namespace, no -static-pie).
add_executable(slice_probe enforce/slice_probe.c)
target_link_libraries(slice_probe PRIVATE dl)
set_target_properties(slice_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
add_dependencies(slice_probe libcushare cushare_cli)
if(TARGET fakecuda_driver)
  add_dependencies(slice_probe fakecuda_driver fakecuda_nvml)
endif()
add_test(NAME enforce_ld_so_preload COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/enforce/preload.sh
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(enforce_ld_so_preload PROPERTIES
  ENVIRONMENT "${CS_TEST_ENV}" SKIP_RETURN_CODE 77 TIMEOUT 120 FIXTURES_REQUIRED stale_ledgers)
add_test(NAME library_replace COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/enforce/replace.sh
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(library_replace PROPERTIES
  ENVIRONMENT "${CS_TEST_ENV}" SKIP_RETURN_CODE 77 TIMEOUT 120)
