/* bench_train.c: `gravac-bench train`: end-to-end time to accuracy. For every link rate, repeat
 * and method it runs a whole cluster (S gravac-server and W gravac-worker processes, each in
 * its own network namespace behind a tc-shaped link, or on loopback), reads the workers'
 * metrics, and reports time and iterations to a target test accuracy, accuracy at the
 * iteration budget, bytes each way, samples/s and the CF timeline, as a table, CSV, JSON and
 * gnuplot plots. The methods share every training option; only the compression differs. */
#include "bench.h"
#include "bench_train.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* lr and momentum: the best trial of `gravac-bench scaling` at B = 256 (= 4 workers x 64) for
 * validation error 0.12 (docs/results.md); one step decay at 3/4 of the budget (appended) */
#define BT_DEFAULT_JOB "--model mlp --dataset fashion-mnist --batch 64 --lr 0.1 --momentum 0.815"
#define BT_DEFAULT_GRAVAC "--theta-min 10 --epsilon 0.45 --omega 0.01 --window 100"
#define BT_DEFAULT_ACCORDION "--theta-min 10 --theta-max 100 --switch-epochs 1"
#define BT_DEFAULT_METHODS "dense,static-10,static-100,static-1000,gravac-exp,gravac-geo,accordion"
#define BT_ARGS 160

static struct bt_net bt_the_net;

static void bt_at_exit(void)
{
    bt_children_kill(2000);
    bt_net_destroy(&bt_the_net);
}

static void bt_usage(FILE *f)
{
    fprintf(f, "usage: gravac-bench train [options] [-- job options for every process]\n"
               "Runs S servers and W workers per method and reports time and iterations to a\n"
               "target test accuracy, accuracy at the budget, bytes each way, samples/s and the\n"
               "CF timeline (table, CSV, JSON, plots). Every process runs in its own network\n"
               "namespace behind a tbf-shaped link (root needed), or on loopback.\n\n"
               "  --servers N          servers (default 2)\n"
               "  --workers N          workers (default 4)\n"
               "  --rates LIST         link rates, e.g. 10gbit,1gbit,100mbit (default 100mbit);\n"
               "                       'none' = namespaces without shaping\n"
               "  --methods LIST       of dense, dense-fp16, static-<CF>, gravac-exp, gravac-geo,\n"
               "                       accordion, auto; NAME-union: with the union downlink\n"
               "                       (default " BT_DEFAULT_METHODS ")\n"
               "  --add-method L=OPTS  a method labelled L with its own job options (repeatable)\n"
               "  --gravac OPTS        options of both GraVAC methods\n"
               "                       (default '" BT_DEFAULT_GRAVAC "';\n"
               "                       exp adds --theta-max 1000, geo --theta-max 2000)\n"
               "  --accordion OPTS     Accordion's options (default '" BT_DEFAULT_ACCORDION "')\n"
               "  --repeats N          runs of each method (default 2)\n"
               "  --seed N             seed of the first repeat (default 1)\n"
               "  --same-seed          every repeat uses --seed (default: repeat k uses seed + k)\n"
               "  --target A           target test accuracy, 0..1 or a percentage (default 0.87:\n"
               "                       about one point under dense's final accuracy, default job)\n"
               "  --also-targets LIST  more targets, reported apart\n"
               "                       (default 0.8,0.84,0.85,0.86,0.88)\n"
               "  --steps N            iteration budget of every run (default 1000)\n"
               "  --eval-every N       worker 0 evaluates every N iterations (default 20)\n"
               "  --out DIR            results (default bench-train)\n"
               "  --bin-dir DIR        gravac-server and gravac-worker (default: next to this\n"
               "                       program)\n"
               "  --net MODE           auto | netns | loopback (default auto: namespaces when\n"
               "                       permitted, else loopback, said so)\n"
               "  --latency T          tbf latency: the queue bound (default 100ms)\n"
               "  --burst BYTES        tbf bucket (default 0: 4 ms at the rate, at least 64 KiB;\n"
               "                       a message that fits passes at once after an idle gap)\n"
               "  --run-timeout S      a run taking longer is stopped and reported failed (1800)\n"
               "  --iperf S            measure each shaped link with iperf3 for S s (default 2;\n"
               "                       0: off)\n"
               "  --plot-format F      png | svg (default png); --no-plots\n"
               "  --progress MODE      auto | on | off: where the bench is (run i of n, method,\n"
               "                       link, iteration, it/s, elapsed, estimated remaining) on\n"
               "                       stderr; auto (default): on a terminal only, redrawn in\n"
               "                       place; on: also into a file, one line per update\n"
               "  --progress-every S   seconds between updates (default 0.5 on a terminal, 10\n"
               "                       otherwise)\n"
               "  --quiet              no progress (--progress off)\n"
               "Job options default to '" BT_DEFAULT_JOB " --lr-schedule step:S'\n"
               "with S = 3/4 of --steps.\n");
}

