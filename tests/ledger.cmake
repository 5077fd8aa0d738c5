# Ledger tests (src/ledger, docs/ledger.md): each is one executable linked
# with the shared code; warnings are part of what some of them check, so the
# log level is pinned. The status tests run the built `cushare` binary.
function(cs_ledger_test name src)
  cs_add_test(${name} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/ledger/${src}
    LIBS cs_common ENV CUSHARE_LOG_LEVEL=warn ${ARGN})
endfunction()

cs_ledger_test(ledger_abi test_abi.c LABELS sanitize)
cs_ledger_test(ledger_refuse_bad test_refuse_bad.c LABELS sanitize)
cs_ledger_test(ledger_uncharge_no_underflow test_uncharge.c LABELS sanitize)
cs_ledger_test(ledger_race_budget test_race_budget.c LABELS sanitize)
# With the accounting module (src/account), which owns the reap-and-retry
# of a refused charge.
cs_add_test(ledger_sigkill_reap SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/ledger/test_sigkill_reap.c
  ${CMAKE_SOURCE_DIR}/src/account/account.c ${CMAKE_SOURCE_DIR}/src/hami/region.c
  LIBS cs_common ENV CUSHARE_LOG_LEVEL=warn LABELS sanitize)
cs_ledger_test(ledger_crash_window test_crash_window.c LABELS sanitize)
cs_ledger_test(ledger_pid_reuse test_pid_reuse.c LABELS sanitize)
cs_ledger_test(ledger_fork_exec test_fork_exec.c LABELS sanitize)
cs_ledger_test(ledger_creator_killed test_creator_killed.c LABELS sanitize)
cs_ledger_test(ledger_256_workers test_256_workers.c LABELS sanitize)
cs_ledger_test(ledger_threads test_threads.c LABELS sanitize tsan)
# Not under TSan: the SIGBUS guard replaces a mapping that other threads
# are reading (that is what a truncation under a running tenant is), which
# TSan reports as a race by construction; they discard what they read once
# they see the mapping lost (src/ledger/guard.c).
cs_ledger_test(ledger_damaged test_damaged.c LABELS sanitize)
# Plays a second, hostile user when run as root (tests/multiuser.h);
# skipped, with the reason printed, where that is impossible.
cs_ledger_test(ledger_trust test_trust.c LABELS sanitize)

# The status cases share one source; the case is its argument.
foreach(case human json errors top)
  cs_ledger_test(ledger_status_${case} test_status.c ARGS ${case} LABELS sanitize)
endforeach()

# Dead slots reaped at claim; the aggregate healed while others
# live, never taking what a live process has in flight.
cs_ledger_test(ledger_reap_at_claim test_reap_at_claim.c LABELS sanitize)
cs_ledger_test(ledger_heal_safety test_heal_safety.c LABELS sanitize)
cs_ledger_test(ledger_heal_threads test_heal_threads.c LABELS sanitize tsan)
