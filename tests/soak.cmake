# scripts/soak.sh's helper (not a test; the soak is not run in CI): reads the
# simulated device through the fake NVML and plays the attacker's idle broker
# connections, its connection floods against the exporter, leases on
# payer files and edits of its own ledger's limit.
add_executable(soak_probe soak/soak_probe.c)
target_link_libraries(soak_probe PRIVATE fakecuda_nvml)
target_include_directories(soak_probe PRIVATE ${CMAKE_SOURCE_DIR}/tests ${CMAKE_SOURCE_DIR}/include)
set_target_properties(soak_probe PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
