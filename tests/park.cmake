# Parking idle tenants off the GPU (src/park, docs/parking.md).
cs_add_test(park_policy SOURCES park/test_policy.c ${CMAKE_SOURCE_DIR}/src/park/policy.c
  LABELS sanitize unit)
