/* config_parse.c: the value parsers behind the option types (numbers, booleans, enums, sizes,
 * durations, host:port and host lists) and the sentences they refuse bad text with. No
 * knowledge of where a value came from: config.c adds the option and the source. */
#include "ops_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CFG_MAX_HOSTS 4096
#define U64_LIMIT 18446744073709551616.0 /* 2^64 */

void cfg_quote(const char *text, char *buf, size_t len)
{
    size_t j = 0, max = len > 64 ? 60 : (len > 4 ? len - 4 : 0);
    size_t i;
    for (i = 0; text[i] != '\0' && j < max; i++) {
        unsigned char c = (unsigned char)text[i];
        buf[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (text[i] != '\0' && j + 3 < len) {
        memcpy(buf + j, "...", 3);
        j += 3;
    }
    if (len > 0)
        buf[j < len ? j : len - 1] = '\0';
}

const char *cfg_type_name(enum gv_opt_type type)
{
    switch (type) {
    case GV_OPT_INT: return "integer";
    case GV_OPT_UINT64: return "unsigned integer";
    case GV_OPT_DOUBLE: return "number";
    case GV_OPT_BOOL: return "boolean";
    case GV_OPT_STRING: return "string";
    case GV_OPT_ENUM: return "one of";
    case GV_OPT_SIZE: return "size";
    case GV_OPT_DURATION: return "duration";
    case GV_OPT_ADDR: return "host:port";
    case GV_OPT_HOSTLIST: return "host:port list";
    }
    return "?";
}

const char *cfg_type_meta(enum gv_opt_type type)
{
    switch (type) {
    case GV_OPT_INT:
    case GV_OPT_UINT64: return "N";
    case GV_OPT_DOUBLE: return "X";
    case GV_OPT_BOOL: return NULL;
    case GV_OPT_STRING: return "STR";
    case GV_OPT_ENUM: return "NAME";
    case GV_OPT_SIZE: return "SIZE";
    case GV_OPT_DURATION: return "TIME";
    case GV_OPT_ADDR: return "HOST:PORT";
    case GV_OPT_HOSTLIST: return "HOST:PORT,...";
    }
    return "?";
}

static void cfg_format_seconds(double s, char *buf, size_t len)
{
    if (s != 0 && s < 1e-3)
        snprintf(buf, len, "%gus", s * 1e6);
    else if (s != 0 && s < 1)
        snprintf(buf, len, "%gms", s * 1e3);
    else
        snprintf(buf, len, "%gs", s);
}

/* The shortest of %.15g..%.17g that reads back as v (0.999999, not 0.99999899999999997). */
static void cfg_format_number(double v, char *buf, size_t len)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

void cfg_range_text(const struct gv_opt *o, char *buf, size_t len)
{
    if (!(o->flags & GV_OPT_RANGE)) {
        buf[0] = '\0';
        return;
    }
    if (o->type == GV_OPT_DURATION) {
        char lo[32], hi[32];
        cfg_format_seconds(o->min, lo, sizeof(lo));
        cfg_format_seconds(o->max, hi, sizeof(hi));
        snprintf(buf, len, "%s to %s", lo, hi);
    } else {
        char lo[32], hi[32];
        cfg_format_number(o->min, lo, sizeof(lo));
        cfg_format_number(o->max, hi, sizeof(hi));
        snprintf(buf, len, "%s to %s%s", lo, hi,
                 o->type == GV_OPT_SIZE       ? " bytes"
                 : o->type == GV_OPT_HOSTLIST ? " entries"
                                              : "");
    }
}

unsigned cfg_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned row[65];
    if (la > 64 || lb > 64)
        return 100;
    for (size_t j = 0; j <= lb; j++)
        row[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        unsigned diag = row[0];
        row[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned up = row[j];
            unsigned cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            unsigned best = diag + cost;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* ---------------------------------------------------------------- numbers */

/* Digits with an optional fraction ("12", "1.5", ".5"), no sign, no exponent. Returns the
 * number of bytes taken (0 if none) and the value. */
static size_t cfg_scan_decimal(const char *s, double *v_p, bool *frac_p)
{
    size_t i = 0, digits = 0;
    while (isdigit((unsigned char)s[i])) {
        i++;
        digits++;
    }
    *frac_p = false;
    if (s[i] == '.') {
        size_t j = i + 1;
        while (isdigit((unsigned char)s[j]))
            j++;
        digits += j - i - 1;
        if (j > i + 1)
            *frac_p = true;
        i = j;
    }
    if (digits == 0)
        return 0;
    char tmp[64];
    if (i >= sizeof(tmp))
        return 0;
    memcpy(tmp, s, i);
    tmp[i] = '\0';
    *v_p = strtod(tmp, NULL);
    return i;
}

static bool cfg_is_number(const char *text)
{
    char *end;
    if (text[0] == '\0' || isspace((unsigned char)text[0]))
        return false;
    errno = 0;
    double d = strtod(text, &end);
    (void)d;
    return *end == '\0';
}

static gv_status_t cfg_parse_int(const struct gv_opt *o, const char *text, const char *q,
                                 struct cfg_value *v, char *problem, size_t plen)
{
    char *end;
    bool neg = text[0] == '-';
    if (!(isdigit((unsigned char)text[0]) ||
          ((text[0] == '-' || text[0] == '+') && isdigit((unsigned char)text[1])))) {
        snprintf(problem, plen, "'%s' is not %s", q,
                 cfg_is_number(text) ? "an integer" : "a number");
        return GV_ERR_INVAL;
    }
    errno = 0;
    if (o->type == GV_OPT_UINT64) {
        if (neg) {
            snprintf(problem, plen, "'%s' is negative (allowed 0 to %" PRIu64 ")", q, UINT64_MAX);
            return GV_ERR_INVAL;
        }
        unsigned long long u = strtoull(text, &end, 10);
        if (*end != '\0') {
            snprintf(problem, plen, "'%s' is not %s", q,
                     cfg_is_number(text) ? "an integer" : "a number");
            return GV_ERR_INVAL;
        }
        if (errno == ERANGE) {
            snprintf(problem, plen, "'%s' is out of range (allowed 0 to %" PRIu64 ")", q,
                     UINT64_MAX);
            return GV_ERR_INVAL;
        }
        v->num.u = (uint64_t)u;
        return GV_OK;
    }
    long long ll = strtoll(text, &end, 10);
    if (*end != '\0') {
        snprintf(problem, plen, "'%s' is not %s", q,
                 cfg_is_number(text) ? "an integer" : "a number");
        return GV_ERR_INVAL;
    }
    if (errno == ERANGE || ll < INT_MIN || ll > INT_MAX) {
        snprintf(problem, plen, "'%s' is out of range (allowed %d to %d)", q, INT_MIN, INT_MAX);
        return GV_ERR_INVAL;
    }
    v->num.i = (int)ll;
    return GV_OK;
}

static gv_status_t cfg_parse_double(const char *text, const char *q, struct cfg_value *v,
                                    char *problem, size_t plen)
{
    char *end;
    if (text[0] == '\0' || isspace((unsigned char)text[0])) {
        snprintf(problem, plen, "'%s' is not a number", q);
        return GV_ERR_INVAL;
    }
    errno = 0;
    double d = strtod(text, &end);
    if (*end != '\0') {
        snprintf(problem, plen, "'%s' is not a number", q);
        return GV_ERR_INVAL;
    }
    if (!isfinite(d)) {
        snprintf(problem, plen, "'%s' is not a finite number", q);
        return GV_ERR_INVAL;
    }
    v->num.d = d;
    return GV_OK;
}

static gv_status_t cfg_parse_bool(const char *text, const char *q, struct cfg_value *v,
                                  char *problem, size_t plen)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < GV_ARRAY_LEN(yes); i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            v->num.b = true;
            return GV_OK;
        }
        if (strcasecmp(text, no[i]) == 0) {
            v->num.b = false;
            return GV_OK;
        }
    }
    snprintf(problem, plen, "'%s' is not a boolean (use true/false, yes/no, on/off or 1/0)", q);
    return GV_ERR_INVAL;
}

static gv_status_t cfg_parse_enum(const struct gv_opt *o, const char *text, const char *q,
                                  struct cfg_value *v, char *problem, size_t plen)
{
    for (int i = 0; o->choices[i] != NULL; i++) {
        if (strcasecmp(text, o->choices[i]) == 0) {
            v->num.i = o->values != NULL ? o->values[i] : i;
            return GV_OK;
        }
    }
    size_t off = (size_t)snprintf(problem, plen, "'%s' is not one of: ", q);
    for (int i = 0; o->choices[i] != NULL && off < plen; i++)
        off += (size_t)snprintf(problem + off, plen - off, "%s%s", i ? ", " : "", o->choices[i]);
    return GV_ERR_INVAL;
}

/* ---------------------------------------------------------------- sizes and durations */

gv_status_t gv_parse_size(const char *text, uint64_t *bytes_p)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"b", 1},
        {"k", 1ull << 10},
        {"kb", 1ull << 10},
        {"kib", 1ull << 10},
        {"m", 1ull << 20},
        {"mb", 1ull << 20},
        {"mib", 1ull << 20},
        {"g", 1ull << 30},
        {"gb", 1ull << 30},
        {"gib", 1ull << 30},
        {"t", 1ull << 40},
        {"tb", 1ull << 40},
        {"tib", 1ull << 40},
    };
    double d;
    bool frac;
    size_t n = cfg_scan_decimal(text, &d, &frac);
    if (n == 0)
        return GV_ERR_INVAL;
    for (size_t i = 0; i < GV_ARRAY_LEN(units); i++) {
        if (strcasecmp(text + n, units[i].suffix) != 0)
            continue;
        if (!frac) {
            char *end;
            errno = 0;
            unsigned long long u = strtoull(text, &end, 10);
            if (errno == ERANGE || u > UINT64_MAX / units[i].mult)
                return GV_ERR_INVAL;
            *bytes_p = (uint64_t)u * units[i].mult;
            return GV_OK;
        }
        double b = d * (double)units[i].mult;
        if (!(b < U64_LIMIT))
            return GV_ERR_INVAL;
        *bytes_p = (uint64_t)(b + 0.5);
        return GV_OK;
    }
    return GV_ERR_INVAL;
}

