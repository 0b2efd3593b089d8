/* A tiny test harness for the C programs: CHECK(cond) and EXPECT(call, status) count
 * passes and failures; SUMMARY() prints "N passed, N failed" and gives the exit code. */
#ifndef SG_TEST_CHECK_H
#define SG_TEST_CHECK_H

#include <stdio.h>

#include "surgeguard.h"

static unsigned long sg_test_passed;
static unsigned long sg_test_failed;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (cond) {                                                                  \
            sg_test_passed++;                                                        \
        } else {                                                                     \
            sg_test_failed++;                                                        \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

#define EXPECT(call, expected)                                                           \
    do {                                                                                 \
        sg_status got_ = (call);                                                         \
        if (got_ == (expected)) {                                                        \
            sg_test_passed++;                                                            \
        } else {                                                                         \
            sg_test_failed++;                                                            \
            fprintf(stderr, "%s:%d: %s returned %s (%u), expected %s\n", __FILE__,       \
                    __LINE__, #call, sg_status_str((uint32_t)got_), (unsigned)got_,      \
                    #expected);                                                          \
        }                                                                                \
    } while (0)

#define OK(call) EXPECT(call, SG_OK)

#define SUMMARY(name)                                                                   \
    (printf("%s: %lu passed, %lu failed\n", (name), sg_test_passed, sg_test_failed), \
     sg_test_failed == 0 ? 0 : 1)

#endif
