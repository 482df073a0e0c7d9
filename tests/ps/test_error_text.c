/* test_error_text.c: the ERROR texts a link sends fit the wire's cap (gv_ps_error_text_fit,
 * applied by gv_ps_link_send to every ERROR). A server 1..S-1 asking
 * server 0 to end the job prefixed the reason it was given (up to 320 characters, a worker's
 * report quoting server 0's own error) and sent it whole: the encoder refused the text (cap
 * 256), the request was never sent, and the server ended the job on its own with its own
 * status (exit 1 instead of server 0's 4 in test_e2e_robust_ckpt_fail, now and then). */
#include "check.h"
#include "gv_proto.h"
#include "gv_ps.h"

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

enum { TEXT_MAX = 256 }; /* the default caps' max_text_len */

int main(void)
{
    struct gv_proto_caps caps;
    gv_proto_caps_default(&caps);
    GV_CHECK_EQ(caps.max_text_len, TEXT_MAX);

    /* a worker's report as the server formats it: "worker 0 (...) reported: worker 0 stops: ..." */
    char reason[320];
    memset(reason, 'x', sizeof(reason) - 1);
    reason[sizeof(reason) - 1] = '\0';
    memcpy(reason, "worker 0 reported: ", 19);

    char whole[400]; /* what the request carried before */
    snprintf(whole, sizeof(whole), "server %u: %.300s", 1u, reason);
    GV_CHECK(strlen(whole) > TEXT_MAX);
    GV_CHECK_EQ(encode_error(whole), GV_ERR_INVAL); /* the defect: nobody would be told */

    char full[400], buf[1024];
    snprintf(full, sizeof(full), "server %u: %s", 1u, reason);
    const char *cut = gv_ps_error_text_fit(full, NULL, buf, sizeof(buf));
    GV_CHECK_EQ(strlen(cut), TEXT_MAX);
    GV_CHECK(strncmp(cut, "server 1: worker 0 reported: ", 29) == 0);
    GV_CHECK_EQ(encode_error(cut), GV_OK);

    const char *small = "server 2: disk full"; /* a short text is left as it is */
    GV_CHECK(gv_ps_error_text_fit(small, &caps, buf, sizeof(buf)) == small);
    GV_CHECK(strcmp(small, "server 2: disk full") == 0);
    return gv_check_summary();
}
