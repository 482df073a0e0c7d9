/* test_common.c: status strings, log levels and sink, allocation failure injection, buffers. */
#include "check.h"
#include "gv_common.h"

#include <stdint.h>

struct captured {
    int n;
    enum gv_log_level level;
    char line[256];
};

static void capture_cb(enum gv_log_level level, const char *line, void *arg)
{
    struct captured *c = arg;
    c->n++;
    c->level = level;
    snprintf(c->line, sizeof(c->line), "%s", line);
}

static void test_status(void)
{
    GV_CHECK_STREQ(gv_status_str(GV_OK), "ok");
    GV_CHECK_STREQ(gv_status_str(GV_ERR_PROTO), "protocol error");
    GV_CHECK_STREQ(gv_status_str(GV_ERR_VERSION), "version mismatch");
    GV_CHECK_STREQ(gv_status_str((gv_status_t)-999), "unknown");
    /* every defined code has its own name */
    for (int a = -12; a <= 1; a++)
        for (int b = a + 1; b <= 1; b++)
            GV_CHECK(strcmp(gv_status_str((gv_status_t)a), gv_status_str((gv_status_t)b)) != 0);
}

static void test_log(void)
{
    struct captured c = {0};
    enum gv_log_level lvl;
    GV_CHECK_OK(gv_log_parse_level("debug", &lvl));
    GV_CHECK_EQ(lvl, GV_LOG_DEBUG);
    GV_CHECK_OK(gv_log_parse_level("1", &lvl));
    GV_CHECK_EQ(lvl, GV_LOG_WARN);
    GV_CHECK_STATUS(gv_log_parse_level("loud", &lvl), GV_ERR_INVAL);
    GV_CHECK_STATUS(gv_log_parse_level("9", &lvl), GV_ERR_INVAL);

    gv_log_set_cb(capture_cb, &c);
    gv_log_set_level(GV_LOG_WARN);
    gv_log(GV_LOG_INFO, "hidden %d", 1);
    GV_CHECK_EQ(c.n, 0);
    gv_log(GV_LOG_ERROR, "conn %d closed: %s", 3, "reset");
    GV_CHECK_EQ(c.n, 1);
    GV_CHECK_EQ(c.level, GV_LOG_ERROR);
    GV_CHECK_STREQ(c.line, "conn 3 closed: reset");
    gv_log_set_level(GV_LOG_INFO);
    gv_log_set_cb(NULL, NULL);
}

static void test_alloc_fail(void)
{
    gv_alloc_fail_nth(2);
    void *a = gv_malloc(16);
    void *b = gv_malloc(16); /* the 2nd fails */
    void *c = gv_malloc(16); /* and the hook disarms */
    GV_CHECK(a != NULL);
    GV_CHECK(b == NULL);
    GV_CHECK(c != NULL);
    gv_free(a);
    gv_free(c);
    GV_CHECK_EQ(gv_alloc_fail_nth(0), 3);

    void *al = gv_aligned_alloc(4096, 100);
    GV_CHECK(al != NULL && ((uintptr_t)al & 4095) == 0);
    gv_free(al);
    GV_CHECK(gv_aligned_alloc(3, 100) == NULL);
}

static gv_status_t fake_alloc(size_t len, void **ptr_p)
{
    *ptr_p = gv_malloc(len);
    return *ptr_p ? GV_OK : GV_ERR_NOMEM;
}
static void fake_free(void *p)
{
    gv_free(p);
}
static const struct gv_mem_ops fake_ops = {fake_alloc, fake_free};

static void test_buf(void)
{
    struct gv_buf b;
    GV_CHECK_OK(gv_buf_alloc(&b, 10000, GV_MEM_HOST));
    GV_CHECK(b.ptr != NULL && ((uintptr_t)b.ptr & 4095) == 0);
    GV_CHECK_EQ(b.len, 10000);
    GV_CHECK_EQ(b.mem, GV_MEM_HOST);
    GV_CHECK_EQ(((unsigned char *)b.ptr)[9999], 0);
    gv_buf_free(&b);
    GV_CHECK(b.ptr == NULL);
    gv_buf_free(&b); /* twice is fine */

    GV_CHECK_STATUS(gv_buf_alloc(&b, 64, GV_MEM_DEVICE), GV_ERR_UNSUPPORTED);
    GV_CHECK(b.ptr == NULL);
    gv_mem_set_ops(GV_MEM_PINNED, &fake_ops);
    GV_CHECK_OK(gv_buf_alloc(&b, 64, GV_MEM_PINNED));
    GV_CHECK_EQ(b.mem, GV_MEM_PINNED);
    gv_buf_free(&b);
    gv_mem_set_ops(GV_MEM_PINNED, NULL);

    gv_alloc_fail_nth(1);
    GV_CHECK_STATUS(gv_buf_alloc(&b, 64, GV_MEM_HOST), GV_ERR_NOMEM);
    GV_CHECK(b.ptr == NULL);
    GV_CHECK_STREQ(gv_mem_str(GV_MEM_DEVICE), "device");
}

static void test_time(void)
{
    uint64_t a = gv_now_ns(), b = gv_now_ns();
    GV_CHECK(b >= a);
}

int main(void)
{
    test_status();
    test_log();
    test_alloc_fail();
    test_buf();
    test_time();
    return gv_check_summary();
}
