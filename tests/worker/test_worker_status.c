/* test_worker_status: the status a worker reports is its first failure. A worker that refuses
 * a server's WELCOME (another --steps: the fingerprint) fails with GV_ERR_PROTO; the server's
 * next message (the model) then arrives on a connection the worker no longer serves, and the
 * connection closes. That close must not turn the refusal into GV_ERR_CLOSED: gravac-worker
 * exits 2 for a refusal (a configuration to fix) and 1 for a closed connection (a failure to
 * retry), and test_e2e_robust_early_bye saw exit 1 about once in eight runs under load. */
#include "check.h"
#include "wk.h"

#include <stdlib.h>
#include <string.h>

static void test_refusal_then_close(void)
{
    struct gv_worker *w = calloc(1, sizeof(*w));
    struct wk_server *ws = calloc(1, sizeof(*ws));
    GV_CHECK(w != NULL && ws != NULL);
    if (w == NULL || ws == NULL)
        return;
    w->rank = 1;
    ws->w = w;
    snprintf(ws->name, sizeof(ws->name), "server 0 (127.0.0.1:7000)");
    ws->hs.state = GV_PS_CLIENT_WELCOMED;
    wk_fail(w, GV_ERR_PROTO, "%s: model fingerprint mismatch", ws->name);
    ws->closed = true; /* the model it sent was refused, the connection closed */
    ws->close_reason = GV_ERR_PROTO;
    GV_CHECK_STATUS(wk_server_status(w, ws), GV_ERR_PROTO);
    GV_CHECK_STATUS(w->fail_status, GV_ERR_PROTO);
    GV_CHECK(strstr(w->fail, "fingerprint mismatch") != NULL);
    /* without an earlier failure a closed connection is one */
    memset(w, 0, sizeof(*w));
    w->rank = 1;
    GV_CHECK_STATUS(wk_server_status(w, ws), GV_ERR_CLOSED);
    GV_CHECK(strstr(w->fail, "closed the connection") != NULL);
    free(ws);
    free(w);
}

int main(void)
{
    test_refusal_then_close();
    return gv_check_summary();
}
