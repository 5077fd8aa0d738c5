# Concurrent mode, node side (docs/mps.md): `cushare mps
# start|stop|status` and `cushare run --mps` against the fake MPS control
# daemon (tests/fakecuda/fake_mps_control.c) and the fake NVML's GPUs. One
# source; the case is its argument. The commands run under the preload, so
# no sanitizer build runs them.
foreach(case start_stop concurrent stale killed missing run_env two_gpus clients clients_left
    fake_daemon lock_held squat)
  cs_add_test(mps_node_${case} SOURCES mps/test_mps_node.c LIBS cs_common fakecuda_driver
    ARGS ${case}
    ENV "CUSHARE_LOG_LEVEL=warn" "FAKECUDA_MEM=1g"
        "CUSHARE_MPS_CONTROL=${CS_FAKE_DIR}/fake-nvidia-cuda-mps-control")
  add_dependencies(mps_node_${case} fakecuda_mps_control)
  set_tests_properties(mps_node_${case} PROPERTIES TIMEOUT 120)
endforeach()
# lock_held, squat: another user (a throwaway one, tests/multiuser.h; skipped,
# visibly, when not root) holds the GPU's lock or squats its directory.
