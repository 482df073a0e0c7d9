/* wire.c: the one place where the wire's enums (proto/) meet adapt/'s and compress/'s: the
 * decision's level, the sparse payload's index and value encodings. Servers and workers hold
 * decisions and encodings in adapt/'s and compress/'s terms and convert only here. */
#include "gv_ps.h"

enum gv_proto_level gv_ps_level_to_proto(enum gv_adapt_level level)
{
    switch (level) {
    case GV_ADAPT_LEVEL_CANDIDATE: return GV_PROTO_LEVEL_CANDIDATE;
    case GV_ADAPT_LEVEL_FLOOR: return GV_PROTO_LEVEL_FLOOR;
    default: return GV_PROTO_LEVEL_DENSE;
    }
}

enum gv_adapt_level gv_ps_level_from_proto(enum gv_proto_level level)
{
    switch (level) {
    case GV_PROTO_LEVEL_CANDIDATE: return GV_ADAPT_LEVEL_CANDIDATE;
    case GV_PROTO_LEVEL_FLOOR: return GV_ADAPT_LEVEL_FLOOR;
    default: return GV_ADAPT_LEVEL_DENSE;
    }
}

void gv_ps_decision_to_proto(const struct gv_ps_decision *d, struct gv_proto_decision *out)
{
    *out = (struct gv_proto_decision){.level = gv_ps_level_to_proto(d->level),
                                      .theta_min = d->theta_min,
                                      .cf_candidate = d->cf_candidate,
                                      .cf_send = d->cf_send,
                                      .lr = d->lr,
                                      .resync = d->resync};
}

void gv_ps_decision_from_proto(const struct gv_proto_decision *in, struct gv_ps_decision *d)
{
    *d = (struct gv_ps_decision){.level = gv_ps_level_from_proto(in->level),
                                 .theta_min = in->theta_min,
                                 .cf_candidate = in->cf_candidate,
                                 .cf_send = in->cf_send,
                                 .lr = in->lr,
                                 .resync = in->resync};
}

bool gv_ps_decision_equal(const struct gv_ps_decision *a, const struct gv_ps_decision *b)
{
    return a->level == b->level && a->theta_min == b->theta_min &&
           a->cf_candidate == b->cf_candidate && a->cf_send == b->cf_send && a->lr == b->lr;
}

enum gv_proto_enc gv_ps_idx_enc_to_proto(enum gv_idx_enc enc)
{
    switch (enc) {
    case GV_IDX_RAW32: return GV_PROTO_ENC_U32;
    case GV_IDX_VARINT: return GV_PROTO_ENC_DELTA_VARINT;
    case GV_IDX_BITMAP: return GV_PROTO_ENC_BITMAP;
    default: return GV_PROTO_ENC_NONE; /* dense: no index segment */
    }
}

gv_status_t gv_ps_idx_enc_from_proto(enum gv_proto_enc enc, enum gv_idx_enc *out)
{
    switch (enc) {
    case GV_PROTO_ENC_U32: *out = GV_IDX_RAW32; return GV_OK;
    case GV_PROTO_ENC_DELTA_VARINT: *out = GV_IDX_VARINT; return GV_OK;
    case GV_PROTO_ENC_BITMAP: *out = GV_IDX_BITMAP; return GV_OK;
    default: return GV_ERR_PROTO;
    }
}

enum gv_proto_enc gv_ps_val_type_to_proto(enum gv_val_type vt)
{
    return vt == GV_VAL_F16 ? GV_PROTO_ENC_F16 : GV_PROTO_ENC_F32;
}

gv_status_t gv_ps_val_type_from_proto(enum gv_proto_enc enc, enum gv_val_type *out)
{
    switch (enc) {
    case GV_PROTO_ENC_F32: *out = GV_VAL_F32; return GV_OK;
    case GV_PROTO_ENC_F16: *out = GV_VAL_F16; return GV_OK;
    default: return GV_ERR_PROTO;
    }
}