static gv_status_t bt_add_method(struct bt_opts *o, const char *label, const char *opts)
{
    if (o->n_methods >= BT_MAX_METHODS || strlen(label) >= sizeof(o->methods[0].label) ||
        strlen(opts) >= sizeof(o->methods[0].opts) || label[0] == '\0' ||
        strpbrk(label, "/ ,'\"") != NULL) {
        fprintf(stderr, "gravac-bench train: bad or too many methods ('%s')\n", label);
        return GV_ERR_INVAL;
    }
    struct bt_method *m = &o->methods[o->n_methods++];
    snprintf(m->label, sizeof(m->label), "%s", label);
    snprintf(m->opts, sizeof(m->opts), "%s", opts);
    return GV_OK;
}

static gv_status_t bt_known_method(struct bt_opts *o, const char *label)
{
    /* NAME-union: the same method with the union downlink, for a side-by-side comparison */
    char name[64];
    size_t len = strlen(label);
    if (len >= sizeof(name)) {
        fprintf(stderr, "gravac-bench train: method name too long ('%s')\n", label);
        return GV_ERR_INVAL;
    }
    memcpy(name, label, len + 1);
    bool uni = len > 6 && strcmp(name + len - 6, "-union") == 0;
    if (uni)
        name[len - 6] = '\0';
    char opts[700];
    if (strcmp(name, "dense") == 0 || strcmp(name, "dense-fp16") == 0) {
        snprintf(opts, sizeof(opts), "--method %s", name);
    } else if (strncmp(name, "static-", 7) == 0) {
        char *end;
        double cf = strtod(name + 7, &end);
        if (*end != '\0' || !(cf >= 1 && cf <= 1e9)) {
            fprintf(stderr, "gravac-bench train: bad static CF in '%s'\n", name);
            return GV_ERR_INVAL;
        }
        snprintf(opts, sizeof(opts), "--method static --cf %s", name + 7);
    } else if (strcmp(name, "gravac-exp") == 0) {
        snprintf(opts, sizeof(opts), "--method gravac-exp --theta-max 1000 %s", o->gravac);
    } else if (strcmp(name, "gravac-geo") == 0) {
        snprintf(opts, sizeof(opts), "--method gravac-geo --theta-max 2000 %s", o->gravac);
    } else if (strcmp(name, "accordion") == 0) {
        snprintf(opts, sizeof(opts), "--method accordion %s", o->accordion);
    } else if (strcmp(name, "auto") == 0) {
        snprintf(opts, sizeof(opts), "--method auto"); /* its defaults, on every job */
    } else {
        fprintf(stderr, "gravac-bench train: unknown method '%s'\n", label);
        return GV_ERR_INVAL;
    }
    if (uni)
        snprintf(opts + strlen(opts), sizeof(opts) - strlen(opts), " --downlink union");
    return bt_add_method(o, label, opts);
}

static int bt_list(const char *s, char out[][24], int cap)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", s);
    int n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (n >= cap || strlen(t) >= 24 || strpbrk(t, "/ '\"") != NULL)
            return -1;
        snprintf(out[n++], 24, "%s", t);
    }
    return n;
}

static void bt_default_bin_dir(char *out, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        snprintf(out, len, ".");
        return;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash != NULL)
        *slash = '\0';
    if (snprintf(out, len, "%s", self) >= (int)len)
        snprintf(out, len, ".");
}

