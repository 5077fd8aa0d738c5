/*
 * `cushare top [--once] [--interval MS] [--registry DIR/BASE] [--scan DIR]
 * [--no-scan]`: the node view (every tenant discovery finds, node_model.h),
 * sortable by memory ('m') or achieved share ('s'), a tenant expanded to
 * its processes with enter after moving to it (j/k, arrows).
 *
 * `cushare top [--once] [--no-reap] LEDGER`: a live view of one ledger,
 * redrawn every 500 ms with plain ANSI escapes (no curses), the ledger
 * reaped before each frame as before any view (see cmd_status.c). 'q' quits. The terminal is
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
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/config.h"
#include "cli/node_model.h"
#include "cli/status_model.h"

#define REFRESH_MS 500

static const char usage[] =
    "usage: cushare top [--once [--samples N]] [--interval MS] [--registry DIR/BASE]\n"
    "                   [--scan DIR]... [--no-scan]\n"
    "       cushare top [--once] [--no-reap] LEDGER\n"
    "  without LEDGER: every tenant of the node\n"
    "    (keys: m/s sort, j/k move, enter expands, q quits)\n"
    "  --once          print one frame and exit (also when stdout is no terminal)\n"
    "  --interval MS   refresh period of the node view (default 1000, 100..60000)\n"
    "  --samples N     with --once (or no terminal): sample N times, --interval\n"
    "                  apart, before the one frame, for its history (default 2,\n"
    "                  the least rates need)\n"
    "  --registry P    the node registry DIR/BASE\n"
    "                  (default $CUSHARE_REGISTRY or " CS_REG_DEFAULT_PATH ")\n"
    "  --scan DIR      look for ledgers in DIR and its subdirectories\n"
    "                  (default " CS_NODE_DEFAULT_SCAN ")\n"
    "  --no-scan       do not scan; the registry only\n"
    "  --no-reap       with LEDGER: do not reap dead processes' slots first\n"
    "The frame ends with a legend of its columns and flags (docs/node.md).\n"
    "examples:\n"
    "  cushare top\n"
    "  cushare top --once --samples 5 > node.txt\n"
    "  cushare top /tmp/team-a.ledger\n";

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
    cs_status_reap(l);
    cs_status_snapshot(l, st);
    cs_status_print_top(f, st, term_width(), live && isatty(STDIN_FILENO));
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

/* Frame of the node view, with the live-mode escapes when `live`. */
static char *node_frame(const struct cs_node_model *m, const struct cs_node_top_opts *o, bool live)
{
    char *frame = NULL, *out = NULL;
    size_t flen = 0, olen = 0;
    FILE *f = open_memstream(&frame, &flen);
    if (!f)
        return NULL;
    cs_node_print_top(f, m, o);
    if (fclose(f) != 0 || !live)
        return frame;
    FILE *w = open_memstream(&out, &olen);
    if (!w) {
        free(frame);
        return NULL;
    }
    fputs("\033[H", w);
    for (const char *p = frame; *p; p++) {
        if (*p == '\n')
            fputs("\033[K\r", w);
        fputc(*p, w);
    }
    fputs("\033[J", w);
    free(frame);
    return fclose(w) == 0 ? out : NULL;
}

/* One key of the node view; false: quit. */
static bool node_key(const char *buf, ssize_t n, ssize_t *k, const struct cs_node_model *m,
                     struct cs_node_top_opts *o, bool *expanded)
{
    char c = buf[*k];
    int *idx = malloc(((size_t)m->ntenants + 1) * sizeof *idx);
    int rows = idx ? cs_node_order(m, o->sort, idx) : 0;
    if (c == '\033' && *k + 2 < n && buf[*k + 1] == '[') {
        c = buf[*k + 2] == 'A' ? 'k' : buf[*k + 2] == 'B' ? 'j' : 0;
        *k += 2;
    }
    switch (c) {
    case 'q': case 'Q': free(idx); return false;
    case 'm': o->sort = CS_NODE_SORT_MEM; break;
    case 's': o->sort = CS_NODE_SORT_SHARE; break;
    case 'j': if (o->selected + 1 < rows) o->selected++; break;
    case 'k': if (o->selected > 0) o->selected--; break;
    case '\n': case '\r': case ' ': case 'e':
        if (o->selected >= 0 && o->selected < rows)
            expanded[idx[o->selected]] = !expanded[idx[o->selected]];
        break;
    default: break;
    }
    free(idx);
    return true;
}

