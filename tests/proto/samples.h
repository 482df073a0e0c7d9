/* samples.h: one valid message of every type, every field set to a distinct non-zero value,
 * for the proto tests and the fuzz corpus generator. */
#ifndef GV_TEST_SAMPLES_H
#define GV_TEST_SAMPLES_H

#include "gv_proto.h"

/* Fills *m with the sample of this type (pointers go to static storage). */
void gv_sample_msg(enum gv_proto_msg_type type, struct gv_proto_msg *m);

/* A PUSH whose indices are a BITMAP and values F16 (another segment layout). */
void gv_sample_push_bitmap(struct gv_proto_msg *m);

/* A HELLO or PUSH at every cap of caps that applies to it at once: max_segments (RAW), numel
 * and nnz at max_numel, and max_bytes_field + max_text_len (HELLO) or max_layers (PUSH).
 * These are the largest headers the encoder produces within caps. */
void gv_sample_max(const struct gv_proto_caps *caps, enum gv_proto_msg_type type,
                   struct gv_proto_msg *m);

#endif
