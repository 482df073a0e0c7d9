/* bench_ps.c: `gravac-bench ps`: push/pull rounds through the real parameter-server path (S
 * gv_server and W gv_worker instances in threads of this process, bench_ps_run.c) against the
 * transport's own pushpull at the same payload size, measured in the same invocation: command
 * line, the perftest-style banner, and the report in text, JSON or CSV. */
#include "bench.h"
#include "bench_ps.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void bp_usage(FILE *f)
{
    fprintf(f,
            "usage: gravac-bench ps [options]\n"
            "\n"
            "Push/pull rounds through the real parameter-server code path (aggregation in rank\n"
            "order, the optimizer, checksums, the update; compression for CF > 1): S servers\n"
            "and W workers as threads of this process on 127.0.0.1 over TCP, a fixed synthetic\n"
            "gradient, no model compute; against the transport's pushpull (gravac-bench\n"
            "transport --mode pushpull) at the same payload bytes, alternated with it.\n"
            "\n"
            "cluster and model:\n"
            "  --workers W          workers (default 1, at most %d)\n"
            "  --servers S          servers (default 1, at most %d)\n"
            "  --sizes S            value sizes (the dense model, 4 bytes a parameter): A:B\n"
            "                       (x2 steps), A:B:4 (x4) or a list 4K,1M; suffixes K M G\n"
            "                       (default 4K:64M:4); the MLP whose size is nearest is used\n"
            "  --cf LIST            compression factors, 1 = dense (default 1)\n"
            "  --method M           the method of CF > 1: static (default), gravac-exp,\n"
            "                       gravac-geo (CF = the controller's floor, theta-min)\n"
            "  --gravac-window N    the controller's window for gravac-* (default 50)\n"
            "  --compressor C       topk (default), randomk, dgc, redsync\n"
            "  --no-fp16            sparse values as f32 (the job's default: fp16)\n"
            "  --compress-threads N worker compression threads (default 1)\n"
            "  --verify-every N     workers compare shard checksums every N rounds (default 1,\n"
            "                       as gravac-worker; 0: never)\n"
            "measurement:\n"
            "  --iters N            measured rounds per repeat (default: by size, 20..2000)\n"
            "  --warmup N           rounds first, unmeasured (default: iters/10, 3..100)\n"
            "  --repeats N          PS and baseline alternated N times, the ratio is the median\n"
            "                       of the repeats' (default 1)\n"
            "  --window N           the baseline's round trips in flight per connection\n"
            "                       (default 1: like the PS, one round per worker in flight)\n"
            "  --no-baseline        PS rounds only\n"
            "  --breakdown          time per phase and round (workers: compress, push, wait,\n"
            "                       apply; servers: aggregate, add, decide, update)\n"
            "  --trace DIR          every process's timeline (Chrome trace JSON) in DIR\n"
            "output:\n"
            "  --json | --csv       machine-readable output instead of the table\n"
            "exit status: 0 ok, 1 runtime error, 2 usage error\n",
            BP_MAX_WORKERS, BP_MAX_SERVERS);
}

static int bp_parse_size(const char *s, uint64_t *v_p)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-')
        return -1;
    int shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    else if (*end == 'g' || *end == 'G')
        shift = 30;
    if (shift != 0)
        end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return -1;
    *v_p = (uint64_t)v << shift;
    return 0;
}

static int bp_parse_sizes(struct bp_opts *o, const char *arg)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", arg);
    snprintf(o->sizes_desc, sizeof(o->sizes_desc), "%s", arg);
    o->n_sizes = 0;
    if (strchr(buf, ':') != NULL) {
        char *a = buf, *b = strchr(a, ':'), *f;
        *b++ = '\0';
        uint64_t lo, hi, factor = 2;
        if ((f = strchr(b, ':')) != NULL) {
            *f++ = '\0';
            if (bp_parse_size(f, &factor) != 0 || factor < 2)
                return -1;
        }
        if (bp_parse_size(a, &lo) != 0 || bp_parse_size(b, &hi) != 0 || lo < 1 || hi < lo)
            return -1;
        for (uint64_t s = lo; s <= hi && o->n_sizes < BP_MAX_SIZES; s *= factor)
            o->sizes[o->n_sizes++] = s;
    } else {
        for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            if (o->n_sizes == BP_MAX_SIZES || bp_parse_size(t, &o->sizes[o->n_sizes]) != 0)
                return -1;
            o->n_sizes++;
        }
    }
    for (int i = 0; i < o->n_sizes; i++) /* 1 KiB .. 1 GiB: an MLP of 256 .. 2^28 parameters */
        if (o->sizes[i] < 1024 || o->sizes[i] > (1ull << 30))
            return -1;
    return o->n_sizes > 0 ? 0 : -1;
}