static int bt_parse(int argc, char **argv, struct bt_opts *o)
{
    static const struct option lo[] = {{"servers", required_argument, NULL, 'S'},
                                       {"workers", required_argument, NULL, 'W'},
                                       {"rates", required_argument, NULL, 'r'},
                                       {"methods", required_argument, NULL, 'm'},
                                       {"add-method", required_argument, NULL, 'a'},
                                       {"gravac", required_argument, NULL, 'g'},
                                       {"accordion", required_argument, NULL, 'A'},
                                       {"repeats", required_argument, NULL, 'R'},
                                       {"seed", required_argument, NULL, 's'},
                                       {"same-seed", no_argument, NULL, 'x'},
                                       {"target", required_argument, NULL, 't'},
                                       {"steps", required_argument, NULL, 'n'},
                                       {"eval-every", required_argument, NULL, 'e'},
                                       {"out", required_argument, NULL, 'o'},
                                       {"bin-dir", required_argument, NULL, 'b'},
                                       {"net", required_argument, NULL, 'N'},
                                       {"latency", required_argument, NULL, 'l'},
                                       {"burst", required_argument, NULL, 'B'},
                                       {"run-timeout", required_argument, NULL, 'T'},
                                       {"iperf", required_argument, NULL, 'i'},
                                       {"plot-format", required_argument, NULL, 'f'},
                                       {"no-plots", no_argument, NULL, 'P'},
                                       {"help", no_argument, NULL, 'h'},
                                       {"also-targets", required_argument, NULL, 'X'},
                                       {"progress", required_argument, NULL, 'p'},
                                       {"progress-every", required_argument, NULL, 'U'},
                                       {"quiet", no_argument, NULL, 'q'},
                                       {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof(*o));
    *o = (struct bt_opts){.servers = 2,
                          .workers = 4,
                          .repeats = 2,
                          .seed = 1,
                          .target = 0.87,
                          .steps = 1000,
                          .eval_every = 20,
                          .net = BT_NET_AUTO,
                          .run_timeout_s = 1800,
                          .plots = true,
                          .iperf_secs = 2};
    snprintf(o->out, sizeof(o->out), "bench-train");
    snprintf(o->latency, sizeof(o->latency), "100ms");
    snprintf(o->plot_fmt, sizeof(o->plot_fmt), "png");
    snprintf(o->gravac, sizeof(o->gravac), "%s", BT_DEFAULT_GRAVAC);
    snprintf(o->accordion, sizeof(o->accordion), "%s", BT_DEFAULT_ACCORDION);
    snprintf(o->job, sizeof(o->job), "%s", BT_DEFAULT_JOB);
    bt_default_bin_dir(o->bin_dir, sizeof(o->bin_dir));
    char methods[512] = BT_DEFAULT_METHODS, rates[256] = "100mbit";
    char custom[BT_MAX_METHODS][700];
    int n_custom = 0, c;
    bool bad = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        char *end = NULL;
        switch (c) {
        case 'S': o->servers = (int)strtol(optarg, &end, 10); break;
        case 'W': o->workers = (int)strtol(optarg, &end, 10); break;
        case 'r': bad |= snprintf(rates, sizeof(rates), "%s", optarg) >= (int)sizeof(rates); break;
        case 'm':
            bad |= snprintf(methods, sizeof(methods), "%s", optarg) >= (int)sizeof(methods);
            break;
        case 'a':
            if (n_custom >= BT_MAX_METHODS || strchr(optarg, '=') == NULL)
                bad = true;
            else
                snprintf(custom[n_custom++], sizeof(custom[0]), "%s", optarg);
            break;
        case 'g': bad |= snprintf(o->gravac, sizeof(o->gravac), "%s", optarg) >= 600; break;
        case 'A': bad |= snprintf(o->accordion, sizeof(o->accordion), "%s", optarg) >= 600; break;
        case 'R': o->repeats = (int)strtol(optarg, &end, 10); break;
        case 's': o->seed = strtoull(optarg, &end, 10); break;
        case 'x': o->same_seed = true; break;
        case 't':
            o->target = strtod(optarg, &end);
            if (o->target > 1.0)
                o->target /= 100.0;
            break;
        case 'n': o->steps = strtoull(optarg, &end, 10); break;
        case 'e': o->eval_every = strtoull(optarg, &end, 10); break;
        case 'o': bad |= snprintf(o->out, sizeof(o->out), "%s", optarg) >= 512; break;
        case 'b': bad |= snprintf(o->bin_dir, sizeof(o->bin_dir), "%s", optarg) >= 512; break;
        case 'N':
            o->net = strcmp(optarg, "netns") == 0      ? BT_NET_NETNS
                     : strcmp(optarg, "loopback") == 0 ? BT_NET_LOOPBACK
                                                       : BT_NET_AUTO;
            bad |= o->net == BT_NET_AUTO && strcmp(optarg, "auto") != 0;
            break;
        case 'l': bad |= snprintf(o->latency, sizeof(o->latency), "%s", optarg) >= 16; break;
        case 'T': o->run_timeout_s = (int)strtol(optarg, &end, 10); break;
        case 'B':
            o->burst = strtoull(optarg, &end, 10);
            if (o->burst > 0 && o->burst < 1600) { /* under a frame: nothing would pass */
                fprintf(stderr,
                        "gravac-bench train: --burst %s: a tbf bucket holds at least one "
                        "frame (1600 bytes; 0: the default)\n",
                        optarg);
                bad = true;
            }
            break;
        case 'i': o->iperf_secs = (int)strtol(optarg, &end, 10); break;
        case 'f':
            bad |= strcmp(optarg, "png") != 0 && strcmp(optarg, "svg") != 0;
            snprintf(o->plot_fmt, sizeof(o->plot_fmt), "%s", optarg);
            break;
        case 'P': o->plots = false; break;
        case 'p': bad |= bp_mode_parse(optarg, &o->progress) != GV_OK; break;
        case 'U': o->progress_every = strtod(optarg, &end); break;
        case 'q': o->progress = BP_OFF; break;
        case 'X':
            for (const char *p = optarg; *p != '\0' && !bad;) {
                double v = strtod(p, &end);
                if (end == p || o->n_also >= BT_MAX_TARGETS || !(v > 0 && v <= 100)) {
                    bad = true;
                    break;
                }
                o->also[o->n_also++] = v > 1.0 ? v / 100.0 : v;
                p = *end == ',' ? end + 1 : end;
                if (*end != ',' && *end != '\0')
                    bad = true;
            }
            end = NULL;
            break;
        case 'h': bt_usage(stdout); exit(0);
        default: return -1;
        }
        if (end != NULL && (*end != '\0' || end == optarg))
            bad = true;
    }
    if (optind >= argc) /* the default job: its step decay at 3/4 of the budget */
        snprintf(o->job + strlen(o->job), sizeof(o->job) - strlen(o->job),
                 " --lr-schedule step:%llu", (unsigned long long)GV_MAX(1, 3 * o->steps / 4));
    else { /* after "--": the job options */
        o->job[0] = '\0';
        for (int i = optind; i < argc; i++)
            if (strlen(o->job) + strlen(argv[i]) + 2 < sizeof(o->job))
                snprintf(o->job + strlen(o->job), sizeof(o->job) - strlen(o->job), "%s%s",
                         o->job[0] ? " " : "", argv[i]);
            else
                bad = true;
    }
    int nm = 0;
    char names[BT_MAX_METHODS][24];
    if (methods[0] != '\0' && (nm = bt_list(methods, names, BT_MAX_METHODS)) < 0)
        bad = true;
    for (int i = 0; i < nm && !bad; i++)
        bad |= bt_known_method(o, names[i]) != GV_OK;
    for (int i = 0; i < n_custom && !bad; i++) {
        char *eq = strchr(custom[i], '=');
        *eq = '\0';
        bad |= bt_add_method(o, custom[i], eq + 1) != GV_OK;
    }
    o->n_rates = bt_list(rates, o->rates, BT_MAX_RATES);
    if (o->n_also == 0) { /* the crossing of one target is noisy: more by default */
        static const double more[] = {0.80, 0.84, 0.85, 0.86, 0.88};
        for (size_t i = 0; i < GV_ARRAY_LEN(more); i++)
            o->also[o->n_also++] = more[i];
    }
    if (bad || o->n_rates < 1 || o->n_methods < 1 || o->servers < 1 || o->workers < 1 ||
        o->servers + o->workers > BT_MAX_NODES || o->repeats < 1 || o->repeats > BT_MAX_REPEATS ||
        !(o->target > 0 && o->target <= 1) || o->steps < 1 || o->eval_every < 1 ||
        o->run_timeout_s < 1 || o->iperf_secs < 0 || o->iperf_secs > 60 ||
        !(o->progress_every >= 0 && o->progress_every <= 3600))
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- one run */

struct bt_ctx {
    const struct bt_opts *o;
    bool netns;
    struct bp bp;    /* the progress line */
    int run, n_runs; /* the run going on (1-based), of */
    int runs_done;   /* runs finished, and their total time */
    double runs_s;
    double run_t0; /* gv_now_s() at this run's start */
    long it0;      /* the first iteration seen in this run (-1: none yet), when */
    double it_t0;
};

/* argv of one process: [ip netns exec NS] BIN job method common role-specific */
static gv_status_t bt_argv(const struct bt_ctx *x, const struct bt_result *r, bool server, int rank,
                           char **argv, char *store, size_t store_len)
{
    const struct bt_opts *o = x->o;
    int argc = 0;
    size_t used = 0;
    char line[4096], ns[48], bin[700];
    snprintf(bin, sizeof(bin), "%s/%s", o->bin_dir, server ? "gravac-server" : "gravac-worker");
    if (x->netns) {
        bt_net_ns(&bt_the_net, server, rank, ns, sizeof(ns));
        snprintf(line, sizeof(line), "ip netns exec %s ", ns);
    } else {
        line[0] = '\0';
    }
    snprintf(line + strlen(line), sizeof(line) - strlen(line),
             "%s %s %s --seed %llu --steps %llu --num-workers %d --insecure "
             "--connect-timeout 60s --rank %d ",
             bin, o->job, o->methods[r->method].opts, (unsigned long long)r->seed,
             (unsigned long long)o->steps, o->workers, rank);
    if (x->netns) {
        char list[BT_MAX_NODES * 24] = "", ip[32];
        for (int s = 0; s < o->servers; s++) {
            bt_net_ip(true, s, ip, sizeof(ip));
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s:7000", s ? "," : "",
                     ip);
        }
        snprintf(line + strlen(line), sizeof(line) - strlen(line), "--servers %s ", list);
        if (server) {
            bt_net_ip(true, rank, ip, sizeof(ip));
            snprintf(line + strlen(line), sizeof(line) - strlen(line),
                     "--bind 0.0.0.0:7000 --advertise %s ", ip);
        }
    } else {
        snprintf(line + strlen(line), sizeof(line) - strlen(line),
                 "--num-servers %d --rendezvous-dir %s/rdv %s", o->servers, r->dir,
                 server ? "--bind 127.0.0.1:0 " : "");
    }
    if (server && rank == 0)
        snprintf(line + strlen(line), sizeof(line) - strlen(line),
                 "--decision-log %s/decisions.jsonl --obs-trace %s/obs.csv ", r->dir, r->dir);
    if (!server)
        snprintf(line + strlen(line), sizeof(line) - strlen(line),
                 "--quiet --eval-every %llu --metrics-file %s/worker%d.jsonl",
                 (unsigned long long)o->eval_every, r->dir, rank);
    if (strlen(line) + 1 >= sizeof(line)) {
        gv_log(GV_LOG_ERROR, "bench: command line too long");
        return GV_ERR_INVAL;
    }
    return bt_split(line, argv, &argc, BT_ARGS, store, store_len, &used);
}

