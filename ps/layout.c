/* layout.c: a model's layout as workers declare it when the model is not one of nn/'s
 * (libgravac, PyTorch): tensor names and shapes, back to back in the flat vector; its encoding
 * for the LAYOUT message (one RAW segment), the bounded decoder servers run on it, the first
 * difference between two layouts, and the fingerprint of a job with such a layout. The encoding
 * is documented in docs/wire-format.md ("LAYOUT"). */
#include "gv_ps.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

void gv_layout_init(struct gv_layout *l)
{
    memset(l, 0, sizeof(*l));
}

void gv_layout_cleanup(struct gv_layout *l)
{
    if (l == NULL)
        return;
    for (uint32_t t = 0; t < l->n; t++)
        gv_free(l->t[t].name);
    gv_free(l->t);
    gv_free(l->numel);
    memset(l, 0, sizeof(*l));
}

static gv_status_t layout_grow(struct gv_layout *l)
{
    if (l->n < l->cap)
        return GV_OK;
    uint32_t cap = l->cap ? 2 * l->cap : 64;
    if (cap > GV_LAYOUT_MAX_TENSORS)
        cap = GV_LAYOUT_MAX_TENSORS;
    struct gv_layout_tensor *t = gv_calloc(cap, sizeof(*t));
    size_t *numel = gv_calloc(cap, sizeof(*numel));
    if (t == NULL || numel == NULL) {
        gv_free(t);
        gv_free(numel);
        return GV_ERR_NOMEM;
    }
    if (l->n > 0) {
        memcpy(t, l->t, l->n * sizeof(*t));
        memcpy(numel, l->numel, l->n * sizeof(*numel));
    }
    gv_free(l->t);
    gv_free(l->numel);
    l->t = t;
    l->numel = numel;
    l->cap = cap;
    return GV_OK;
}

/* A name the wire accepts: 1..GV_LAYOUT_NAME_MAX printable bytes (no control characters: a
 * peer's names end up in logs). */
static bool layout_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > GV_LAYOUT_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return false;
    }
    return true;
}

/* The tensor's element count, or 0 when a dimension is 0 or the product exceeds the cap. */
static uint64_t layout_numel(uint32_t ndim, const uint64_t *shape)
{
    uint64_t n = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] == 0 || shape[d] > GV_LAYOUT_MAX_NUMEL / n)
            return 0;
        n *= shape[d];
    }
    return n;
}

