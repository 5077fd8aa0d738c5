# HAMi drop-in (docs/kubernetes.md): the region HAMi's monitor decodes, its
# feedback obeyed. tests/hami/run.sh drives tenants and a Go decoder that
# transcribes HAMi's v1 struct; skipped (77) with the reason without Go.
add_executable(hami_tenant hami/hami_tenant.c)
target_include_directories(hami_tenant PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(hami_tenant PRIVATE fakecuda_driver dl pthread)
add_executable(hami_golden hami/hami_golden.c)
target_include_directories(hami_golden PRIVATE ${CMAKE_SOURCE_DIR}/include)
add_test(NAME hami_region COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/hami/run.sh
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(hami_region PROPERTIES
  ENVIRONMENT "${CS_TEST_ENV};CS_BUILD_DIR=${CMAKE_BINARY_DIR}"
  SKIP_RETURN_CODE 77 TIMEOUT 300 FIXTURES_REQUIRED stale_ledgers)
# The tenant's own region cannot relax its pacing (docs/security.md).
add_test(NAME hami_switch_hostile COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/hami/switch_hostile.sh
         ${CMAKE_BINARY_DIR})
set_tests_properties(hami_switch_hostile PROPERTIES
  ENVIRONMENT "${CS_TEST_ENV}" TIMEOUT 120 FIXTURES_REQUIRED stale_ledgers)
add_dependencies(hami_tenant libcushare)
set_target_properties(hami_tenant hami_golden PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
