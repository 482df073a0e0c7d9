/* optim.c: SGD with momentum / Nesterov and weight decay, and the learning-rate schedules.
 * The step is element-wise with a fixed operation order and no fused multiply-add (this file is
 * compiled with -ffp-contract=off), so any split of the flat vector into ranges, on any host,
 * gives the same bits: parameter servers step their shard, workers their whole replica. */
#include "nn_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void gv_optim_cfg_default(struct gv_optim_cfg *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->lr = 0.05f;
    cfg->momentum = 0.9f;
    cfg->sched = GV_LR_CONSTANT;
    cfg->gamma = 0.1f;
}

gv_status_t gv_optim_cfg_check(const struct gv_optim_cfg *cfg)
{
    const char *why = NULL;
    if (!(cfg->lr >= 0.0f) || !isfinite(cfg->lr))
        why = "lr must be finite and >= 0";
    else if (!(cfg->momentum >= 0.0f && cfg->momentum < 1.0f))
        why = "momentum must be in [0, 1)";
    else if (!(cfg->weight_decay >= 0.0f) || !isfinite(cfg->weight_decay))
        why = "weight decay must be finite and >= 0";
    else if (cfg->warmup < 0)
        why = "warm-up must be >= 0";
    else if (cfg->sched == GV_LR_STEP &&
             (cfg->n_milestones < 1 || cfg->n_milestones > GV_LR_MAX_MILESTONES ||
              !(cfg->gamma > 0.0f) || !isfinite(cfg->gamma)))
        why = "step schedule needs 1..8 milestones and gamma > 0";
    else if (cfg->sched == GV_LR_COSINE &&
             (cfg->total <= cfg->warmup || !(cfg->min_lr >= 0.0f) || cfg->min_lr > cfg->lr))
        why = "cosine schedule needs total > warm-up and 0 <= min_lr <= lr";
    else if ((unsigned)cfg->sched > GV_LR_COSINE)
        why = "unknown schedule";
    for (int i = 1; why == NULL && cfg->sched == GV_LR_STEP && i < cfg->n_milestones; i++)
        if (cfg->milestones[i] <= cfg->milestones[i - 1])
            why = "step milestones must be strictly ascending";
    if (why != NULL) {
        gv_log(GV_LOG_ERROR, "optim: %s", why);
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

static int optim_parse_i64(const char *s, char **end, int64_t *v)
{
    errno = 0;
    long long x = strtoll(s, end, 10);
    if (errno != 0 || *end == s || x < 0)
        return -1;
    *v = x;
    return 0;
}

static int optim_parse_float(const char *s, char **end, float *v)
{
    errno = 0;
    double x = strtod(s, end);
    if (errno != 0 || *end == s || !isfinite(x))
        return -1;
    *v = (float)x;
    return 0;
}

static gv_status_t optim_parse_step(const char *s, struct gv_optim_cfg *cfg)
{
    struct gv_optim_cfg c = *cfg;
    char *end;
    c.n_milestones = 0;
    for (;;) {
        if (c.n_milestones == GV_LR_MAX_MILESTONES ||
            optim_parse_i64(s, &end, &c.milestones[c.n_milestones]) != 0)
            return GV_ERR_INVAL;
        c.n_milestones++;
        if (*end != ',')
            break;
        s = end + 1;
    }
    if (*end == '@' && optim_parse_float(end + 1, &end, &c.gamma) != 0)
        return GV_ERR_INVAL;
    if (*end != '\0')
        return GV_ERR_INVAL;
    c.sched = GV_LR_STEP;
    *cfg = c;
    return GV_OK;
}

static gv_status_t optim_parse_cosine(const char *s, struct gv_optim_cfg *cfg)
{
    struct gv_optim_cfg c = *cfg;
    char *end = (char *)s;
    c.sched = GV_LR_COSINE;
    if (*s == ':') {
        if (optim_parse_i64(s + 1, &end, &c.total) != 0)
            return GV_ERR_INVAL;
        if (*end == ':' && optim_parse_float(end + 1, &end, &c.min_lr) != 0)
            return GV_ERR_INVAL;
    }
    if (*end != '\0')
        return GV_ERR_INVAL;
    *cfg = c;
    return GV_OK;
}

gv_status_t gv_optim_schedule_parse(const char *s, struct gv_optim_cfg *cfg)
{
    gv_status_t status = GV_ERR_INVAL;
    if (s == NULL)
        status = GV_ERR_INVAL;
    else if (strcmp(s, "constant") == 0) {
        cfg->sched = GV_LR_CONSTANT;
        status = GV_OK;
    } else if (strncmp(s, "step:", 5) == 0)
        status = optim_parse_step(s + 5, cfg);
    else if (strncmp(s, "cosine", 6) == 0)
        status = optim_parse_cosine(s + 6, cfg);
    if (status != GV_OK)
        gv_log(GV_LOG_ERROR,
               "optim: bad schedule '%s' (want constant, step:IT[,IT...][@GAMMA] or "
               "cosine[:TOTAL[:MIN_LR]])",
               s ? s : "(null)");
    return status;
}

float gv_optim_lr(const struct gv_optim_cfg *cfg, int64_t t)
{
    double base = cfg->lr;
    if (t < 0)
        t = 0;
    if (t < cfg->warmup)
        return (float)(base * (double)(t + 1) / (double)cfg->warmup);
    switch (cfg->sched) {
    case GV_LR_CONSTANT: break;
    case GV_LR_STEP:
        for (int i = 0; i < cfg->n_milestones && i < GV_LR_MAX_MILESTONES; i++)
            if (t >= cfg->milestones[i])
                base *= (double)cfg->gamma;
        break;
    case GV_LR_COSINE: {
        double span = (double)(cfg->total - cfg->warmup);
        double x = span > 0.0 ? (double)(t - cfg->warmup) / span : 1.0;
        if (x > 1.0)
            x = 1.0;
        base = cfg->min_lr + 0.5 * (base - cfg->min_lr) * (1.0 + cos(M_PI * x));
        break;
    }
    }
    return (float)base;
}

void gv_optim_apply_host(const struct gv_optim_cfg *cfg, float lr, float *p, float *v,
                         const float *g, size_t n)
{
    const float mu = cfg->momentum, wd = cfg->weight_decay;
    if (cfg->nesterov) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            float vi = mu * v[i] + gi;
            v[i] = vi;
            p[i] = p[i] - lr * (gi + mu * vi);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            float vi = mu * v[i] + gi;
            v[i] = vi;
            p[i] = p[i] - lr * vi;
        }
    }
}