gv_status_t gv_parse_duration(const char *text, uint64_t *ns_p)
{
    static const struct {
        const char *unit;
        double ns;
    } units[] = {
        {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"min", 60e9}, {"h", 3600e9},
    };
    if (strcmp(text, "0") == 0) {
        *ns_p = 0;
        return GV_OK;
    }
    double d;
    bool frac;
    size_t n = cfg_scan_decimal(text, &d, &frac);
    if (n == 0)
        return GV_ERR_INVAL;
    for (size_t i = 0; i < GV_ARRAY_LEN(units); i++) {
        if (strcmp(text + n, units[i].unit) != 0)
            continue;
        double ns = d * units[i].ns;
        if (!(ns < U64_LIMIT))
            return GV_ERR_INVAL;
        *ns_p = (uint64_t)(ns + 0.5);
        return GV_OK;
    }
    return GV_ERR_INVAL;
}

/* ---------------------------------------------------------------- addresses */

static bool cfg_host_char(char c, bool v6)
{
    if (isalnum((unsigned char)c) || c == '.' || c == '-')
        return true;
    if (v6)
        return c == ':' || c == '%';
    return c == '_';
}

/* Parses one "host:port" / "[v6]:port". problem gets a sentence about `q` on failure. */
static gv_status_t cfg_parse_hostport(const char *text, size_t len, int min_port,
                                      struct gv_hostport *hp, char *problem, size_t plen,
                                      const char *q)
{
    const char *host = text, *port;
    size_t host_len;
    bool v6 = text[0] == '[';
    if (v6) {
        const char *close = memchr(text, ']', len);
        if (close == NULL || close + 1 >= text + len || close[1] != ':') {
            snprintf(problem, plen, "'%s' is not [address]:port", q);
            return GV_ERR_INVAL;
        }
        host = text + 1;
        host_len = (size_t)(close - host);
        port = close + 2;
    } else {
        const char *colon = NULL;
        for (size_t i = 0; i < len; i++)
            if (text[i] == ':')
                colon = colon ? text + len : text + i; /* a second colon: unbracketed IPv6 */
        if (colon == NULL) {
            snprintf(problem, plen, "'%s' is not host:port (the port is missing)", q);
            return GV_ERR_INVAL;
        }
        if (colon == text + len) {
            snprintf(problem, plen, "'%s' is not host:port (write an IPv6 address as [::1]:port)",
                     q);
            return GV_ERR_INVAL;
        }
        host_len = (size_t)(colon - text);
        port = colon + 1;
    }
    if (host_len == 0 || host_len >= sizeof(hp->host)) {
        snprintf(problem, plen, "'%s' has %s host", q, host_len ? "too long a" : "an empty");
        return GV_ERR_INVAL;
    }
    for (size_t i = 0; i < host_len; i++) {
        if (!cfg_host_char(host[i], v6)) {
            snprintf(problem, plen, "'%s' has an invalid character in the host", q);
            return GV_ERR_INVAL;
        }
    }
    size_t port_len = (size_t)(text + len - port);
    unsigned long p = 0;
    bool ok = port_len >= 1 && port_len <= 5;
    for (size_t i = 0; ok && i < port_len; i++) {
        ok = isdigit((unsigned char)port[i]);
        p = p * 10 + (unsigned long)(port[i] - '0');
    }
    if (!ok || p > 65535 || p < (unsigned long)min_port) {
        snprintf(problem, plen, "'%s' has an invalid port (allowed %d to 65535)", q, min_port);
        return GV_ERR_INVAL;
    }
    memcpy(hp->host, host, host_len);
    hp->host[host_len] = '\0';
    hp->port = (uint16_t)p;
    return GV_OK;
}

