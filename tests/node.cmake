# The node view (src/node, src/cli/node_*.c): `cushare top` driven through a
# pseudo-terminal with several tenants on the fake driver, and the exporter
# checked by promtool and scraped by a real Prometheus (Debian `prometheus`;
# skipped, visibly, when absent). Shell tests: the tenants are
# limiter_worker processes under the preload.
# node_mps: a tenant under `cushare run --mps` (the fake MPS control daemon)
# shown as an MPS client by all three, one beside it as time-sliced.
# node_park: the exporter's park metrics follow a park and a wake.
foreach(case top exporter mps park)
  add_test(NAME node_${case} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/node/test_${case}.sh)
  set_tests_properties(node_${case} PROPERTIES
    ENVIRONMENT "${CS_TEST_ENV};CS_BUILD_DIR=${CMAKE_BINARY_DIR};CS_SOURCE_DIR=${CMAKE_SOURCE_DIR};CUSHARE_LOG_LEVEL=warn;FAKECUDA_MEM=16g;CUSHARE_MPS_CONTROL=${CS_FAKE_DIR}/fake-nvidia-cuda-mps-control"
    TIMEOUT 180 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED stale_ledgers)
endforeach()
# node_hostile_<case> (tests/node/test_node_hostile.c): a hostile user
# against root's node view: a registry filled and squatted (quota), a
# connection flood from one peer (flood), a root pod against another root
# pod's registration (pod). node_names: tenants' ledger names
# with terminal escapes and bytes that are not UTF-8, through top, status
# --json, promtool and a real Prometheus.
foreach(case quota pod flood)
  cs_add_test(node_hostile_${case} SOURCES node/test_node_hostile.c LIBS cs_common
    ARGS ${case} ENV "CUSHARE_LOG_LEVEL=warn")
  set_tests_properties(node_hostile_${case} PROPERTIES TIMEOUT 240)
endforeach()
add_test(NAME node_names COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/node/test_names.sh)
set_tests_properties(node_names PROPERTIES
  ENVIRONMENT "${CS_TEST_ENV};CS_BUILD_DIR=${CMAKE_BINARY_DIR};CS_SOURCE_DIR=${CMAKE_SOURCE_DIR};CUSHARE_LOG_LEVEL=warn;FAKECUDA_MEM=16g"
  TIMEOUT 180 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED stale_ledgers)
