/* bench_progress.c: the progress line of the long benchmarks (bench_progress.h): mode and
 * terminal detection, the update interval, redraw or line output, and durations as text. The
 * estimates themselves are the callers'. */
#include "bench_progress.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

gv_status_t bp_mode_parse(const char *s, enum bp_mode *mode_p)
{
    static const char *const names[] = {"auto", "on", "off"};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0) {
            *mode_p = (enum bp_mode)i;
            return GV_OK;
        }
    return GV_ERR_INVAL;
}

void bp_init(struct bp *p, enum bp_mode mode, double every_s, FILE *f)
{
    memset(p, 0, sizeof(*p));
    p->f = f;
    p->tty = isatty(fileno(f)) == 1;
    p->on = mode == BP_ON || (mode == BP_AUTO && p->tty);
    p->every_s = every_s > 0 ? every_s : p->tty ? BP_EVERY_TTY_S : BP_EVERY_LINES_S;
    p->t0 = gv_now_s();
    p->last_s = -1;
}

void bp_duration(double s, char *out, size_t len)
{
    if (!(s >= 0) || !isfinite(s) || s > 1e9) {
        snprintf(out, len, "?");
        return;
    }
    unsigned long t = (unsigned long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, len, "%lu:%02lu", t / 60, t % 60);
}

void bp_update(struct bp *p, bool force, double remaining_s, const char *fmt, ...)
{
    if (!p->on)
        return;
    double now = gv_now_s();
    if (!force && p->last_s >= 0 && now - p->last_s < p->every_s)
        return;
    p->last_s = now;
    char what[512], el[32], rem[32];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    bp_duration(now - p->t0, el, sizeof(el));
    bp_duration(remaining_s, rem, sizeof(rem));
    /* on a terminal: back to the start of the line and erase it (ECMA-48 EL), no newline;
     * the next update or bp_clear overwrites it */
    char line[700];
    snprintf(line, sizeof(line), "progress: %s; elapsed %s, remaining ~%s", what, el, rem);
    struct winsize ws;
    if (p->tty && ioctl(fileno(p->f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 &&
        strlen(line) >= ws.ws_col)
        line[ws.ws_col - 1] = '\0'; /* a wrapped line could not be erased by the next one */
    fprintf(p->f, "%s%s%s", p->tty ? "\r\033[K" : "", line, p->tty ? "" : "\n");
    fflush(p->f);
    p->shown = p->tty;
}

void bp_clear(struct bp *p)
{
    if (!p->on || !p->shown)
        return;
    fputs("\r\033[K", p->f);
    fflush(p->f);
    p->shown = false;
}
