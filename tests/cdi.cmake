# CDI (docs/kubernetes.md): `cushare cdi` checked against
# the CDI JSON schema (python3-jsonschema), then applied by a real runtime
# (podman, else crun with tests/cdi/apply_oci.py). Both skip (77) with the
# reason when they cannot run here.
add_test(NAME cdi_spec COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cdi/spec.sh
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
set_tests_properties(cdi_spec PROPERTIES ENVIRONMENT "${CS_TEST_ENV}"
  SKIP_RETURN_CODE 77 TIMEOUT 60)
add_test(NAME cdi_container COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/cdi/container.sh
         ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR})
# Uses slice_probe (tests/enforce.cmake) and the fake driver; one runtime
# at a time under build/tmp/cdi-ctr.
set_tests_properties(cdi_container PROPERTIES ENVIRONMENT "${CS_TEST_ENV}"
  SKIP_RETURN_CODE 77 TIMEOUT 240 RESOURCE_LOCK cdi_container)