gv_status_t gv_layout_add(struct gv_layout *l, const char *name, uint32_t ndim,
                          const uint64_t *shape, char *why, size_t why_len)
{
    size_t len = name != NULL ? strnlen(name, GV_LAYOUT_NAME_MAX + 1) : 0;
    uint64_t numel = ndim <= GV_LAYOUT_MAX_DIMS ? layout_numel(ndim, shape) : 0;
    const char *bad = NULL;
    if (!layout_name_ok(name, len))
        bad = "a name of 1 to 200 printable characters";
    else if (ndim > GV_LAYOUT_MAX_DIMS)
        bad = "at most 8 dimensions";
    else if (numel == 0)
        bad = "every dimension at least 1 (and at most 2^40 elements)";
    else if (l->n == GV_LAYOUT_MAX_TENSORS)
        bad = "at most 16384 tensors";
    else if (l->total + numel > GV_LAYOUT_MAX_NUMEL)
        bad = "at most 2^40 elements in all";
    if (bad != NULL) {
        if (why != NULL)
            snprintf(why, why_len, "tensor %u '%.60s': a layout needs %s", l->n,
                     name != NULL ? name : "(null)", bad);
        return GV_ERR_INVAL;
    }
    gv_status_t status = layout_grow(l);
    char *copy = status == GV_OK ? gv_malloc(len + 1) : NULL;
    if (copy == NULL) {
        if (why != NULL)
            snprintf(why, why_len, "out of memory");
        return GV_ERR_NOMEM;
    }
    memcpy(copy, name, len);
    copy[len] = '\0';
    struct gv_layout_tensor *t = &l->t[l->n];
    memset(t, 0, sizeof(*t));
    t->name = copy;
    t->ndim = ndim;
    for (uint32_t d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->numel = numel;
    l->numel[l->n] = (size_t)numel;
    l->total += numel;
    l->n++;
    return GV_OK;
}

/* ---------------------------------------------------------------- encoding
 * u32 n_tensors, then per tensor: u16 name length, the name's bytes, u8 ndim, ndim x u64
 * dimensions; all little-endian, nothing after the last tensor. */

size_t gv_layout_encoded_len(const struct gv_layout *l)
{
    size_t n = 4;
    for (uint32_t t = 0; t < l->n; t++)
        n += 2 + strlen(l->t[t].name) + 1 + 8 * (size_t)l->t[t].ndim;
    return n;
}

static uint8_t *put_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

void gv_layout_encode(const struct gv_layout *l, uint8_t *out)
{
    uint8_t *p = put_le(out, l->n, 4);
    for (uint32_t t = 0; t < l->n; t++) {
        size_t len = strlen(l->t[t].name);
        p = put_le(p, len, 2);
        memcpy(p, l->t[t].name, len);
        p += len;
        *p++ = (uint8_t)l->t[t].ndim;
        for (uint32_t d = 0; d < l->t[t].ndim; d++)
            p = put_le(p, l->t[t].shape[d], 8);
    }
}

static uint64_t get_le(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

gv_status_t gv_layout_decode(const uint8_t *buf, size_t len, struct gv_layout *l, char *why,
                             size_t why_len)
{
    char detail[200] = "";
    gv_layout_init(l);
    if (len < 4 || len > GV_LAYOUT_MAX_BYTES) {
        snprintf(detail, sizeof(detail), "%zu bytes (a layout has 4 to %u)", len,
                 (unsigned)GV_LAYOUT_MAX_BYTES);
        goto err;
    }
    uint64_t n = get_le(buf, 4);
    /* every tensor takes at least 4 bytes: the count is checked before anything is allocated */
    if (n == 0 || n > GV_LAYOUT_MAX_TENSORS || n > (len - 4) / 4) {
        snprintf(detail, sizeof(detail), "%" PRIu64 " tensors in %zu bytes", n, len);
        goto err;
    }
    size_t off = 4;
    for (uint64_t t = 0; t < n; t++) {
        if (len - off < 3) {
            snprintf(detail, sizeof(detail), "tensor %" PRIu64 " truncated", t);
            goto err;
        }
        size_t nl = (size_t)get_le(buf + off, 2);
        off += 2;
        if (nl == 0 || nl > GV_LAYOUT_NAME_MAX || len - off < nl + 1) {
            snprintf(detail, sizeof(detail), "tensor %" PRIu64 ": name of %zu bytes", t, nl);
            goto err;
        }
        char name[GV_LAYOUT_NAME_MAX + 1];
        memcpy(name, buf + off, nl);
        name[nl] = '\0';
        off += nl;
        uint32_t ndim = buf[off++];
        if (ndim > GV_LAYOUT_MAX_DIMS || len - off < 8 * (size_t)ndim) {
            snprintf(detail, sizeof(detail), "tensor %" PRIu64 ": %u dimensions", t, ndim);
            goto err;
        }
        uint64_t shape[GV_LAYOUT_MAX_DIMS];
        for (uint32_t d = 0; d < ndim; d++, off += 8)
            shape[d] = get_le(buf + off, 8);
        gv_status_t status = gv_layout_add(l, name, ndim, shape, detail, sizeof(detail));
        if (status == GV_ERR_NOMEM) {
            gv_layout_cleanup(l);
            if (why != NULL)
                snprintf(why, why_len, "out of memory");
            return status;
        }
        if (status != GV_OK)
            goto err;
    }
    if (off != len) {
        snprintf(detail, sizeof(detail), "%zu bytes after the last tensor", len - off);
        goto err;
    }
    return GV_OK;
err:
    gv_layout_cleanup(l);
    if (why != NULL)
        snprintf(why, why_len, "malformed layout: %s", detail);
    return GV_ERR_PROTO;
}

void gv_layout_shape_str(const struct gv_layout *l, uint32_t t, char *out, size_t len)
{
    size_t off = (size_t)snprintf(out, len, "[");
    for (uint32_t d = 0; d < l->t[t].ndim && off < len; d++)
        off +=
            (size_t)snprintf(out + off, len - off, "%s%" PRIu64, d ? ", " : "", l->t[t].shape[d]);
    if (off < len)
        snprintf(out + off, len - off, "]");
}

bool gv_layout_diff(const struct gv_layout *a, const struct gv_layout *b, const char *a_who,
                    const char *b_who, char *why, size_t why_len)
{
    uint32_t n = GV_MIN(a->n, b->n);
    for (uint32_t t = 0; t < n; t++) {
        const struct gv_layout_tensor *x = &a->t[t], *y = &b->t[t];
        bool same_shape =
            x->ndim == y->ndim && memcmp(x->shape, y->shape, x->ndim * sizeof(x->shape[0])) == 0;
        if (strcmp(x->name, y->name) == 0 && same_shape)
            continue;
        char sa[120], sb[120];
        gv_layout_shape_str(a, t, sa, sizeof(sa));
        gv_layout_shape_str(b, t, sb, sizeof(sb));
        snprintf(why, why_len, "tensor %u is '%.80s' %s on %s but '%.80s' %s on %s", t, x->name, sa,
                 a_who, y->name, sb, b_who);
        return true;
    }
    if (a->n != b->n) {
        const struct gv_layout *more = a->n > b->n ? a : b;
        snprintf(why, why_len, "%s has %u tensors, %s %u (the first extra one: tensor %u '%.80s')",
                 a_who, a->n, b_who, b->n, n, more->t[n].name);
        return true;
    }
    return false;
}

/* FNV-1a, 64 bit, continued from h. */
static uint64_t layout_fnv(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t gv_layout_fingerprint(const struct gv_job *job, const struct gv_layout *l, char *desc,
                               size_t desc_len)
{
    /* the job's options (no tensors of nn/'s), then the layout's canonical encoding: names
     * and shapes byte for byte, without the length limit of the options' text */
    uint64_t h = gv_job_fingerprint(job, NULL, NULL, 0, desc, desc_len);
    uint8_t le[8];
    put_le(le, h, 8);
    h = layout_fnv(0xcbf29ce484222325ull, le, sizeof(le));
    uint8_t buf[4 + 2 + GV_LAYOUT_NAME_MAX + 1 + 8 * GV_LAYOUT_MAX_DIMS];
    put_le(buf, l->n, 4);
    h = layout_fnv(h, buf, 4);
    for (uint32_t t = 0; t < l->n; t++) {
        size_t len = strlen(l->t[t].name);
        uint8_t *p = put_le(buf, len, 2);
        memcpy(p, l->t[t].name, len);
        p += len;
        *p++ = (uint8_t)l->t[t].ndim;
        for (uint32_t d = 0; d < l->t[t].ndim; d++)
            p = put_le(p, l->t[t].shape[d], 8);
        h = layout_fnv(h, buf, (size_t)(p - buf));
    }
    if (desc != NULL && desc_len > 0) {
        size_t off = strlen(desc);
        if (off < desc_len)
            snprintf(desc + off, desc_len - off, "; layout of %u tensors, %" PRIu64 " elements",
                     l->n, l->total);
    }
    return h;
}

gv_status_t gv_layout_from_job(struct gv_layout *l, const struct gv_job *job)
{
    char(*names)[24] = gv_calloc(GV_LAYOUT_JOB_MAX, sizeof(*names));
    size_t *numel = gv_calloc(GV_LAYOUT_JOB_MAX, sizeof(*numel));
    uint32_t n = 0;
    gv_status_t status = names && numel ? GV_OK : GV_ERR_NOMEM;
    if (status == GV_OK)
        status = gv_job_layout(job, names, numel, GV_LAYOUT_JOB_MAX, &n);
    gv_layout_init(l);
    for (uint32_t t = 0; status == GV_OK && t < n; t++) {
        uint64_t shape = numel[t];
        char why[160];
        status = gv_layout_add(l, names[t], 1, &shape, why, sizeof(why));
        if (status == GV_ERR_INVAL)
            gv_log(GV_LOG_ERROR, "model layout: %s", why);
    }
    gv_free(names);
    gv_free(numel);
    if (status != GV_OK)
        gv_layout_cleanup(l);
    return status;
}
