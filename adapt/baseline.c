/* baseline.c: Accordion's per-layer two-level rule (the dense and static baselines need no code
 * beyond adapt.c: their decision never changes). gv_adapt.h states the rule. */
#include "adapt_internal.h"

#include <math.h>
#include <string.h>

static void accordion_all_light(struct gv_adapt *ctl)
{
    memset(ctl->heavy, 0, ctl->cfg.accordion.num_layers * sizeof(*ctl->heavy));
}

void accordion_init(struct gv_adapt *ctl)
{
    ctl->level = GV_ADAPT_LEVEL_FLOOR;
    accordion_all_light(ctl); /* epoch 0 is critical */
    ctl->ref_valid = false;
    ctl->epochs = 0;
    ctl->phase_start = 0;
}

uint32_t accordion_heavy_count(const struct gv_adapt *ctl)
{
    uint32_t n = 0;
    for (uint32_t l = 0; l < ctl->cfg.accordion.num_layers; l++)
        n += ctl->heavy[l];
    return n;
}

/* The check at the end of a check epoch: the first of a phase records the reference norms,
 * later ones compare with it. Returns the reason for the log. */
static const char *accordion_check(struct gv_adapt *ctl, const double *norms)
{
    const struct gv_adapt_accordion_cfg *a = &ctl->cfg.accordion;
    if (!ctl->ref_valid) {
        memcpy(ctl->ref_norm, norms, a->num_layers * sizeof(*norms));
        ctl->ref_valid = true;
        accordion_all_light(ctl);
        for (uint32_t l = 0; l < a->num_layers; l++)
            ctl->ratio[l] = NAN; /* no comparison yet */
        return "reference";
    }
    for (uint32_t l = 0; l < a->num_layers; l++) {
        double ref = ctl->ref_norm[l];
        /* A zero reference makes the relative change undefined: critical, as Accordion does. */
        ctl->ratio[l] = ref > 0.0 ? fabs(ref - norms[l]) / ref : INFINITY;
        ctl->heavy[l] = ctl->ratio[l] >= a->eta ? 0 : 1;
        ctl->ref_norm[l] = norms[l];
    }
    return "norm-check";
}

void accordion_update(struct gv_adapt *ctl, const struct gv_adapt_obs *obs)
{
    const struct gv_adapt_accordion_cfg *a = &ctl->cfg.accordion;
    struct adapt_core old;
    adapt_core_get(ctl, &old);

    /* n_obs already counts this observation: a previous lr exists when n_obs > 1 */
    bool decayed = obs->lr_decayed || (ctl->n_obs > 1 && obs->lr < ctl->last_lr);
    if (decayed) {
        accordion_all_light(ctl);
        memset(ctl->ref_norm, 0, a->num_layers * sizeof(*ctl->ref_norm));
        ctl->ref_valid = false;
        ctl->phase_start = ctl->epochs; /* the epoch in progress counts as epoch 0 */
    }
    const char *checked = NULL;
    uint64_t epoch = ctl->epochs;
    if (obs->epoch_end) {
        if ((epoch - ctl->phase_start) % a->switch_epochs == 0) {
            checked = accordion_check(ctl, obs->layer_norms);
            ctl->windows++;
        }
        ctl->epochs++;
    }

    if (ctl->log_cb == NULL)
        return;
    if (checked != NULL)
        /* after a decay ref_valid is false, so a check in the same iteration is a reference */
        adapt_log_accordion_check(ctl, obs->iter, epoch, &old,
                                  decayed ? "lr-decay+reference" : checked);
    else if (decayed)
        adapt_log_decision(ctl, obs->iter, &old, "lr-decay");
}