/* The per-tenant "expanded" flags, grown (new ones false) to n. False
 * when memory is short. */
static bool expanded_fit(bool **v, int *cap, int n)
{
    if (n <= *cap)
        return true;
    bool *p = realloc(*v, (size_t)n * sizeof *p);
    if (!p)
        return false;
    memset(p + *cap, 0, (size_t)(n - *cap) * sizeof *p);
    *v = p;
    *cap = n;
    return true;
}

static int node_top(bool once, int interval_ms, int samples, const struct cs_node_where *w)
{
    struct cs_node_model *m = cs_node_model_new(w);
    bool *expanded = NULL; /* by index in m->tenant, grown with it */
    int nexpanded = 0;
    if (!m) {
        fprintf(stderr, "cushare: top: out of memory\n");
        return CS_EXIT_FAIL;
    }
    struct cs_node_top_opts o = {.width = term_width(), .sort = CS_NODE_SORT_MEM, .selected = -1,
                                 .expanded = expanded};
    if (once || !isatty(STDOUT_FILENO)) {
        cs_node_model_sample(m, interval_ms, samples);
        char *frame = node_frame(m, &o, false);
        if (frame)
            fputs(frame, stdout);
        free(frame);
        cs_node_model_free(m);
        return frame && fflush(stdout) == 0 ? CS_EXIT_OK : CS_EXIT_FAIL;
    }
    setup_terminal();
    const bool keys = isatty(STDIN_FILENO);
    o.keys = keys; /* only where keys are read */
    o.selected = 0;
    bool quit = false;
    int64_t next = 0;
    while (!quit && !got_signal) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        if (now >= next) {
            cs_node_model_refresh(m);
            next = now + interval_ms;
            if (!expanded_fit(&expanded, &nexpanded, m->ntenants))
                break;
            o.expanded = expanded;
        }
        o.width = term_width();
        char *frame = node_frame(m, &o, true);
        if (frame)
            put(frame);
        free(frame);
        struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
        int r = poll(&p, keys ? 1 : 0, (int)(next - now > 0 ? next - now : 0));
        if (r > 0 && (p.revents & POLLIN)) {
            char buf[64];
            ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
            if (n <= 0)
                quit = n == 0;
            for (ssize_t k = 0; k < n && !quit; k++)
                quit = !node_key(buf, n, &k, m, &o, expanded);
        } else if (r > 0 && (p.revents & (POLLHUP | POLLERR))) {
            quit = true;
        }
    }
    restore_terminal();
    cs_node_model_free(m);
    free(expanded);
    if (got_signal) {
        signal(got_signal, SIG_DFL);
        raise(got_signal);
    }
    return CS_EXIT_OK;
}

int cs_cmd_top(int argc, char **argv)
{
    bool once = false, reap = true;
    const char *path = NULL;
    long interval = 1000, samples = 2;
    struct cs_node_where where;
    int rc = cs_node_where_defaults("top", &where);
    if (rc)
        return rc;
    for (int i = 1; i < argc; i++) {
        int w = cs_node_where_arg("top", argc, argv, &i, &where);
        if (w < 0)
            return -w;
        if (w) {
            continue;
        } else if (!strcmp(argv[i], "--interval")) {
            if (i + 1 >= argc || cs__parse_int(argv[++i], 100, 60000, &interval))
                return cs_cli_usage_error("top", "--interval needs milliseconds from 100 to "
                                                 "60000, e.g. --interval 1000");
        } else if (!strcmp(argv[i], "--once")) {
            once = true;
        } else if (!strcmp(argv[i], "--samples")) {
            if (i + 1 >= argc || cs__parse_int(argv[++i], 2, CS_NODE_HIST, &samples))
                return cs_cli_usage_error("top", "--samples needs a count from 2 to %d, e.g. "
                                                 "--samples 10", CS_NODE_HIST);
        } else if (!strcmp(argv[i], "--no-reap")) {
            reap = false;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage, stdout);
            return CS_EXIT_OK;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            return cs_cli_unknown_option("top", argv[i], usage);
        } else if (path) {
            return cs_cli_usage_error("top", "one LEDGER at most, got '%s' after '%s'; see "
                                      "cushare help top", argv[i], path);
        } else {
            path = argv[i];
        }
    }
    if (!path)
        return node_top(once, (int)interval, (int)samples, &where);
    struct cs_ledger l;
    rc = cs_status_open("top", path, reap, &l);
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
