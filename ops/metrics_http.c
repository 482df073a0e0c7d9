/* metrics_http.c: the /metrics endpoint, served by GNU libmicrohttpd from its own thread. We
 * bind the listening socket ourselves (for a clear error and to read back an ephemeral port)
 * and hand it to the daemon. Each scrape renders the registry under its lock and nothing more. */
#include "gv_ops.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define HTTP_CONN_LIMIT 32
#define HTTP_CONN_TIMEOUT_S 10

struct gv_metrics_http {
    struct MHD_Daemon *daemon;
    struct gv_metrics *reg;
    uint16_t port;
};

static enum MHD_Result http_reply(struct MHD_Connection *conn, unsigned int code,
                                  const char *type, const void *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **req_cls)
{
    struct gv_metrics_http *http = cls;
    static const char text[] = "text/plain; charset=utf-8";
    (void)version;
    (void)upload_data;
    (void)req_cls;
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        *upload_data_size = 0; /* a body is discarded */
        static const char msg[] = "method not allowed: use GET\n";
        return http_reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, msg, sizeof(msg) - 1);
    }
    if (strcmp(url, "/metrics") != 0) {
        static const char msg[] = "not found: the metrics are at /metrics\n";
        return http_reply(conn, MHD_HTTP_NOT_FOUND, text, msg, sizeof(msg) - 1);
    }
    char *body;
    size_t len;
    if (gv_metrics_render(http->reg, &body, &len) != GV_OK) {
        static const char msg[] = "out of memory\n";
        return http_reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, text, msg, sizeof(msg) - 1);
    }
    enum MHD_Result ret = http_reply(conn, MHD_HTTP_OK,
                                     "text/plain; version=0.0.4; charset=utf-8", body, len);
    gv_free(body);
    return ret;
}

static void http_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

static void http_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    gv_log(GV_LOG_WARN, "metrics http: %s", msg);
}

/* A bound, listening socket for addr; *port_p gets the port actually bound. */
static gv_status_t http_listen(const struct gv_hostport *addr, int *fd_p, bool *v6_p,
                               uint16_t *port_p)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res;
    char port[8];
    const char *host = addr->host[0] ? addr->host : NULL;
    snprintf(port, sizeof(port), "%u", addr->port);
    int ret = getaddrinfo(host, port, &hints, &res);
    if (ret != 0) {
        gv_log(GV_LOG_ERROR, "metrics http: cannot resolve '%s': %s", addr->host,
               gai_strerror(ret));
        return GV_ERR_INVAL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
        gv_log(GV_LOG_ERROR, "metrics http: cannot listen on %s:%u: %s",
               addr->host[0] ? addr->host : "*", addr->port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return GV_ERR_IO;
    }
    *v6_p = res->ai_family == AF_INET6;
    freeaddrinfo(res);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        gv_log(GV_LOG_ERROR, "metrics http: getsockname: %s", strerror(errno));
        close(fd);
        return GV_ERR_IO;
    }
    *port_p = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    *fd_p = fd;
    return GV_OK;
}

gv_status_t gv_metrics_http_start(struct gv_metrics *reg, const struct gv_hostport *addr,
                                  struct gv_metrics_http **http_p)
{
    int fd;
    bool v6;
    struct gv_metrics_http *http = gv_calloc(1, sizeof(*http));
    if (http == NULL)
        return GV_ERR_NOMEM;
    http->reg = reg;
    gv_status_t status = http_listen(addr, &fd, &v6, &http->port);
    if (status != GV_OK)
        goto err_free;
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG |
                         (v6 ? MHD_USE_IPv6 : 0);
    http->daemon = MHD_start_daemon(
        flags, http->port, NULL, NULL, http_handler, http, MHD_OPTION_EXTERNAL_LOGGER, http_log,
        NULL, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned int)HTTP_CONN_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)HTTP_CONN_TIMEOUT_S, MHD_OPTION_END);
    if (http->daemon == NULL) {
        gv_log(GV_LOG_ERROR, "metrics http: libmicrohttpd failed to start on port %u",
               http->port);
        close(fd);
        status = GV_ERR_IO;
        goto err_free;
    }
    gv_log(GV_LOG_INFO, "metrics: serving http://%s:%u/metrics",
           addr->host[0] ? addr->host : "*", http->port);
    *http_p = http;
    return GV_OK;

err_free:
    gv_free(http);
    return status;
}

uint16_t gv_metrics_http_port(const struct gv_metrics_http *http)
{
    return http->port;
}

void gv_metrics_http_stop(struct gv_metrics_http *http)
{
    if (http == NULL)
        return;
    if (http->daemon != NULL)
        MHD_stop_daemon(http->daemon); /* joins the thread and closes the listening socket */
    gv_free(http);
}
