/* gravac_internal.h: what libgravac's files share. */
#ifndef GRAVAC_INTERNAL_H
#define GRAVAC_INTERNAL_H

#include "gravac.h"
#include "gv_worker.h"

#include <stdio.h>

#define GRAVAC_TIMELINE 48

struct gravac {
    struct gv_ps_options o; /* every option, as gravac-worker reads them */
    struct gv_cfg *cfg;     /* what o's strings point into */
    struct gv_layout layout;
    struct gv_worker *w;
    float *momentum; /* --optimizer job: the runtime's SGD momentum */
    size_t numel;
    double t_create, t_start;
    uint64_t steps, samples;
    bool stopped;
    bool told_no_loss; /* the warning that AUTO gets no training loss, once */
    double lr;         /* gravac_set_lr's (0: none given) */
    /* output (gravac_out.c) */
    FILE *mf;       /* --metrics-file */
    double t_last;  /* the end of the last step or evaluation */
    double eval_s;  /* time from a step's end to a reported evaluation: the evaluations */
    double pause_s; /* the part of eval_s since the last step (told with the next step) */
    double last_loss, last_acc, best_acc;
    bool have_eval;
    uint64_t tl_iter[GRAVAC_TIMELINE];
    double tl_cf[GRAVAC_TIMELINE];
    uint32_t tl_n;
    uint64_t cf_changes;
    double last_cf;
};

/* gravac_out.c */
gv_status_t gravac_out_open(struct gravac *g);
void gravac_out_close(struct gravac *g);
void gravac_out_step(struct gravac *g, const struct gv_worker_step_out *out, double loss,
                     double compute_s, double step_s);
void gravac_out_eval(struct gravac *g, double loss, double accuracy);
void gravac_out_summary(struct gravac *g, double secs);

#endif /* GRAVAC_INTERNAL_H */
