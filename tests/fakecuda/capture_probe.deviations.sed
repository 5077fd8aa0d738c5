# TEST TOOL (tests/fakecuda), never shipped. Turns the real driver's answers
# to capture_probe.c (capture_probe.h200.txt: driver 580.159.04, CUDA 13.0,
# one H200) into the fake's, for the few answers where the fake differs on
# purpose. Every other line must match exactly (test fake_capture_probe).
#
# 1. cuThreadExchangeStreamCaptureMode: the real driver stores any value
#    (and crashes on NULL); the fake refuses a mode that is not one of the
#    three with CUDA_ERROR_INVALID_VALUE and leaves *mode as it was.
s/^exchange bad mode: SUCCESS$/exchange bad mode: INVALID_VALUE/
s/^exchange bad mode returned: GLOBAL$/exchange bad mode returned: ?/
/^exchange restore: SUCCESS$/d
/^exchange stored: 99$/d
# 2. Graph memory: the real driver reserved (and counted as used) 32 MiB
#    for a captured 3 MiB + 1000 B allocation; the fake keeps its
#    cuGraphAddMemAllocNode accounting for captured allocations too: each
#    rounded up to 2 MiB (4 MiB + 2 MiB).
s/^graph mem: before_launch=0 after_launch=33554432 reserved_after=33554432$/graph mem: before_launch=0 after_launch=6291456 reserved_after=6291456/
