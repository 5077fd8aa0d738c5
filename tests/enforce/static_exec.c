/*
 * A static-PIE helper (gcc -static-pie): no dynamic loader runs for it, so
 * neither LD_PRELOAD nor /etc/ld.so.preload puts anything into it. It
 * removes LD_PRELOAD from the environment and executes its arguments, as a
 * tenant trying to leave its slice through an exec chain would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: static_exec CMD [ARGS...]\n");
        return 2;
    }
    unsetenv("LD_PRELOAD");
    execv(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
