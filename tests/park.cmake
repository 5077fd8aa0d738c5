# Parking idle tenants off the GPU (src/park, docs/parking.md).
cs_add_test(park_policy SOURCES park/test_policy.c ${CMAKE_SOURCE_DIR}/src/park/policy.c
  LABELS sanitize unit)
# A tenant process the parking tests drive through a pipe.
add_executable(park_tenant park/park_tenant.c)
target_link_libraries(park_tenant PRIVATE fakecuda_driver)
function(cs_park_test name src)
  cs_add_test(${name} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/park/${src} ${ARGN})
  add_dependencies(${name} park_tenant)
  set_tests_properties(${name} PROPERTIES TIMEOUT 120)
endfunction()
cs_park_test(park_end_to_end test_park.c LABELS tsan)
cs_park_test(park_crash test_park_crash.c)
cs_park_test(park_make_room test_park_room.c)
# `cushare run` applies the node's budget rule with parking on.
add_test(NAME park_node_budget COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/park/test_node_budget.sh)
set_tests_properties(park_node_budget PROPERTIES
  ENVIRONMENT "${CS_TEST_ENV};CS_BUILD_DIR=${CMAKE_BINARY_DIR};CUSHARE_LOG_LEVEL=warn"
  TIMEOUT 120 FIXTURES_REQUIRED stale_ledgers)
