# Pure-logic unit tests (also run under ASan/UBSan).
cs_add_test(unit_config SOURCES unit/test_config.c LIBS cs_common LABELS sanitize)
cs_add_test(unit_path SOURCES unit/test_path.c LIBS cs_common LABELS sanitize)