static void bt_log_tail(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    out[0] = '\0';
    if (f == NULL)
        return;
    char line[400], last[400] = "";
    while (fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, " E ") != NULL || last[0] == '\0')
            snprintf(last, sizeof(last), "%s", line); /* the first error line, else the last */
    fclose(f);
    last[strcspn(last, "\n")] = '\0';
    snprintf(out, len, "%s", last);
}

/* Where the bench is: run i of n, what it runs, worker 0's iteration and rate, and the time
 * left: this run's rest at its measured rate plus the runs to come at the mean time of those
 * done (or of this one, while none is). */
static void bt_progress(struct bt_ctx *x, const struct bt_result *r, bool force)
{
    if (!x->bp.on)
        return;
    const struct bt_opts *o = x->o;
    double now = gv_now_s(), run_s = now - x->run_t0, rate = 0, run_est = -1;
    long it = bt_last_iter(r->dir, 0);
    if (it >= 0 && x->it0 < 0) {
        x->it0 = it;
        x->it_t0 = now;
    }
    if (it > x->it0 && now > x->it_t0) /* from the first sighting: start-up excluded */
        rate = (double)(it - x->it0) / (now - x->it_t0);
    else if (it >= 0 && run_s > 0) /* one sighting so far */
        rate = (double)(it + 1) / run_s;
    if (rate > 0)
        run_est = run_s + (double)((long)o->steps - it - 1) / rate;
    else if (x->runs_done > 0)
        run_est = x->runs_s / x->runs_done;
    double mean = x->runs_done > 0 ? x->runs_s / x->runs_done : run_est;
    double left = run_est < 0 ? -1 : GV_MAX(0.0, run_est - run_s) + (x->n_runs - x->run) * mean;
    char what[200];
    if (it < 0)
        snprintf(what, sizeof(what), "starting");
    else
        snprintf(what, sizeof(what), "iteration %ld/%llu (%.0f%%), %.1f it/s", it + 1,
                 (unsigned long long)o->steps, 100.0 * (double)(it + 1) / (double)o->steps, rate);
    bp_update(&x->bp, force, left, "run %d/%d [%s] %s r%d: %s", x->run, x->n_runs, r->rate,
              o->methods[r->method].label, r->repeat, what);
}