static int bp_parse_cfs(struct bp_opts *o, const char *arg)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", arg);
    snprintf(o->cfs_desc, sizeof(o->cfs_desc), "%s", arg);
    o->n_cfs = 0;
    for (char *save, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(t, &end);
        if (o->n_cfs == BP_MAX_CFS || end == t || *end != '\0' || !(v >= 1 && v <= 1e6))
            return -1;
        o->cfs[o->n_cfs++] = v;
    }
    return o->n_cfs > 0 ? 0 : -1;
}

static int bp_parse_long(const char *s, long lo, long hi, long *v_p)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return -1;
    *v_p = v;
    return 0;
}

/* Returns 0 to run, 1 for --help, 2 for a usage error. */
static int bp_parse_args(struct bp_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"workers", required_argument, 0, 'w'},
        {"servers", required_argument, 0, 's'},
        {"sizes", required_argument, 0, 'z'},
        {"cf", required_argument, 0, 'c'},
        {"method", required_argument, 0, 'm'},
        {"gravac-window", required_argument, 0, 'g'},
        {"compressor", required_argument, 0, 'C'},
        {"compress-threads", required_argument, 0, 'T'},
        {"verify-every", required_argument, 0, 'V'},
        {"iters", required_argument, 0, 'i'},
        {"warmup", required_argument, 0, 'W'},
        {"repeats", required_argument, 0, 'r'},
        {"window", required_argument, 0, 'n'},
        {"no-baseline", no_argument, 0, 'N'},
        {"no-fp16", no_argument, 0, 'F'},
        {"breakdown", no_argument, 0, 'b'},
        {"trace", required_argument, 0, 't'},
        {"json", no_argument, 0, 'j'},
        {"csv", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    static const char *const methods[] = {"static", "gravac-exp", "gravac-geo", NULL};
    static const char *const compressors[] = {"topk", "randomk", "dgc", "redsync", NULL};
    long v;
    uint64_t u;
    int opt;
    memset(o, 0, sizeof(*o));
    o->workers = o->servers = 1;
    o->method = "static";
    o->compressor = "topk";
    o->gravac_window = 50;
    o->warmup = -1;
    o->repeats = 1;
    o->window = 1;
    o->cmp_threads = 1;
    o->verify_every = 1;
    o->trace_dir = "";
    bp_parse_sizes(o, "4K:64M:4");
    bp_parse_cfs(o, "1");
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (opt) {
        case 'w':
            if (bp_parse_long(optarg, 1, BP_MAX_WORKERS, &v) != 0)
                goto bad;
            o->workers = (uint32_t)v;
            break;
        case 's':
            if (bp_parse_long(optarg, 1, BP_MAX_SERVERS, &v) != 0)
                goto bad;
            o->servers = (uint32_t)v;
            break;
        case 'z':
            if (bp_parse_sizes(o, optarg) != 0)
                goto bad;
            break;
        case 'c':
            if (bp_parse_cfs(o, optarg) != 0)
                goto bad;
            break;
        case 'm':
        case 'C': {
            const char *const *list = opt == 'm' ? methods : compressors;
            for (v = 0; list[v] != NULL && strcmp(list[v], optarg) != 0; v++)
                ;
            if (list[v] == NULL)
                goto bad;
            *(opt == 'm' ? &o->method : &o->compressor) = list[v];
            break;
        }
        case 'g':
            if (bp_parse_long(optarg, 1, 1000000, &v) != 0)
                goto bad;
            o->gravac_window = (uint64_t)v;
            break;
        case 'T':
            if (bp_parse_long(optarg, 1, 256, &v) != 0)
                goto bad;
            o->cmp_threads = (int)v;
            break;
        case 'V':
            if (bp_parse_long(optarg, 0, 1000000, &v) != 0)
                goto bad;
            o->verify_every = (uint32_t)v;
            break;
        case 'i':
            if (bp_parse_size(optarg, &u) != 0 || u < 1 || u > 10000000)
                goto bad;
            o->iters = u;
            break;
        case 'W':
            if (bp_parse_size(optarg, &u) != 0 || u > 10000000)
                goto bad;
            o->warmup = (int64_t)u;
            break;
        case 'r':
            if (bp_parse_long(optarg, 1, BP_MAX_REPEATS, &v) != 0)
                goto bad;
            o->repeats = (int)v;
            break;
        case 'n':
            if (bp_parse_long(optarg, 1, BT_MAX_WINDOW, &v) != 0)
                goto bad;
            o->window = (int)v;
            break;
        case 'N': o->no_baseline = true; break;
        case 'F': o->f32 = true; break;
        case 'b': o->breakdown = true; break;
        case 't': o->trace_dir = optarg; break;
        case 'j': o->json = 1; break;
        case 'v': o->csv = 1; break;
        case 'h': return 1;
        default: goto bad_quiet;
        }
    }
    if (optind != argc || (o->json && o->csv))
        goto bad;
    if ((uint64_t)o->workers * o->servers > BT_MAX_CONNS * 16ull || o->workers > BT_MAX_CONNS)
        goto bad;
    return 0;
