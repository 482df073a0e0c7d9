/* transport.c: the backend registry (lookup by name, create), the default configuration and
 * what every backend shares (argument checks, connection ids, no-op stubs). The list of
 * backends itself is generated at configure time (tp_backends.c); no backend is named here
 * except in the list of names callers may ask for. */
#include "tp_internal.h"

#include <netdb.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every backend name the project knows, built or not: asking for a known name that is not
 * built gives GV_ERR_UNSUPPORTED, an unknown one GV_ERR_INVAL. */
static const char *const known_backends[] = {"tcp", "rdma"};

static _Atomic uint64_t next_conn_id = 1;

uint64_t gv_tp_conn_id_next(void)
{
    return atomic_fetch_add_explicit(&next_conn_id, 1, memory_order_relaxed);
}

void gv_tp_config_default(struct gv_tp_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->max_hdr_len = 64u << 10;
    cfg->max_payload_len = 2ull << 30;
    cfg->sock_buf_bytes = 4 << 20;
    cfg->connect_timeout_ms = 10000;
    cfg->io_timeout_ms = 10000;
    cfg->keepalive_idle_s = 5;
    cfg->keepalive_intvl_s = 1;
    cfg->keepalive_cnt = 3;
    cfg->max_send_queue = 64;
    cfg->max_send_queue_bytes = 1ull << 30;
}

const struct gv_tp_ops *gv_tp_find(const char *name)
{
    if (name == NULL)
        return NULL;
    for (int i = 0; gv_tp_backends[i] != NULL; i++)
        if (strcmp(gv_tp_backends[i]->name, name) == 0)
            return gv_tp_backends[i];
    return NULL;
}

gv_status_t gv_tp_check_args(const struct gv_tp_config *cfg, const struct gv_tp_handler *h)
{
    if (h == NULL || h->parse_prefix == NULL || h->on_header == NULL || h->on_msg == NULL) {
        gv_log(GV_LOG_ERROR, "transport: handler needs parse_prefix, on_header and on_msg");
        return GV_ERR_INVAL;
    }
    if (h->prefix_len < 1 || h->prefix_len > 64) {
        gv_log(GV_LOG_ERROR, "transport: prefix_len %zu outside 1..64", h->prefix_len);
        return GV_ERR_INVAL;
    }
    if (cfg->max_hdr_len < h->prefix_len || cfg->max_hdr_len > (256u << 20)) {
        gv_log(GV_LOG_ERROR, "transport: max_hdr_len %u outside prefix_len..256 MiB",
               cfg->max_hdr_len);
        return GV_ERR_INVAL;
    }
    if (cfg->max_send_queue < 1 || cfg->max_send_queue > (1u << 20) ||
        cfg->max_send_queue_bytes < 1 || cfg->max_payload_len < 1) {
        gv_log(GV_LOG_ERROR, "transport: send queue bounds and max_payload_len must be >= 1 "
                             "(max_send_queue <= 1M)");
        return GV_ERR_INVAL;
    }
    if (cfg->connect_timeout_ms < 1 || cfg->io_timeout_ms < 1 || cfg->sock_buf_bytes < 0 ||
        cfg->keepalive_idle_s < 1 || cfg->keepalive_intvl_s < 1 || cfg->keepalive_cnt < 1) {
        gv_log(GV_LOG_ERROR, "transport: timeouts and keepalive settings must be >= 1, "
                             "sock_buf_bytes >= 0");
        return GV_ERR_INVAL;
    }
    return GV_OK;
}

gv_status_t gv_tp_create(const char *name, const struct gv_tp_config *cfg,
                         const struct gv_tp_handler *h, void *user, struct gv_tp **tp_p)
{
    struct gv_tp_config defaults;
    const struct gv_tp_ops *ops = gv_tp_find(name);

    if (ops == NULL) {
        for (size_t i = 0; name != NULL && i < GV_ARRAY_LEN(known_backends); i++) {
            if (strcmp(name, known_backends[i]) == 0) {
                gv_log(GV_LOG_DEBUG, "transport: backend '%s' is not built in", name);
                return GV_ERR_UNSUPPORTED;
            }
        }
        gv_log(GV_LOG_ERROR, "transport: unknown backend '%s'", name ? name : "(null)");
        return GV_ERR_INVAL;
    }
    if (cfg == NULL) {
        gv_tp_config_default(&defaults);
        cfg = &defaults;
    }
    gv_status_t status = gv_tp_check_args(cfg, h);
    if (status != GV_OK)
        return status;
    return ops->create(cfg, h, user, tp_p);
}

gv_status_t gv_tp_mem_reg_noop(struct gv_tp *tp, struct gv_buf *buf)
{
    (void)tp;
    buf->mr = NULL;
    return GV_OK;
}

void gv_tp_mem_dereg_noop(struct gv_tp *tp, struct gv_buf *buf)
{
    (void)tp;
    buf->mr = NULL;
}

gv_status_t gv_tp_addr_split(const char *addr, char *host, size_t host_len, uint16_t *port_p)
{
    const char *colon = addr ? strrchr(addr, ':') : NULL;
    const char *h = addr;
    char *end;

    if (colon == NULL)
        return GV_ERR_INVAL;
    size_t hl = (size_t)(colon - addr);
    if (addr[0] == '[') { /* [v6]:port */
        if (hl < 2 || addr[hl - 1] != ']')
            return GV_ERR_INVAL;
        h = addr + 1;
        hl -= 2;
    } else if (memchr(addr, ':', hl) != NULL) {
        return GV_ERR_INVAL; /* a bare IPv6 address needs brackets */
    }
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (hl == 0 || hl >= host_len || colon[1] == '\0' || *end != '\0' || errno != 0 || port == 0 ||
        port > 65535)
        return GV_ERR_INVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port_p = (uint16_t)port;
    return GV_OK;
}

static int tp_is_wildcard(const char *host)
{
    return host == NULL || host[0] == '\0' || strcmp(host, "0.0.0.0") == 0 ||
           strcmp(host, "::") == 0 || strcmp(host, "[::]") == 0;
}

gv_status_t gv_tp_addr_advertise(const char *bind_host, const char *advertise_host, uint16_t port,
                                 char *out, size_t out_len)
{
    char name[256];
    const char *host = advertise_host;

    if (host == NULL || host[0] == '\0')
        host = tp_is_wildcard(bind_host) ? NULL : bind_host;
    if (host == NULL) {
        if (gethostname(name, sizeof(name)) != 0) {
            gv_log(GV_LOG_ERROR, "transport: gethostname: %s", strerror(errno));
            return GV_ERR_IO;
        }
        name[sizeof(name) - 1] = '\0';
        host = name;
    }
    int v6 = strchr(host, ':') != NULL && host[0] != '[';
    int n = snprintf(out, out_len, v6 ? "[%s]:%u" : "%s:%u", host, (unsigned)port);
    if (port == 0 || n < 0 || (size_t)n >= out_len)
        return GV_ERR_INVAL;
    return GV_OK;
}

gv_status_t gv_tp_addr_resolves(const char *host, char *why, size_t why_len)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int ret = getaddrinfo(host, NULL, &hints, &res);
    if (ret == 0) {
        freeaddrinfo(res);
        return GV_OK;
    }
    snprintf(why, why_len, "%s", gai_strerror(ret));
    return GV_ERR_INVAL;
}
