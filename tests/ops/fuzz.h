/* fuzz.h: what the ops fuzz targets share with their replay driver. A target defines
 * LLVMFuzzerTestOneInput; invariant violations call FUZZ_ASSERT, which traps so that both
 * libFuzzer and the ctest replay report them. */
#ifndef GV_OPS_FUZZ_H
#define GV_OPS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);     \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

#endif
