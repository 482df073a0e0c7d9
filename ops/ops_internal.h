/* ops_internal.h: what the files of ops/ share and tests of ops/ may use: the parsed form of an
 * option value and the value parsers with their error texts. Not part of the public API. */
#ifndef GV_OPS_INTERNAL_H
#define GV_OPS_INTERNAL_H

#include "gv_ops.h"

/* A parsed option value. str and list are owned. */
struct cfg_value {
    union {
        int i;
        uint64_t u;
        double d;
        bool b;
    } num;
    char *str;                /* STRING */
    struct gv_hostport hp;    /* ADDR */
    struct gv_hostport *list; /* HOSTLIST [n_list] */
    size_t n_list;
};

#define CFG_PROBLEM_MAX 256

/* Parses text as option o's type and checks its range. GV_ERR_INVAL with a sentence in problem
 * ("'abc' is not a number"), GV_ERR_NOMEM. On error *v holds nothing to free. */
gv_status_t cfg_parse_value(const struct gv_opt *o, const char *text, struct cfg_value *v,
                            char *problem, size_t problem_len);
/* Writes the parsed value into the destination field and hands str/list over to the caller
 * (who frees them with cfg_value_free when the field is overwritten). */
void cfg_value_store(const struct gv_opt *o, const struct cfg_value *v, void *dst);
void cfg_value_free(struct cfg_value *v);

/* text quoted for a message: at most ~60 bytes, non-printable bytes as '?'. */
void cfg_quote(const char *text, char *buf, size_t len);
/* "double", "host:port list", ... */
const char *cfg_type_name(enum gv_opt_type type);
/* The placeholder after --name= in --help: "N", "X", "SIZE", ... (NULL for booleans). */
const char *cfg_type_meta(enum gv_opt_type type);
/* The allowed range as text ("0 to 10", "1ms to 1min"), "" without GV_OPT_RANGE. */
void cfg_range_text(const struct gv_opt *o, char *buf, size_t len);
/* Levenshtein distance, capped at 100. */
unsigned cfg_edit_distance(const char *a, const char *b);

/* The metrics endpoint's address as an operator reads it: "HOST:PORT" with an IPv6 literal in
 * brackets and an empty host as "0.0.0.0" (or "::" when v6); and the URL
 * "http://HOST:PORT/metrics", where a zone's '%' is written "%25" (RFC 6874). Truncated to len. */
void ops_http_hostport(const char *host, bool v6, uint16_t port, char *buf, size_t len);
void ops_http_url(const char *host, bool v6, uint16_t port, char *buf, size_t len);

/* Section identifiers for gv_cfg and the ini reader. */
#define CFG_SCOPE_NONE 0
#define CFG_SCOPE_COMMON 1
#define CFG_SCOPE_OWN 2

#endif /* GV_OPS_INTERNAL_H */
