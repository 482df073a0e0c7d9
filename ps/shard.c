/* shard.c: the sharding map: balanced contiguous ranges of the flattened parameter vector and
 * the tensor pieces each range holds. A pure function of (tensor sizes, number of shards). */
#include "gv_ps.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* floor(s * P / S) without overflow for P < 2^64 / 2^32 (S <= 2^32). */
static uint64_t shard_bound(uint64_t total, uint32_t s, uint32_t num_shards)
{
    unsigned __int128 x = (unsigned __int128)total * s;
    return (uint64_t)(x / num_shards);
}

static gv_status_t shard_alloc(struct gv_shard_map *map, uint32_t n_tensors, uint32_t num_shards)
{
    map->lo = gv_calloc((size_t)num_shards + 1, sizeof(*map->lo));
    map->tensor_off = gv_calloc((size_t)n_tensors + 1, sizeof(*map->tensor_off));
    map->piece_first = gv_calloc((size_t)num_shards + 1, sizeof(*map->piece_first));
    /* every boundary splits at most one tensor: at most n_tensors + num_shards - 1 pieces */
    map->pieces = gv_calloc((size_t)n_tensors + num_shards, sizeof(*map->pieces));
    if (map->lo == NULL || map->tensor_off == NULL || map->piece_first == NULL ||
        map->pieces == NULL) {
        gv_log(GV_LOG_ERROR, "shard map: out of memory for %u tensors over %u shards", n_tensors,
               num_shards);
        return GV_ERR_NOMEM;
    }
    return GV_OK;
}

gv_status_t gv_shard_map_init(struct gv_shard_map *map, const size_t *numel, uint32_t n_tensors,
                              uint32_t num_shards)
{
    memset(map, 0, sizeof(*map));
    if (num_shards == 0 || n_tensors == 0 || numel == NULL) {
        gv_log(GV_LOG_ERROR, "shard map: needs at least one tensor and one shard");
        return GV_ERR_INVAL;
    }
    uint64_t total = 0;
    for (uint32_t t = 0; t < n_tensors; t++) {
        if (numel[t] == 0 || total + numel[t] < total) {
            gv_log(GV_LOG_ERROR, "shard map: tensor %u has %zu elements", t, numel[t]);
            return GV_ERR_INVAL;
        }
        total += numel[t];
    }
    if (total < num_shards) {
        gv_log(GV_LOG_ERROR, "shard map: %" PRIu64 " parameters cannot fill %u shards", total,
               num_shards);
        return GV_ERR_INVAL;
    }
    if ((total + num_shards - 1) / num_shards > GV_SHARD_MAX_NUMEL) {
        gv_log(GV_LOG_ERROR,
               "shard map: %" PRIu64 " parameters over %u servers exceed %llu per "
               "shard; use more servers",
               total, num_shards, (unsigned long long)GV_SHARD_MAX_NUMEL);
        return GV_ERR_INVAL;
    }
    gv_status_t status = shard_alloc(map, n_tensors, num_shards);
    if (status != GV_OK) {
        gv_shard_map_cleanup(map);
        return status;
    }
    map->num_shards = num_shards;
    map->num_tensors = n_tensors;
    map->total = total;
    for (uint32_t t = 0; t < n_tensors; t++)
        map->tensor_off[t + 1] = map->tensor_off[t] + numel[t];
    for (uint32_t s = 0; s <= num_shards; s++)
        map->lo[s] = shard_bound(total, s, num_shards);

    uint32_t np = 0, t = 0;
    for (uint32_t s = 0; s < num_shards; s++) {
        map->piece_first[s] = np;
        uint64_t a = map->lo[s], b = map->lo[s + 1];
        while (t < n_tensors && map->tensor_off[t + 1] <= a)
            t++;
        for (uint32_t u = t; u < n_tensors && map->tensor_off[u] < b; u++) {
            uint64_t lo = GV_MAX(a, map->tensor_off[u]), hi = GV_MIN(b, map->tensor_off[u + 1]);
            map->pieces[np++] = (struct gv_shard_piece){.tensor = u,
                                                        .tensor_lo = lo - map->tensor_off[u],
                                                        .shard_lo = lo - a,
                                                        .len = hi - lo};
        }
    }
    map->piece_first[num_shards] = np;
    map->num_pieces = np;
    return GV_OK;
}

void gv_shard_map_cleanup(struct gv_shard_map *map)
{
    if (map == NULL)
        return;
    gv_free(map->lo);
    gv_free(map->tensor_off);
    gv_free(map->piece_first);
    gv_free(map->pieces);
    memset(map, 0, sizeof(*map));
}

uint32_t gv_shard_of(const struct gv_shard_map *map, uint64_t i)
{
    uint32_t a = 0, b = map->num_shards; /* lo[a] <= i < lo[b] */
    while (b - a > 1) {
        uint32_t m = a + (b - a) / 2;
        if (map->lo[m] <= i)
            a = m;
        else
            b = m;
    }
    return a;
}

void gv_shard_map_describe(const struct gv_shard_map *map, const char *const *names,
                           void (*fn)(const char *line, void *arg), void *arg)
{
    char line[1024];
    snprintf(line, sizeof(line),
             "shard map: %" PRIu64 " parameters in %u tensors over %u servers (at most %" PRIu64
             " per server)",
             map->total, map->num_tensors, map->num_shards,
             (map->total + map->num_shards - 1) / map->num_shards);
    fn(line, arg);
    for (uint32_t s = 0; s < map->num_shards; s++) {
        int off = snprintf(line, sizeof(line),
                           "  server %u: [%" PRIu64 ", %" PRIu64 ") %" PRIu64 " params:", s,
                           map->lo[s], map->lo[s + 1], gv_shard_numel(map, s));
        for (uint32_t p = map->piece_first[s]; p < map->piece_first[s + 1]; p++) {
            const struct gv_shard_piece *pc = &map->pieces[p];
            uint64_t tn = map->tensor_off[pc->tensor + 1] - map->tensor_off[pc->tensor];
            char tname[32];
            if (names != NULL)
                snprintf(tname, sizeof(tname), "%s", names[pc->tensor]);
            else
                snprintf(tname, sizeof(tname), "t%u", pc->tensor);
            int n;
            if (pc->len == tn)
                n = snprintf(line + off, sizeof(line) - (size_t)off, " %s", tname);
            else
                n = snprintf(line + off, sizeof(line) - (size_t)off, " %s[%" PRIu64 ":%" PRIu64 ")",
                             tname, pc->tensor_lo, pc->tensor_lo + pc->len);
            if (n < 0 || (size_t)(off + n) >= sizeof(line) - 8) {
                snprintf(line + off, sizeof(line) - (size_t)off, " ...");
                break;
            }
            off += n;
        }
        fn(line, arg);
    }
}