bad:
    fprintf(stderr, "gravac-bench ps: invalid option or value%s%s\n",
            optind <= argc && optind > 0 ? " near " : "",
            optind <= argc && optind > 0 ? argv[optind - 1] : "");
bad_quiet:
    fprintf(stderr, "try 'gravac-bench ps --help'\n");
    return 2;
}

/* ---------------------------------------------------------------- report */

#define BP_RULE                                                                                    \
    "--------------------------------------------------------------------------------------------" \
    "--"                                                                                           \
    "---------------------------------------"

static void bp_banner(const struct bp_opts *o)
{
    char iters[64], warm[32], method[96];
    if (o->iters > 0)
        snprintf(iters, sizeof(iters), "%llu x %d", (unsigned long long)o->iters, o->repeats);
    else
        snprintf(iters, sizeof(iters), "auto (by size) x %d", o->repeats);
    if (o->warmup >= 0)
        snprintf(warm, sizeof(warm), "%lld", (long long)o->warmup);
    else
        snprintf(warm, sizeof(warm), "auto");
    if (strncmp(o->method, "gravac", 6) == 0)
        snprintf(method, sizeof(method), "%s (window %llu), %s, %s", o->method,
                 (unsigned long long)o->gravac_window, o->compressor, o->f32 ? "f32" : "fp16");
    else
        snprintf(method, sizeof(method), "%s, %s, %s", o->method, o->compressor,
                 o->f32 ? "f32" : "fp16");
    printf("%s\n", BP_RULE);
    printf("                    gravac parameter-server benchmark: push/pull rounds\n");
    printf(" Transport      : %-24s Role         : loopback (%u server + %u worker threads)\n",
           "tcp", o->servers, o->workers);
    printf(" Workers        : %-24u Servers      : %u (model sharded evenly)\n", o->workers,
           o->servers);
    printf(" Sizes          : %-24s CF           : %s (1: dense; else %s)\n", o->sizes_desc,
           o->cfs_desc, method);
    printf(" Iterations     : %-24s Warmup       : %s\n", iters, warm);
    printf(" Server path    : %-24s Checksums    : %s\n", "rank-order sum, SGD",
           o->verify_every ? "every round (server + worker)" : "server only");
    if (o->no_baseline)
        printf(" Baseline       : none (--no-baseline)\n");
    else
        printf(" Baseline       : transport pushpull, %u conn%s, window %d, same payload bytes, "
               "alternated\n",
               o->workers, o->workers == 1 ? "" : "s", o->window);
    printf(
        " Goodput        : payload only, all workers summed; up = pushes, down = updates;\n"
        "                  eff = the dense model's bytes both ways (what compression delivers)\n");
    printf(" Latency        : usec per worker step (compress, push, wait, apply)\n");
    printf("%s\n", BP_RULE);
    printf(" %10s %6s %7s %9s %9s %9s %9s %9s %8s %8s %9s %9s %10s %9s %7s %8s %8s\n", "bytes",
           "cf", "iters", "rtt_min", "p50", "p99", "p99.9", "max", "up_Gb/s", "dn_Gb/s", "Gb/s(2w)",
           "eff_Gb/s", "pp_bytes", "pp_Gb/s", "ratio", "cpu_ms", "pp_cpu");
    fflush(stdout);
}

/* CPU milliseconds of the whole process per PS round, and per PS-round equivalent of the
 * baseline (W round trips). */