/* Starts every process of one run, waits for all of them, and loads the results. */
static gv_status_t bt_run_one(struct bt_ctx *x, struct bt_result *r)
{
    const struct bt_opts *o = x->o;
    int n = o->servers + o->workers;
    pid_t pids[BT_MAX_NODES];
    char names[BT_MAX_NODES][16];
    gv_status_t status = bt_mkdirs(r->dir);
    if (status == GV_OK && !x->netns) {
        char rdv[800];
        snprintf(rdv, sizeof(rdv), "%s/rdv", r->dir);
        status = bt_mkdirs(rdv);
        for (int s = 0; s < o->servers && status == GV_OK; s++) {
            char f[900];
            snprintf(f, sizeof(f), "%s/server-%d.addr", rdv, s);
            (void)unlink(f); /* a previous run's address */
        }
    }
    for (int w = 0; w < o->workers && status == GV_OK; w++) {
        char f[800];
        snprintf(f, sizeof(f), "%s/worker%d.jsonl", r->dir, w);
        (void)unlink(f); /* a previous bench's, in the same --out: not this run's progress */
    }
    bt_progress(x, r, true);
    static char store[16384];
    char *argv[BT_ARGS];
    int started = 0;
    for (int i = 0; i < n && status == GV_OK; i++) {
        bool server = i < o->servers;
        int rank = server ? i : i - o->servers;
        char log[800];
        snprintf(names[i], sizeof(names[i]), "%s%d", server ? "server" : "worker", rank % 1000);
        snprintf(log, sizeof(log), "%s/%s.log", r->dir, names[i]);
        status = bt_argv(x, r, server, rank, argv, store, sizeof(store));
        if (status == GV_OK)
            status = bt_spawn(argv, log, &pids[i]);
        if (status == GV_OK)
            started++;
    }
    uint64_t deadline = gv_now_ns() + (uint64_t)o->run_timeout_s * 1000000000ull;
    /* workers first (they end the job), then the servers; waking for the progress line every
     * 250 ms, or at its --progress-every when shorter (a run on a fast machine may last less
     * than 250 ms) */
    uint64_t wake_ns = 250000000ull;
    if (x->bp.on && x->bp.every_s > 0 && x->bp.every_s < 0.25)
        wake_ns = (uint64_t)(GV_MAX(x->bp.every_s, 0.01) * 1e9);
    for (int k = 0; k < started && status == GV_OK; k++) {
        int i = (k + o->servers) % n;
        int rc = 0;
        do {
            status = bt_wait(pids[i], GV_MIN(deadline, gv_now_ns() + wake_ns), &rc);
            if (status == GV_ERR_TIMEOUT && gv_now_ns() < deadline)
                bt_progress(x, r, false);
            else
                break;
        } while (true);
        if (status == GV_ERR_TIMEOUT)
            snprintf(r->err, sizeof(r->err), "timed out after %d s (--run-timeout)",
                     o->run_timeout_s);
        if (status == GV_OK && rc != 0) {
            char log[800], tail[300];
            snprintf(log, sizeof(log), "%s/%s.log", r->dir, names[i]);
            bt_log_tail(log, tail, sizeof(tail));
            snprintf(r->err, sizeof(r->err), "%s exited %d: %s", names[i], rc, tail);
            status = GV_ERR_IO;
        }
    }
    if (status != GV_OK) {
        bt_children_kill(3000);
        if (r->err[0] == '\0')
            snprintf(r->err, sizeof(r->err), "%s", gv_status_str(status));
        return status;
    }
    status = bt_result_load(r, r->dir, o->workers, o->target, o->also, o->n_also);
    if (status == GV_OK)
        status = bt_result_series(r);
    return status;
}

