/* bench_train_net.c: the shaped network of `gravac-bench train`. Every server and worker gets
 * its own network namespace with one veth to a bridge in a hub namespace; tc tbf shapes both
 * ends of every veth (the node's egress and the hub's egress towards the node), so each
 * process has a full-duplex link of the given rate. Created with `ip` and `tc` (iproute2),
 * removed on every exit path; nothing is created in the namespace the bench runs in. */
#include "bench_train.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BT_CMD_MS 15000

static gv_status_t net_run(char *why, size_t why_len, char *const argv[])
{
    char out[512];
    gv_status_t status = bt_exec(argv, BT_CMD_MS, out, sizeof(out), NULL);
    if (status != GV_OK && why != NULL) {
        size_t n = strlen(out);
        while (n > 0 && isspace((unsigned char)out[n - 1]))
            out[--n] = '\0';
        char cmd[256] = "";
        for (int i = 0; argv[i] != NULL && strlen(cmd) < 200; i++)
            snprintf(cmd + strlen(cmd), sizeof(cmd) - strlen(cmd), "%s%s", i ? " " : "", argv[i]);
        snprintf(why, why_len, "'%s' failed: %s", cmd, out[0] ? out : gv_status_str(status));
    }
    return status;
}

void bt_net_ns(const struct bt_net *net, bool server, int rank, char *out, size_t len)
{
    snprintf(out, len, "%s-%c%d", net->prefix, server ? 's' : 'w', rank);
}

void bt_net_ip(bool server, int rank, char *out, size_t len)
{
    snprintf(out, len, "10.201.%d.%d", server ? 0 : 1, 1 + rank);
}

static void net_hub(const struct bt_net *net, char *out, size_t len)
{
    snprintf(out, len, "%s-hub", net->prefix);
}

/* One node: namespace ns, eth0 = ip/16 on the hub's bridge through veth (hub side: port). */
static gv_status_t net_node(struct bt_net *net, const char *ns, const char *ip, const char *port,
                            char *why, size_t why_len)
{
    char hub[48], addr[48];
    net_hub(net, hub, sizeof(hub));
    if (snprintf(addr, sizeof(addr), "%s/16", ip) >= (int)sizeof(addr))
        return GV_ERR_INVAL;
    char *add[] = {"ip", "netns", "add", (char *)ns, NULL};
    gv_status_t status = net_run(why, why_len, add);
    if (status != GV_OK)
        return status;
    net->n_made++;
    char *veth[] = {"ip",   "-n",   hub,    "link", "add",   (char *)port, "type",
                    "veth", "peer", "name", "eth0", "netns", (char *)ns,   NULL};
    char *a1[] = {"ip", "-n", (char *)ns, "addr", "add", addr, "dev", "eth0", NULL};
    char *a2[] = {"ip", "-n", (char *)ns, "link", "set", "eth0", "up", NULL};
    char *a3[] = {"ip", "-n", (char *)ns, "link", "set", "lo", "up", NULL};
    char *a4[] = {"ip", "-n", hub, "link", "set", (char *)port, "master", "br0", NULL};
    char *a5[] = {"ip", "-n", hub, "link", "set", (char *)port, "up", NULL};
    char *const *steps[] = {veth, a1, a2, a3, a4, a5};
    for (size_t i = 0; i < GV_ARRAY_LEN(steps) && status == GV_OK; i++)
        status = net_run(why, why_len, steps[i]);
    return status;
}