static double bp_cpu_ms(const struct bp_result *r)
{
    return r->iters ? r->cpu_s * 1e3 / (double)r->iters : 0.0;
}

static double bp_pp_cpu_ms(const struct bp_result *r)
{
    return r->pp_rounds ? r->pp_cpu_s * 1e3 / (double)r->pp_rounds : 0.0;
}

static void bp_row(const struct bp_opts *o, const struct bp_result *r, int first)
{
    const struct bt_result *p = &r->pp;
    if (o->json) {
        printf("%s\n    {\"bytes\": %llu, \"numel\": %llu, \"cf\": %g, \"cf_mean\": %.4g, "
               "\"iters\": %llu, \"seconds\": %.6f, \"up_bytes\": %llu, \"down_bytes\": %llu, "
               "\"up_gbps\": %.4f, \"down_gbps\": %.4f, \"gbps\": %.4f, \"eff_gbps\": %.4f, "
               "\"rtt_us\": {\"min\": "
               "%.3f, \"p50\": %.3f, \"p99\": %.3f, \"p99_9\": %.3f, \"max\": %.3f}",
               first ? "" : ",", (unsigned long long)r->bytes, (unsigned long long)r->numel, r->cf,
               r->cf_mean, (unsigned long long)r->iters, r->seconds,
               (unsigned long long)r->up_bytes, (unsigned long long)r->down_bytes, r->up_gbps,
               r->down_gbps, r->gbps, r->eff_gbps, r->rtt_min, r->rtt_p50, r->rtt_p99, r->rtt_p999,
               r->rtt_max);
        if (r->have_pp) {
            printf(", \"pushpull\": {\"bytes\": %llu, \"iters\": %llu, \"seconds\": %.6f, "
                   "\"gbps\": %.4f, \"lat_us\": {\"min\": %.3f, \"p50\": %.3f, \"p99\": %.3f, "
                   "\"p99_9\": %.3f, \"max\": %.3f}}, \"ratio\": %.4f, \"ratios\": [",
                   (unsigned long long)p->bytes, (unsigned long long)p->iters, p->seconds, p->gbps,
                   p->lat_min, p->lat_p50, p->lat_p99, p->lat_p999, p->lat_max, r->ratio);
            for (int i = 0; i < r->n_ratios; i++)
                printf("%s%.4f", i ? ", " : "", r->ratios[i]);
            printf("], \"pp_cpu_ms\": %.4f", bp_pp_cpu_ms(r));
        }
        printf(", \"cpu_ms\": %.4f", bp_cpu_ms(r));
        if (r->bd.on) {
            printf(", \"breakdown_us\": {");
            for (int k = 0; k < GV_PS_SPAN_N; k++)
                printf("%s\"%s\": %.3f", k ? ", " : "", gv_ps_span_names[k], r->bd.us[k]);
            printf("}");
        }
        printf("}");
    } else if (o->csv) {
        printf("%u,%u,%s,%s,%llu,%llu,%g,%.4g,%llu,%.6f,%.4f,%.4f,%.4f,%.4f,%.3f,%.3f,%.3f,%.3f,"
               "%.3f",
               o->workers, o->servers, r->cf > 1 ? o->method : "dense", o->compressor,
               (unsigned long long)r->bytes, (unsigned long long)r->numel, r->cf, r->cf_mean,
               (unsigned long long)r->iters, r->seconds, r->up_gbps, r->down_gbps, r->gbps,
               r->eff_gbps, r->rtt_min, r->rtt_p50, r->rtt_p99, r->rtt_p999, r->rtt_max);
        if (r->have_pp)
            printf(",%llu,%.4f,%.3f,%.4f", (unsigned long long)p->bytes, p->gbps, p->lat_p50,
                   r->ratio);
        else
            printf(",,,,");
        for (int k = 0; k < GV_PS_SPAN_N; k++)
            r->bd.on ? printf(",%.3f", r->bd.us[k]) : printf(",");
        printf(",%.4f", bp_cpu_ms(r));
        r->have_pp ? printf(",%.4f\n", bp_pp_cpu_ms(r)) : printf(",\n");
    } else {
        printf(" %10llu %6g %7llu %9.1f %9.1f %9.1f %9.1f %9.1f %8.3f %8.3f %9.3f %9.3f",
               (unsigned long long)r->bytes, r->cf_mean, (unsigned long long)r->iters, r->rtt_min,
               r->rtt_p50, r->rtt_p99, r->rtt_p999, r->rtt_max, r->up_gbps, r->down_gbps, r->gbps,
               r->eff_gbps);
        if (r->have_pp)
            printf(" %10llu %9.3f %7.3f %8.3f %8.3f\n", (unsigned long long)p->bytes, p->gbps,
                   r->ratio, bp_cpu_ms(r), bp_pp_cpu_ms(r));
        else
            printf(" %10s %9s %7s %8.3f %8s\n", "-", "-", "-", bp_cpu_ms(r), "-");
    }
    fflush(stdout);
}

