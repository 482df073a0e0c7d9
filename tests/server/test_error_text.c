/* test_error_text.c: the ERROR texts a server sends fit the wire's cap. A server 1..S-1 asking
 * server 0 to end the job prefixed the reason it was given (up to 320 characters, a worker's
 * report quoting server 0's own error) and sent it whole: the encoder refused the text (cap
 * 256), the request was never sent, and the server ended the job on its own with its own
 * status (exit 1 instead of server 0's 4 in test_e2e_robust_ckpt_fail, now and then). */
#include "check.h"
#include "gv_proto.h"
#include "srv.h"

#include <string.h>

static gv_status_t encode_error(const char *text)
{
    struct gv_proto_msg m;
    memset(&m, 0, sizeof(m));
    m.type = GV_PROTO_MSG_ERROR;
    m.role = GV_PROTO_ROLE_SERVER;
    m.rank = 1;
    m.iteration = 4001;
    m.u.error.code = GV_ERR_CKPT;
    m.u.error.text = text;
    static unsigned char buf[4096];
    size_t len = 0;
    return gv_proto_encode(&m, NULL, buf, sizeof(buf), &len);
}

int main(void)
{
    /* a worker's report as the server formats it: "worker 0 (...) reported: worker 0 stops: ..." */
    char reason[320];
    memset(reason, 'x', sizeof(reason) - 1);
    reason[sizeof(reason) - 1] = '\0';
    memcpy(reason, "worker 0 reported: ", 19);

    char whole[400]; /* what the request carried before */
    snprintf(whole, sizeof(whole), "server %u: %.300s", 1u, reason);
    GV_CHECK(strlen(whole) > SRV_ERROR_TEXT_MAX);
    GV_CHECK_EQ(encode_error(whole), GV_ERR_INVAL); /* the defect: nobody would be told */

    char cut[SRV_ERROR_TEXT_MAX + 1];
    srv_error_text(cut, "server %u: %s", 1u, reason);
    GV_CHECK_EQ(strlen(cut), SRV_ERROR_TEXT_MAX);
    GV_CHECK(strncmp(cut, "server 1: worker 0 reported: ", 29) == 0);
    GV_CHECK_EQ(encode_error(cut), GV_OK);

    char small[SRV_ERROR_TEXT_MAX + 1]; /* a short text is left as it is */
    srv_error_text(small, "server %u: %s", 2u, "disk full");
    GV_CHECK(strcmp(small, "server 2: disk full") == 0);
    return gv_check_summary();
}
