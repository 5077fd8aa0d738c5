# Pure-logic unit tests (also run under ASan/UBSan).
cs_add_test(unit_config SOURCES unit/test_config.c LIBS cs_common LABELS sanitize)
cs_add_test(unit_path SOURCES unit/test_path.c LIBS cs_common LABELS sanitize)
# `cushare run` turns a bad list or knob into a usage error (exit 2).
cs_add_test(run_config_usage SOURCES unit/test_run_config.c LABELS unit
  ENV "CUDA_DEVICE_MEMORY_SHARED_CACHE=${CMAKE_BINARY_DIR}/tmp/run_config_usage.ledger")
# Names another party chose, made safe for terminals, Prometheus and JSON.
cs_add_test(unit_text SOURCES unit/test_text.c ${CMAKE_SOURCE_DIR}/src/cli/text.c LABELS sanitize)
# Pods: /proc/locks parsed, vouches found past a stranger's lock.
cs_add_test(unit_pod SOURCES unit/test_pod.c LIBS cs_common LABELS sanitize)