gv_status_t gv_parse_hostport(const char *text, struct gv_hostport *hp_p)
{
    char problem[CFG_PROBLEM_MAX];
    struct gv_hostport hp;
    gv_status_t status =
        cfg_parse_hostport(text, strlen(text), 0, &hp, problem, sizeof(problem), "");
    if (status == GV_OK)
        *hp_p = hp;
    return status;
}

static bool cfg_list_sep(char c)
{
    return c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static gv_status_t cfg_parse_hostlist(const char *text, const char *q, struct cfg_value *v,
                                      char *problem, size_t plen)
{
    size_t cap = 0, n = 0;
    struct gv_hostport *list = NULL;
    const char *s = text;
    gv_status_t status = GV_OK;
    while (*s != '\0') {
        bool comma = false;
        while (cfg_list_sep(*s)) {
            if (*s == ',' && (comma || s == text)) {
                snprintf(problem, plen, "'%s' has an empty entry", q);
                status = GV_ERR_INVAL;
                goto err_free;
            }
            comma |= *s == ',';
            s++;
        }
        if (*s == '\0') {
            if (comma) {
                snprintf(problem, plen, "'%s' has an empty entry", q);
                status = GV_ERR_INVAL;
                goto err_free;
            }
            break;
        }
        size_t len = 0;
        while (s[len] != '\0' && !cfg_list_sep(s[len]))
            len++;
        if (n == CFG_MAX_HOSTS) {
            snprintf(problem, plen, "'%s' has more than %d entries", q, CFG_MAX_HOSTS);
            status = GV_ERR_INVAL;
            goto err_free;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 8;
            struct gv_hostport *nl = gv_realloc(list, ncap * sizeof(*nl));
            if (nl == NULL) {
                status = GV_ERR_NOMEM;
                goto err_free;
            }
            list = nl;
            cap = ncap;
        }
        char eq[80];
        char entry[CFG_PROBLEM_MAX];
        snprintf(entry, sizeof(entry), "%.*s", (int)GV_MIN(len, sizeof(entry) - 1), s);
        cfg_quote(entry, eq, sizeof(eq));
        status = cfg_parse_hostport(s, len, 1, &list[n], problem, plen, eq);
        if (status != GV_OK)
            goto err_free;
        for (size_t i = 0; i < n; i++) {
            if (list[i].port == list[n].port && strcmp(list[i].host, list[n].host) == 0) {
                snprintf(problem, plen, "'%s' lists '%s' twice", q, eq);
                status = GV_ERR_INVAL;
                goto err_free;
            }
        }
        n++;
        s += len;
    }
    v->list = list;
    v->n_list = n;
    return GV_OK;

err_free:
    gv_free(list);
    return status;
}

/* ---------------------------------------------------------------- dispatch */

static gv_status_t cfg_check_range(const struct gv_opt *o, const struct cfg_value *v, const char *q,
                                   char *problem, size_t plen)
{
    double x;
    if (!(o->flags & GV_OPT_RANGE))
        return GV_OK;
    switch (o->type) {
    case GV_OPT_INT: x = v->num.i; break;
    case GV_OPT_UINT64:
    case GV_OPT_SIZE: x = (double)v->num.u; break;
    case GV_OPT_DOUBLE: x = v->num.d; break;
    case GV_OPT_DURATION: x = (double)v->num.u * 1e-9; break;
    case GV_OPT_HOSTLIST: x = (double)v->n_list; break;
    default: return GV_OK;
    }
    if (x >= o->min && x <= o->max)
        return GV_OK;
    char range[96];
    cfg_range_text(o, range, sizeof(range));
    if (o->type == GV_OPT_HOSTLIST)
        snprintf(problem, plen, "'%s' has %zu entries (allowed %s)", q, v->n_list, range);
    else
        snprintf(problem, plen, "'%s' is out of range (allowed %s)", q, range);
    return GV_ERR_INVAL;
}

gv_status_t cfg_parse_value(const struct gv_opt *o, const char *text, struct cfg_value *v,
                            char *problem, size_t plen)
{
    char q[80];
    gv_status_t status = GV_OK;
    cfg_quote(text, q, sizeof(q));
    memset(v, 0, sizeof(*v));
    switch (o->type) {
    case GV_OPT_INT:
    case GV_OPT_UINT64: status = cfg_parse_int(o, text, q, v, problem, plen); break;
    case GV_OPT_DOUBLE: status = cfg_parse_double(text, q, v, problem, plen); break;
    case GV_OPT_BOOL: status = cfg_parse_bool(text, q, v, problem, plen); break;
    case GV_OPT_ENUM: status = cfg_parse_enum(o, text, q, v, problem, plen); break;
    case GV_OPT_STRING:
        v->str = gv_strdup(text);
        status = v->str ? GV_OK : GV_ERR_NOMEM;
        break;
    case GV_OPT_SIZE:
        status = gv_parse_size(text, &v->num.u);
        if (status != GV_OK)
            snprintf(problem, plen,
                     "'%s' is not a size (bytes, with an optional K, M, G or T suffix)", q);
        break;
    case GV_OPT_DURATION:
        status = gv_parse_duration(text, &v->num.u);
        if (status != GV_OK) {
            double d;
            bool frac;
            if (text[0] != '\0' && cfg_scan_decimal(text, &d, &frac) == strlen(text))
                snprintf(problem, plen, "'%s' needs a unit (ns, us, ms, s, min or h)", q);
            else
                snprintf(problem, plen,
                         "'%s' is not a duration (a number and a unit: ns, us, ms, s, min, h)", q);
        }
        break;
    case GV_OPT_ADDR:
        if (text[0] != '\0')
            status = cfg_parse_hostport(text, strlen(text), 0, &v->hp, problem, plen, q);
        break;
    case GV_OPT_HOSTLIST: status = cfg_parse_hostlist(text, q, v, problem, plen); break;
    }
    if (status == GV_OK)
        status = cfg_check_range(o, v, q, problem, plen);
    if (status != GV_OK)
        cfg_value_free(v);
    return status;
}

void cfg_value_store(const struct gv_opt *o, const struct cfg_value *v, void *dst)
{
    void *field = (char *)dst + o->offset;
    switch (o->type) {
    case GV_OPT_INT:
    case GV_OPT_ENUM: memcpy(field, &v->num.i, sizeof(int)); break;
    case GV_OPT_UINT64:
    case GV_OPT_SIZE:
    case GV_OPT_DURATION: memcpy(field, &v->num.u, sizeof(uint64_t)); break;
    case GV_OPT_DOUBLE: memcpy(field, &v->num.d, sizeof(double)); break;
    case GV_OPT_BOOL: memcpy(field, &v->num.b, sizeof(bool)); break;
    case GV_OPT_STRING: {
        const char *s = v->str;
        memcpy(field, &s, sizeof(s));
        break;
    }
    case GV_OPT_ADDR: memcpy(field, &v->hp, sizeof(v->hp)); break;
    case GV_OPT_HOSTLIST: {
        struct gv_hostlist hl = {.n = v->n_list, .v = v->list};
        memcpy(field, &hl, sizeof(hl));
        break;
    }
    }
}

void cfg_value_free(struct cfg_value *v)
{
    gv_free(v->str);
    gv_free(v->list);
    v->str = NULL;
    v->list = NULL;
    v->n_list = 0;
}