void gv_optim_velocity_host(const struct gv_optim_cfg *cfg, const float *p, float *u, float *g,
                            size_t n)
{
    const float mu = cfg->momentum, wd = cfg->weight_decay;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * p[i];
        float ui = mu * u[i] + gi;
        u[i] = ui;
        g[i] = ui;
    }
}

void gv_optim_step_range_host(const struct gv_optim_cfg *cfg, int64_t t, float *p, float *v,
                              const float *g, size_t a, size_t b)
{
    if (b <= a)
        return;
    gv_optim_apply_host(cfg, gv_optim_lr(cfg, t), p + a, v + a, g + a, b - a);
}

gv_status_t gv_optim_step(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg, int64_t t,
                          float *p, float *v, const float *g, size_t n)
{
    return be->ops->optim(be, cfg, gv_optim_lr(cfg, t), p, v, g, n);
}

gv_status_t gv_optim_apply(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg, float lr,
                           float *p, float *v, const float *g, size_t n)
{
    return n > 0 ? be->ops->optim(be, cfg, lr, p, v, g, n) : GV_OK;
}

gv_status_t gv_optim_velocity(struct gv_nn_backend *be, const struct gv_optim_cfg *cfg,
                              const float *p, float *u, float *g, size_t n)
{
    return n > 0 ? be->ops->velocity(be, cfg, p, u, g, n) : GV_OK;
}
