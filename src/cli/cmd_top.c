/*
 * `cushare top [--once] [--no-reap] [LEDGER]`: a live view of a ledger,
 * redrawn every 500 ms with plain ANSI escapes (no curses), the ledger
 * settled before each frame as before any view (see cmd_status.c). 'q' quits. The terminal is
 * put into non-canonical, no-echo mode and restored on every way out
 * ('q', SIGINT, SIGTERM, SIGHUP, errors). When stdout is not a terminal,
 * or with --once, one frame is printed without escapes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/status_model.h"

#define REFRESH_MS 500

static const char usage[] = "usage: cushare top [--once] [--no-reap] [LEDGER]   (q quits)\n";

static volatile sig_atomic_t got_signal;
static struct termios saved_termios;
static bool termios_changed, screen_changed;

static void on_signal(int sig)
{
    got_signal = sig;
}

static void put(const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(STDOUT_FILENO, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void restore_terminal(void)
{
    if (termios_changed) {
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios);
        termios_changed = false;
    }
    if (screen_changed) {
        put("\033[?25h\033[?1049l"); /* cursor on, main screen back */
        screen_changed = false;
    }
}

static void setup_terminal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: poll() returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_termios) == 0) {
        struct termios raw = saved_termios;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO); /* keep ISIG: ^C is SIGINT */
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0)
            termios_changed = true;
    }
    put("\033[?1049h\033[?25l"); /* alternate screen, cursor off */
    screen_changed = true;
    atexit(restore_terminal);
}

static int term_width(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

/* Renders one frame into memory; in live mode every line also clears its
 * rest and the frame clears below itself, so redraws do not flicker. */
static char *render(struct cs_ledger *l, struct cs_status *st, bool live)
{
    char *frame = NULL, *out = NULL;
    size_t flen = 0, olen = 0;
    FILE *f = open_memstream(&frame, &flen);
    if (!f)
        return NULL;
    cs_status_settle(l);
    cs_status_snapshot(l, st);
    cs_status_print_top(f, st, term_width());
    if (fclose(f) != 0)
        return NULL;
    if (!live)
        return frame;
    FILE *o = open_memstream(&out, &olen);
    if (!o) {
        free(frame);
        return NULL;
    }
    fputs("\033[H", o);
    for (const char *p = frame; *p; p++) {
        if (*p == '\n')
            fputs("\033[K\r", o);
        fputc(*p, o);
    }
    fputs("\033[J", o);
    free(frame);
    return fclose(o) == 0 ? out : NULL;
}

int cs_cmd_top(int argc, char **argv)
{
    bool once = false, reap = true;
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--once")) {
            once = true;
        } else if (!strcmp(argv[i], "--no-reap")) {
            reap = false;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return CS_EXIT_OK;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cs_cli_usage_error("top", "unknown option '%s' (see --help)", argv[i]);
        } else if (path) {
            return cs_cli_usage_error("top", "one LEDGER at most (see --help)");
        } else {
            path = argv[i];
        }
    }
    struct cs_ledger l;
    int rc = cs_status_open("top", path, reap, &l);
    if (rc != CS_EXIT_OK)
        return rc;
    struct cs_status *st = malloc(sizeof *st);
    if (!st) {
        cs__ledger_close(&l);
        fprintf(stderr, "cushare: top: out of memory\n");
        return CS_EXIT_FAIL;
    }
    if (once || !isatty(STDOUT_FILENO)) {
        char *frame = render(&l, st, false);
        if (frame)
            fputs(frame, stdout);
        free(frame);
        free(st);
        cs__ledger_close(&l);
        return frame && fflush(stdout) == 0 ? CS_EXIT_OK : CS_EXIT_FAIL;
    }

    setup_terminal();
    const bool keys = isatty(STDIN_FILENO);
    bool quit = false;
    while (!quit && !got_signal) {
        char *frame = render(&l, st, true);
        if (frame)
            put(frame);
        free(frame);
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int r = poll(&p, keys ? 1 : 0, REFRESH_MS);
        if (r > 0 && (p.revents & POLLIN)) {
            char buf[64];
            ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
            if (n <= 0)
                quit = n == 0; /* terminal gone */
            for (ssize_t k = 0; k < n; k++)
                if (buf[k] == 'q' || buf[k] == 'Q')
                    quit = true;
        } else if (r > 0 && (p.revents & (POLLHUP | POLLERR))) {
            quit = true;
        }
    }
    restore_terminal();
    free(st);
    cs__ledger_close(&l);
    if (got_signal) {
        signal(got_signal, SIG_DFL);
        raise(got_signal);
    }
    return CS_EXIT_OK;
}
