// fuzzlib.h: what the seeded fuzzers and the randomised tests share: the splitmix64 stream,
// a family's tally with its report line and check, and a text file written whole.
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "testlib.h"

// The next number of the splitmix64 stream whose state is *s (seed it with any value).
static inline uint64_t fuzz_rnd(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// One family of cases: what its cases came to (seconds: wall time of its runs, 0 untimed).
typedef struct {
    const char *name;
    int cases, clean_errors, successes, crashes, hangs, wrong_successes, wrong_failures;
    double seconds;
} fuzz_family;

// The family's line, and its check PREFIX<name>: cases, and none crashed, hung or was
// judged wrong.
static inline void fuzz_report(const fuzz_family *f, const char *prefix) {
    printf("%s: %d cases, %d clean errors, %d successes, %d crashes, %d hangs, %d wrong "
           "successes, %d wrong failures",
           f->name, f->cases, f->clean_errors, f->successes, f->crashes, f->hangs,
           f->wrong_successes, f->wrong_failures);
    if (f->seconds > 0) printf(", %.1f s", f->seconds);
    printf("\n");
    char name[96];
    snprintf(name, sizeof name, "%s%s", prefix, f->name);
    TEST_CHECK(f->cases > 0 && !f->crashes && !f->hangs && !f->wrong_successes &&
                   !f->wrong_failures,
               name, "see the FAIL lines above");
}

// path holds the n bytes of text, and nothing else.
static inline void fuzz_write_text(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    if (n) fwrite(text, 1, n, f);
    fclose(f);
}
