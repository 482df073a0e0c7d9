/* fuzz_ckpt.c: libFuzzer target for the checkpoint reader. Any bytes are opened as a
 * checkpoint; when accepted, every section must lie inside the input and read back. */
#include "fuzz.h"
#include "gv_ops.h"

#include <stdlib.h>
#include <string.h>

static void fuzz_quiet(enum gv_log_level level, const char *line, void *arg)
{
    (void)level;
    (void)line;
    (void)arg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gv_ckpt *ck;
    gv_log_set_cb(fuzz_quiet, NULL);
    gv_status_t status = gv_ckpt_open_mem(data, size, &ck);
    FUZZ_ASSERT(status == GV_OK || status == GV_ERR_PROTO || status == GV_ERR_VERSION ||
                status == GV_ERR_NOMEM);
    if (status != GV_OK)
        return 0;
    const struct gv_ckpt_ident want = {0};
    gv_status_t id_status = gv_ckpt_check_ident(ck, &want);
    FUZZ_ASSERT(id_status == GV_OK || id_status == GV_ERR_INVAL);
    size_t total = 0;
    for (uint32_t i = 0; i < gv_ckpt_section_count(ck); i++) {
        const char *name = gv_ckpt_section_name(ck, i);
        size_t len = 0;
        FUZZ_ASSERT(name != NULL && name[0] != '\0');
        FUZZ_ASSERT(gv_ckpt_section_len(ck, name, &len) == GV_OK);
        FUZZ_ASSERT(len <= size);
        total += len;
        void *buf = malloc(len ? len : 1);
        if (buf == NULL)
            break;
        FUZZ_ASSERT(gv_ckpt_read_section(ck, name, buf, len) == GV_OK);
        free(buf);
    }
    FUZZ_ASSERT(total <= size);
    FUZZ_ASSERT(gv_ckpt_section_name(ck, gv_ckpt_section_count(ck)) == NULL);
    gv_ckpt_close(ck);
    return 0;
}
