// gpu_twin.h: the harness of tests/gpu/test_gpu_ops.c (included there, after
// tests/ops_ref.h and testlib.h): the two backends, arrays held by both with the same
// contents ("twins"), the comparison of the device's copy against the CPU's, and the table
// of the largest errors printed at the end.
#pragma once
#include "../ops_ref.h"
#include "../testlib.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static backend *dut, *cpu; // the device under test, the CPU reference

// ---------------------------------------------------------------------------------------
// A float array held by both backends, with the same contents.

typedef struct {
    float *d, *c; // on the device under test, on the CPU
    size_t n;
} twin;

static twin twin_new(const float *host, size_t n) {
    twin t = {dev_f(dut, host, n), dev_f(cpu, host, n), n};
    return t;
}
static twin twin_rand(size_t n, double lo, double hi) {
    float *h = rand_f(n, lo, hi);
    twin t = twin_new(h, n);
    free(h);
    return t;
}
static void twin_free(twin t) {
    dut->free(dut, t.d);
    cpu->free(cpu, t.c);
}

typedef struct {
    int *d, *c;
} twin_i;
static twin_i twin_ints(const int *host, size_t n) {
    twin_i t = {dev_i(dut, host, n), dev_i(cpu, host, n)};
    return t;
}

// The table of largest errors, printed at the end.
#define MAX_ROWS 320
static struct {
    char name[112];
    double err, tol;
} rows[MAX_ROWS];
static int nrows;

static void record(const char *name, double err, double tol) {
    TRI_ASSERT(nrows < MAX_ROWS); // the table must show every row: raise MAX_ROWS
    snprintf(rows[nrows].name, sizeof rows[nrows].name, "%s", name);
    rows[nrows].err = err, rows[nrows].tol = tol;
    nrows++;
}

// max |a - b| / max |b|; equal values (infinities included) count 0, a NaN counts infinity.
static double rel_diff(const float *a, const float *b, size_t n) {
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(b[i])) m = fmax(m, fabs(b[i]));
        if (a[i] == b[i]) continue;
        double d = fabs((double)a[i] - (double)b[i]);
        e = d == d ? fmax(e, d) : INFINITY;
    }
    return e / (m > 0.0 ? m : 1.0);
}

// The device's copy of t against the CPU's.
static void compare(const char *op, const char *what, twin t, double tol) {
    char name[112];
    snprintf(name, sizeof name, "%s %s", op, what);
    float *a = host_of(dut, t.d, t.n), *b = host_of(cpu, t.c, t.n);
    double e = rel_diff(a, b, t.n);
    record(name, e, tol);
    TEST_CHECK(e <= tol, name, "max |dut - cpu| / max |cpu| = %.3g > %.1g", e, tol);
    free(a), free(b);
}

// Bitwise equality of two device arrays of n floats (a rerun of the same op).
static void check_same(const char *op, const float *x, const float *y, size_t n) {
    char name[112];
    snprintf(name, sizeof name, "%s repeatable (bitwise)", op);
    float *a = host_of(dut, x, n), *b = host_of(dut, y, n);
    TEST_CHECK(!memcmp(a, b, n * sizeof(float)), name, "two runs of the same op differ");
    free(a), free(b);
}

// Saves the device copy of t (to rerun an op from the same inputs and compare).
static float *save(twin t) { return host_of(dut, t.d, t.n); }