gv_status_t bt_net_create(struct bt_net *net, int S, int W, char *why, size_t why_len)
{
    memset(net, 0, sizeof(*net));
    snprintf(net->prefix, sizeof(net->prefix), "gvbt%d", (int)getpid());
    net->S = S;
    net->W = W;
    char hub[48];
    net_hub(net, hub, sizeof(hub));
    char *add[] = {"ip", "netns", "add", hub, NULL};
    if (net_run(why, why_len, add) != GV_OK)
        return GV_ERR_UNSUPPORTED; /* not root, or no CAP_SYS_ADMIN */
    net->hub_made = true;
    char *br[] = {"ip", "-n", hub, "link", "add", "br0", "type", "bridge", NULL};
    char *up[] = {"ip", "-n", hub, "link", "set", "br0", "up", NULL};
    char *lo[] = {"ip", "-n", hub, "link", "set", "lo", "up", NULL};
    if (net_run(why, why_len, br) != GV_OK || net_run(why, why_len, up) != GV_OK ||
        net_run(why, why_len, lo) != GV_OK) {
        bt_net_destroy(net);
        return GV_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < S + W; i++) {
        bool server = i < S;
        int rank = server ? i : i - S;
        char ns[48], ip[32], port[16];
        bt_net_ns(net, server, rank, ns, sizeof(ns));
        bt_net_ip(server, rank, ip, sizeof(ip));
        snprintf(port, sizeof(port), "%c%d", server ? 's' : 'w', rank);
        gv_status_t status = net_node(net, ns, ip, port, why, why_len);
        if (status != GV_OK) {
            bt_net_destroy(net);
            return status == GV_ERR_CLOSED ? status : GV_ERR_UNSUPPORTED;
        }
    }
    return GV_OK;
}

/* Rate in bytes per second from a tc rate with a bit unit ("100mbit"); 0 when not one. */
static double net_rate_bytes(const char *rate)
{
    char *end;
    double v = strtod(rate, &end);
    if (!(v > 0))
        return 0;
    double mult = strcmp(end, "kbit") == 0   ? 1e3
                  : strcmp(end, "mbit") == 0 ? 1e6
                  : strcmp(end, "gbit") == 0 ? 1e9
                  : strcmp(end, "tbit") == 0 ? 1e12
                                             : 0;
    return v * mult / 8.0;
}

gv_status_t bt_net_shape(struct bt_net *net, const char *rate, const char *latency,
                         uint64_t burst_bytes)
{
    bool none = strcmp(rate, "none") == 0;
    double bps = net_rate_bytes(rate);
    if (!none && bps <= 0) {
        gv_log(GV_LOG_ERROR, "bench: rate '%s' is not a tc rate in bits (100mbit, 1gbit, ...)",
               rate);
        return GV_ERR_INVAL;
    }
    /* the bucket by default: 4 ms at the rate, at least 64 KiB (several GSO segments), so the
     * shaper neither starves TCP nor lets much more than the rate through. A message that fits
     * in it passes at once after an idle gap, which a real link of that rate does not do: a
     * smaller bucket (down to a frame) measures how much a result owes to it */
    char burst[32];
    if (burst_bytes > 0)
        snprintf(burst, sizeof(burst), "%llu", (unsigned long long)burst_bytes);
    else
        snprintf(burst, sizeof(burst), "%.0f", GV_MAX(65536.0, bps * 0.004));
    char hub[48];
    net_hub(net, hub, sizeof(hub));
    for (int i = 0; i < net->S + net->W; i++) {
        bool server = i < net->S;
        int rank = server ? i : i - net->S;
        char ns[48], port[16];
        bt_net_ns(net, server, rank, ns, sizeof(ns));
        snprintf(port, sizeof(port), "%c%d", server ? 's' : 'w', rank);
        const char *where[2][2] = {{ns, "eth0"}, {hub, port}};
        for (int e = 0; e < 2; e++) {
            char why[600];
            if (none) {
                char *del[] = {"tc",  "-n",  (char *)where[e][0], "qdisc",
                               "del", "dev", (char *)where[e][1], "root",
                               NULL};
                (void)net_run(NULL, 0, del); /* none there: nothing to remove */
                continue;
            }
            char *tbf[] = {"tc",      "-n",      (char *)where[e][0], "qdisc",
                           "replace", "dev",     (char *)where[e][1], "root",
                           "tbf",     "rate",    (char *)rate,        "burst",
                           burst,     "latency", (char *)latency,     NULL};
            gv_status_t status = net_run(why, sizeof(why), tbf);
            if (status != GV_OK) {
                gv_log(GV_LOG_ERROR, "bench: cannot shape the links: %s", why);
                return status;
            }
        }
    }
    snprintf(net->rate, sizeof(net->rate), "%s", none ? "" : rate);
    return GV_OK;
}

