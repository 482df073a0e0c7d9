/* bench_progress.h: where a long benchmark is, on stderr, for `gravac-bench train` and
 * `scaling`: one line "progress: <what runs now>; elapsed E, remaining ~R". On a terminal the
 * line is redrawn in place; forced onto another file (--progress on) it is one line per
 * update; by default it is shown on a terminal only, so CI logs and redirected output stay
 * quiet. It computes no estimate itself: the caller knows its work and passes the remaining
 * time. Not a public header: bench/ only. */
#ifndef GV_BENCH_PROGRESS_H
#define GV_BENCH_PROGRESS_H

#include "gv_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum bp_mode {
    BP_AUTO = 0, /* on when the stream is a terminal */
    BP_ON = 1,   /* always; one line per update when the stream is not a terminal */
    BP_OFF = 2,  /* never (--quiet) */
};

#define BP_EVERY_TTY_S 0.5  /* default interval between updates on a terminal */
#define BP_EVERY_LINES_S 10 /* ... and in a file, where every update is a line */

struct bp {
    FILE *f;        /* borrowed; stderr in the programs */
    bool on;        /* print at all */
    bool tty;       /* redraw one line in place instead of writing lines */
    bool shown;     /* a redrawn line is on the terminal now */
    double t0;      /* gv_now_s() at bp_init: the bench's start */
    double every_s; /* at most one update per every_s, forced ones excepted */
    double last_s;  /* time of the last update (< 0: none yet) */
};

/* "auto", "on" or "off" into *mode_p; GV_ERR_INVAL otherwise (nothing written). */
gv_status_t bp_mode_parse(const char *s, enum bp_mode *mode_p);

/* Decides from mode and whether f is a terminal; every_s <= 0 takes the default for the
 * kind of output. Starts the elapsed-time clock. */
void bp_init(struct bp *p, enum bp_mode mode, double every_s, FILE *f);

/* Shows "progress: <fmt ...>; elapsed E, remaining ~R" when the interval has passed since
 * the last update or when force is true (a new run starts); remaining_s < 0 prints "?".
 * Does nothing when progress is off. */
void bp_update(struct bp *p, bool force, double remaining_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Erases a redrawn line, so that the bench's own output starts on a clean line; call it
 * before printing results. No effect in line mode or when off. */
void bp_clear(struct bp *p);

/* s seconds as "H:MM:SS" or "M:SS" ("?" for a negative or non-finite s). */
void bp_duration(double s, char *out, size_t len);

#endif /* GV_BENCH_PROGRESS_H */