static void bp_breakdown_table(const struct bp_result *res, int n)
{
    printf("\n Time per phase, usec per round (mean over workers / servers); nested: push in "
           "compress,\n apply in wait (or compress), add in aggregate; decide on servers 1..S-1 "
           "is the wait for server 0\n");
    printf(" %10s %6s |", "bytes", "cf");
    for (int k = 0; k < GV_PS_SPAN_N; k++)
        printf(" %9s", gv_ps_span_names[k]);
    printf(" | %9s\n", "rtt_mean");
    for (int i = 0; i < n; i++) {
        const struct bp_result *r = &res[i];
        if (!r->bd.on)
            continue;
        printf(" %10llu %6g |", (unsigned long long)r->bytes, r->cf_mean);
        for (int k = 0; k < GV_PS_SPAN_N; k++)
            printf(" %9.1f", r->bd.us[k]);
        printf(" | %9.1f\n", r->iters ? r->seconds / (double)r->iters * 1e6 : 0.0);
    }
}

static void bp_header(const struct bp_opts *o)
{
    if (o->json) {
        printf("{\"benchmark\": \"ps\", \"transport\": \"tcp\", \"workers\": %u, \"servers\": %u, "
               "\"method\": \"%s\", \"compressor\": \"%s\", \"gravac_window\": %llu, "
               "\"verify_every\": %u, \"repeats\": %d, \"baseline\": %s, \"window\": %d, "
               "\"goodput\": \"payload, all workers\", \"latency\": \"worker step\", "
               "\"results\": [",
               o->workers, o->servers, o->method, o->compressor,
               (unsigned long long)o->gravac_window, o->verify_every, o->repeats,
               o->no_baseline ? "null" : "\"pushpull\"", o->window);
    } else if (o->csv) {
        printf("workers,servers,method,compressor,bytes,numel,cf,cf_mean,iters,seconds,up_gbps,"
               "down_gbps,gbps,eff_gbps,rtt_min_us,rtt_p50_us,rtt_p99_us,rtt_p999_us,rtt_max_us,pp_"
               "bytes,"
               "pp_gbps,pp_p50_us,ratio");
        for (int k = 0; k < GV_PS_SPAN_N; k++)
            printf(",%s_us", gv_ps_span_names[k]);
        printf(",cpu_ms,pp_cpu_ms\n");
    } else {
        bp_banner(o);
    }
}

int gv_bench_ps_main(int argc, char **argv)
{
    struct bp_opts o;
    int rc = bp_parse_args(&o, argc, argv);
    if (rc == 1) {
        bp_usage(stdout);
        return 0;
    }
    if (rc != 0)
        return 2;
    if (getenv("GV_LOG_LEVEL") == NULL)
        gv_log_set_level(GV_LOG_WARN); /* the servers' and workers' start-up lines */
    static struct bp_result res[BP_MAX_SIZES * BP_MAX_CFS];
    int n = 0;
    rc = 0;
    bp_header(&o);
    for (int i = 0; i < o.n_sizes && rc == 0; i++) {
        for (int j = 0; j < o.n_cfs && rc == 0; j++) {
            gv_status_t status = bp_run_config(&o, o.sizes[i], o.cfs[j], &res[n]);
            if (status != GV_OK) {
                fprintf(stderr, "gravac-bench ps: size %llu, CF %g: %s\n",
                        (unsigned long long)o.sizes[i], o.cfs[j], gv_status_str(status));
                rc = 1;
                break;
            }
            bp_row(&o, &res[n], n == 0);
            n++;
        }
    }
    if (o.json)
        printf("\n  ], \"ok\": %s}\n", rc == 0 ? "true" : "false");
    else if (!o.csv && o.breakdown)
        bp_breakdown_table(res, n);
    return rc;
}