void bt_net_destroy(struct bt_net *net)
{
    if (net == NULL || net->prefix[0] == '\0')
        return;
    for (int i = 0; i < net->S + net->W && net->n_made > 0; i++) {
        bool server = i < net->S;
        char ns[48];
        bt_net_ns(net, server, server ? i : i - net->S, ns, sizeof(ns));
        char *del[] = {"ip", "netns", "del", ns, NULL};
        if (net_run(NULL, 0, del) == GV_OK)
            net->n_made--;
    }
    if (net->hub_made) {
        char hub[48];
        net_hub(net, hub, sizeof(hub));
        char *del[] = {"ip", "netns", "del", hub, NULL};
        (void)net_run(NULL, 0, del);
        net->hub_made = false;
    }
    net->n_made = 0;
}

void bt_net_remove_stale(void)
{
    char *argv[] = {"ip", "netns", "list", NULL};
    static char out[65536];
    if (bt_exec(argv, BT_CMD_MS, out, sizeof(out), NULL) != GV_OK)
        return;
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "gvbt", 4) != 0 || !isdigit((unsigned char)line[4]))
            continue;
        long pid = strtol(line + 4, NULL, 10);
        if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* its bench is alive */
        line[strcspn(line, " ")] = '\0';
        char *del[] = {"ip", "netns", "del", line, NULL};
        if (net_run(NULL, 0, del) == GV_OK)
            fprintf(stderr, "gravac-bench train: removed namespace %s left by a dead run\n", line);
    }
}

static gv_status_t net_iperf_one(const struct bt_net *net, bool reverse, int secs, double *bps)
{
    char sns[48], wns[48], ip[32], t[16];
    bt_net_ns(net, true, 0, sns, sizeof(sns));
    bt_net_ns(net, false, 0, wns, sizeof(wns));
    bt_net_ip(true, 0, ip, sizeof(ip));
    snprintf(t, sizeof(t), "%d", secs);
    char *srv[] = {"ip", "netns", "exec", sns, "iperf3", "-s", "-1", "-p", "5299", NULL};
    pid_t pid;
    gv_status_t status = bt_spawn(srv, "/dev/null", &pid);
    if (status != GV_OK)
        return status;
    static char out[1 << 16];
    char *cli[] = {"ip", "netns", "exec", wns,    "iperf3",
                   "-c", ip,      "-p",   "5299", "-t",
                   t,    "-i",    "0",    "-J",   reverse ? "-R" : NULL,
                   NULL};
    for (int attempt = 0; attempt < 20; attempt++) { /* until the server listens */
        usleep(100000);
        status = bt_exec(cli, (secs + 10) * 1000, out, sizeof(out), NULL);
        if (status == GV_OK || status == GV_ERR_CLOSED)
            break;
    }
    int rc;
    if (bt_wait(pid, gv_now_ns() + 3000000000ull, &rc) != GV_OK) {
        kill(pid, SIGKILL);
        (void)bt_wait(pid, gv_now_ns() + 3000000000ull, &rc);
    }
    if (status != GV_OK)
        return status;
    cJSON *j = cJSON_Parse(out);
    const cJSON *v = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(j, "end"), "sum_received"), "bits_per_second");
    status = cJSON_IsNumber(v) ? GV_OK : GV_ERR_PROTO;
    if (status == GV_OK)
        *bps = v->valuedouble;
    cJSON_Delete(j);
    return status;
}

gv_status_t bt_net_iperf(const struct bt_net *net, int secs, double *up_bps, double *down_bps)
{
    char *probe[] = {"iperf3", "--version", NULL};
    char out[256];
    if (bt_exec(probe, 5000, out, sizeof(out), NULL) != GV_OK)
        return GV_ERR_UNSUPPORTED;
    gv_status_t status = net_iperf_one(net, false, secs, up_bps);
    if (status == GV_OK)
        status = net_iperf_one(net, true, secs, down_bps);
    return status;
}