/* ---------------------------------------------------------------- machine, main */

static void bt_loadavg(double l[3])
{
    FILE *f = fopen("/proc/loadavg", "r");
    l[0] = l[1] = l[2] = 0;
    if (f != NULL) {
        if (fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3)
            l[0] = l[1] = l[2] = 0;
        fclose(f);
    }
}

static void bt_machine_info(struct bt_machine *m)
{
    memset(m, 0, sizeof(*m));
    m->cpus = sysconf(_SC_NPROCESSORS_ONLN);
    bt_loadavg(m->load_before);
    struct utsname u;
    if (uname(&u) == 0 &&
        snprintf(m->kernel, sizeof(m->kernel), "%s %s %s", u.sysname, u.release, u.machine) < 0)
        m->kernel[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "model name", 10) == 0 && strchr(line, ':') != NULL) {
            snprintf(m->cpu_model, sizeof(m->cpu_model), "%s", strchr(line, ':') + 2);
            m->cpu_model[strcspn(m->cpu_model, "\n")] = '\0';
            break;
        }
    if (f != NULL)
        fclose(f);
}

static gv_status_t bt_setup_net(struct bt_opts *o, struct bt_ctx *x)
{
    x->netns = false;
    if (o->net == BT_NET_LOOPBACK) {
        if (o->n_rates != 1 || strcmp(o->rates[0], "loopback") != 0)
            printf("# --net loopback: links are not shaped; rates reported as 'loopback'\n");
        o->n_rates = 1;
        snprintf(o->rates[0], sizeof(o->rates[0]), "loopback");
        return GV_OK;
    }
    bt_net_remove_stale();
    char why[600] = "";
    gv_status_t status = bt_net_create(&bt_the_net, o->servers, o->workers, why, sizeof(why));
    if (status == GV_OK) {
        x->netns = true;
        return GV_OK;
    }
    if (status == GV_ERR_CLOSED)
        return status;
    if (o->net == BT_NET_NETNS) {
        fprintf(stderr,
                "gravac-bench train: cannot create the network namespaces (root, "
                "CAP_SYS_ADMIN, veth, bridge and tbf are needed): %s\n",
                why);
        return GV_ERR_UNSUPPORTED;
    }
    printf("# network namespaces not available (%s): running on loopback, links not shaped\n", why);
    o->n_rates = 1;
    snprintf(o->rates[0], sizeof(o->rates[0]), "loopback");
    return GV_OK;
}

