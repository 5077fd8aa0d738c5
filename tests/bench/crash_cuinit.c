/*
 * TEST TOOL for bench_init_crash: preloaded into bench workers, this cuInit
 * is what a baseline worker resolves through RTLD_DEFAULT; it kills its
 * process the way the OOM killer would, before the worker can report.
 */
#include <signal.h>
#include <unistd.h>

__attribute__((visibility("default"))) int cuInit(unsigned int flags)
{
    (void)flags;
    kill(getpid(), SIGKILL);
    return 999;
}