static void bt_header(const struct bt_opts *o, const struct bt_machine *m, bool netns)
{
    printf("# gravac-bench train: %d servers, %d workers (%d processes) on %ld CPU(s) (%s), load "
           "%.2f before; %s\n",
           o->servers, o->workers, o->servers + o->workers, m->cpus, m->cpu_model,
           m->load_before[0],
           netns ? "every process in its own namespace, link shaped both ways with tbf"
                 : "loopback, no shaping");
    if (netns && o->burst > 0)
        printf("# tbf bucket %llu bytes (default: 4 ms at the rate, at least 64 KiB)\n",
               (unsigned long long)o->burst);
    printf("# job: %s; budget %llu iterations, evaluation every %llu, target %.2f%% test "
           "accuracy, %d repeat(s), seeds %llu%s\n",
           o->job, (unsigned long long)o->steps, (unsigned long long)o->eval_every,
           100.0 * o->target, o->repeats, (unsigned long long)o->seed,
           o->same_seed ? " (all)" : " + repeat");
    for (int i = 0; i < o->n_methods; i++)
        printf("# method %-12s %s\n", o->methods[i].label, o->methods[i].opts);
    fflush(stdout);
}

static void bt_print_run(const struct bt_opts *o, const struct bt_result *r)
{
    if (!r->ok) {
        printf("[%s] %-12s r%d seed %llu: FAILED: %s\n", r->rate, o->methods[r->method].label,
               r->repeat, (unsigned long long)r->seed, r->err);
    } else {
        char tgt[64];
        if (r->target_iter >= 0)
            snprintf(tgt, sizeof(tgt), "target at %lld its / %.1f s", (long long)r->target_iter,
                     r->target_train_s);
        else
            snprintf(tgt, sizeof(tgt), "target not reached");
        printf("[%s] %-12s r%d seed %llu: %llu its in %.1f s (%.1f ms/it, %.0f samples/s), "
               "%.2f%% at budget, %s, up %.1f MiB down %.1f MiB, mean CF %.1f\n",
               r->rate, o->methods[r->method].label, r->repeat, (unsigned long long)r->seed,
               (unsigned long long)r->iters, r->train_s,
               1e3 * r->train_s / (double)GV_MAX(r->iters, 1), r->samples_per_s,
               100.0 * r->final_acc, tgt, (double)r->up_bytes / 1048576.0,
               (double)r->down_bytes / 1048576.0, r->mean_cf);
    }
    fflush(stdout);
}

static gv_status_t bt_run_all(struct bt_opts *o, struct bt_ctx *x, struct bt_machine *mach,
                              struct bt_result *rs, int *n_p)
{
    int n = 0;
    for (int ri = 0; ri < o->n_rates; ri++) {
        const char *rate = o->rates[ri];
        if (x->netns) {
            gv_status_t status = bt_net_shape(&bt_the_net, rate, o->latency, o->burst);
            if (status != GV_OK)
                return status;
            if (o->iperf_secs > 0) {
                bp_update(&x->bp, true, -1, "measuring the %s link with iperf3 (%d s each way)",
                          rate, o->iperf_secs);
                status = bt_net_iperf(&bt_the_net, o->iperf_secs, &mach->iperf_up[ri],
                                      &mach->iperf_down[ri]);
                bp_clear(&x->bp);
                if (status == GV_OK)
                    printf("# link %s: iperf3 worker0 -> server0 %.1f Mbit/s, server0 -> "
                           "worker0 %.1f Mbit/s\n",
                           rate, mach->iperf_up[ri] / 1e6, mach->iperf_down[ri] / 1e6);
                else if (status == GV_ERR_CLOSED)
                    return status;
                else
                    printf("# link %s: not measured (iperf3: %s)\n", rate, gv_status_str(status));
            }
        }
        /* repeats outside, methods inside: a drift of the machine's load spreads over all */
        for (int k = 0; k < o->repeats; k++)
            for (int m = 0; m < o->n_methods; m++) {
                struct bt_result *r = &rs[n++];
                memset(r, 0, sizeof(*r));
                snprintf(r->rate, sizeof(r->rate), "%s", rate);
                r->method = m;
                r->repeat = k;
                r->seed = o->seed + (o->same_seed ? 0 : (uint64_t)k);
                snprintf(r->dir, sizeof(r->dir), "%s/runs/%s/%s/r%d", o->out, rate,
                         o->methods[m].label, k);
                x->run = n;
                x->run_t0 = gv_now_s();
                x->it0 = -1;
                gv_status_t status = bt_run_one(x, r);
                r->ok = status == GV_OK;
                *n_p = n;
                x->runs_done++;
                x->runs_s += gv_now_s() - x->run_t0;
                bp_clear(&x->bp);
                if (bt_interrupted)
                    return GV_ERR_CLOSED;
                bt_print_run(o, r);
            }
    }
    return GV_OK;
}

int gv_bench_train_main(int argc, char **argv)
{
    struct bt_opts *o = gv_calloc(1, sizeof(*o));
    if (o == NULL)
        return 1;
    if (bt_parse(argc, argv, o) != 0) {
        bt_usage(stderr);
        gv_free(o);
        return 2;
    }
    bt_signals_install();
    atexit(bt_at_exit);
    struct bt_machine mach;
    bt_machine_info(&mach);
    struct bt_ctx x = {.o = o, .n_runs = o->n_rates * o->repeats * o->n_methods};
    bp_init(&x.bp, o->progress, o->progress_every, stderr);
    int rc = 1, n = 0;
    struct bt_result *rs = NULL;
    if (bt_mkdirs(o->out) != GV_OK)
        goto out;
    gv_status_t status = bt_setup_net(o, &x);
    if (status != GV_OK) {
        rc = status == GV_ERR_UNSUPPORTED ? 3 : 1;
        goto out;
    }
    mach.netns = x.netns;
    bt_header(o, &mach, x.netns);
    rs = gv_calloc((size_t)(o->n_rates * o->repeats * o->n_methods), sizeof(*rs));
    if (rs == NULL)
        goto out;
    status = bt_run_all(o, &x, &mach, rs, &n);
    bt_loadavg(mach.load_after);
    bt_children_kill(3000);
    bt_net_destroy(&bt_the_net);
    if (status == GV_ERR_CLOSED) {
        fprintf(stderr, "gravac-bench train: interrupted; every process stopped, namespaces "
                        "removed\n");
        rc = 130;
        goto out;
    }
    char path[700];
    snprintf(path, sizeof(path), "%s/train.csv", o->out);
    gv_status_t ws = bt_write_csv(o, rs, n, path);
    snprintf(path, sizeof(path), "%s/train.json", o->out);
    if (ws == GV_OK)
        ws = bt_write_json(o, &mach, rs, n, path);
    bt_print_summary(o, rs, n);
    if (ws == GV_OK && o->plots) {
        if (bt_have_gnuplot())
            ws = bt_plots(o, rs, n);
        else
            printf("# gnuplot not found: no plots (Debian package gnuplot-nox)\n");
    }
    int failed = 0;
    for (int i = 0; i < n; i++)
        failed += !rs[i].ok;
    printf("# load average after: %.2f; results in %s (train.csv, train.json%s)%s\n",
           mach.load_after[0], o->out, o->plots ? ", plots/" : "",
           failed ? "; SOME RUNS FAILED" : "");
    rc = ws == GV_OK && failed == 0 && status == GV_OK ? 0 : 1;
out:
    for (int i = 0; i < n; i++)
        bt_result_free(&rs[i]);
    gv_free(rs);
    gv_free(o);
    return rc;
}
