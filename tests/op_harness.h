// op_harness.h: runs the rows of tests/op_cases.h, ggml's test-backend-ops in C. An op family
// declares the tensors of one case (op_inst) and says how to run the op on a backend and how
// to compute its double-precision reference; the harness gives the tensors their values,
// puts them on backends, runs the op and compares what it wrote:
//   op_case_check_ref   on backends under test against the reference (tests/test_ops.c,
//                       tests/test_ops_attn.c): forwards against the double forward, the
//                       gradients against finite differences in the rows that ask for them,
//                       else against the analytic double gradients;
//   op_case_check_twin  on a device under test against the CPU backend on the same values
//                       (tests/gpu/test_gpu_ops.c), each comparison kept for a table of the
//                       largest errors; the device's rerun must be bitwise the same, and in
//                       rows with finite differences its gradients are checked against them.
// Every row gets its own random values from its index, the same on every backend. The
// element loops after the values are drawn (staging, conversions, comparisons) run on the
// host's OpenMP threads: at model size (tests/op_cases.h's CASE_TWIN_ONLY rows, 100M
// elements a tensor) they, not the backends, are the slow side of a case; each element's
// work is independent and a maximum does not depend on the order, so the results do not
// depend on the thread count.
#pragma once
#include "ops_ref.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum {
    ROLE_IN,    // read by the op: random in [lo, hi), or as the family sets it
    ROLE_OUT,   // overwritten: pre-filled with junk in [100, 200) (a pattern that differs
                // between neighbours), which must not show
    ROLE_ACC,   // accumulated into (+=): random in [lo, hi); the reference is the increment
    ROLE_INOUT, // updated in place: random in [lo, hi); the reference is the final value
} tensor_role;

typedef enum { ELEM_F32, ELEM_BF16, ELEM_F64, ELEM_I32 } elem_kind;

typedef struct {
    const char *name; // in the check names: "dweight", "out aliasing a"
    tensor_role role;
    elem_kind kind;
    size_t n;       // elements
    size_t offset;  // elements before them in their allocation: misaligned pointers
    double lo, hi;  // the range of random initial values
    int absent;     // a slot this case leaves empty: its pointer is NULL
    int grad;       // a gradient: against finite differences in rows that ask for them
    int sample;     // the family computes its reference per element: a large tensor is
                    // checked on a random sample of CASE_SAMPLE elements
    double tol;     // max |got - ref| / max |ref| against the reference (analytic)
    double tol_cpu; // max |dut - cpu| / max |cpu| against the CPU backend
    double *val;    // the initial values as the device holds them (bf16: the rounded ones)
    double *ref;    // the reference at the checked elements (ACC: the increment)
    size_t *idx;    // the checked elements (NULL: all n)
    size_t nref;
} case_tensor;

#define CASE_TENSORS 12
#define TOL_FD 1e-4        // gradients against finite differences (tests/op_cases.h says why)
#define TOL_BF16_UNITS 1.0 // bf16 outputs, in units in the last place
#define CASE_SAMPLE 8192
#define FD_ALL (-1)

typedef struct op_family op_family;

// A row of the table: an op, its shape, the dtype of its operands and how its gradients are
// checked.
typedef struct {
    const op_family *op;
    int d[6];        // the shape; the family's comment says what each number is
    tri_dtype dtype; // of the operands (DTYPE_FP32 or DTYPE_BF16)
    unsigned flags;  // CASE_* (tests/op_cases.h)
    int fd;          // gradients against finite differences: on every element (FD_ALL), on
                     // fd sampled ones (> 0), or never (0: the analytic double gradients)
} op_case;

// One case: a row with its tensors.
typedef struct {
    const op_case *row;
    char name[112];
    case_tensor t[CASE_TENSORS];
    int nt;
} op_inst;

struct op_family {
    // Names the case and adds its tensors (inst_add), in the order of the family's slots.
    void (*declare)(op_inst *c);
    // Runs the op on b; p[k] is tensor k's pointer on b (NULL for an absent slot).
    void (*run)(backend *b, const op_inst *c, void *const *p);
    // Fills every output's ref at its checked elements (inst_fd for the gradients when
    // c->row->fd, else the analytic references).
    void (*reference)(op_inst *c);
    // Optional: promises of the op that hold on every backend and are no comparison with a
    // reference (got[k]: tensor k after the run; NULL for inputs).
    void (*check)(const op_inst *c, double *const *got, const char *tag);
};

// ---------------------------------------------------------------------------------------
// For the families

static size_t elem_bytes(elem_kind k) { return k == ELEM_F64 ? 8 : k == ELEM_BF16 ? 2 : 4; }

// Adds tensor `slot` (which must be the next one) with random initial values in [lo, hi).
static case_tensor *inst_add(op_inst *c, int slot, case_tensor t) {
    TRI_ASSERT(slot == c->nt && slot < CASE_TENSORS);
    c->t[c->nt++] = t;
    case_tensor *x = &c->t[slot];
    x->val = xcalloc(x->n + 1, sizeof(double));
    for (size_t i = 0; i < x->n && x->role != ROLE_OUT; i++) {
        double v = x->lo + (x->hi - x->lo) * 0.5 * (rnd() + 1.0);
        x->val[i] = x->kind == ELEM_BF16  ? bf16_to_f32(bf16_from_f32((float)v))
                    : x->kind == ELEM_F32 ? (double)(float)v
                    : x->kind == ELEM_I32 ? floor(v)
                                          : v;
    }
    return x;
}

// An empty slot (the case has no such tensor).
static void inst_skip(op_inst *c, int slot) {
    inst_add(c, slot, (case_tensor){.name = "", .absent = 1});
}

// Element k of t's checked elements.
static size_t ref_at(const case_tensor *t, size_t k) { return t->idx ? t->idx[k] : k; }

// t's reference from a full array of n values.
static void ref_pick(case_tensor *t, const double *full) {
    for (size_t k = 0; k < t->nref; k++) t->ref[k] = full[ref_at(t, k)];
}

// t's reference by central finite differences of L = sum(f(args) * R) with respect to x
// (an input's val, which f reads through args).
static void inst_fd(case_tensor *t, ref_forward f, void *args, size_t nout, const double *R,
                    double *x) {
    fd_grad(f, args, nout, R, x, t->idx, t->nref, t->ref);
}

// The values of an integer input as ints (tokens, targets).
static int *inst_ints(const case_tensor *t) {
    int *v = xmalloc((t->n + 1) * sizeof(int));
    for (size_t i = 0; i < t->n; i++) v[i] = (int)t->val[i];
    return v;
}

static int is_output(const case_tensor *t) { return !t->absent && t->role != ROLE_IN; }

// ---------------------------------------------------------------------------------------
// Cases on a backend

static void inst_init(op_inst *c, const op_case *row, size_t index) {
    memset(c, 0, sizeof *c);
    c->row = row;
    rng_state = 0x2545F4914F6CDD1DULL + 0x9E3779B97F4A7C15ULL * (uint64_t)(index + 1);
    row->op->declare(c);
}

static void inst_free(op_inst *c) {
    for (int k = 0; k < c->nt; k++) free(c->t[k].val), free(c->t[k].ref), free(c->t[k].idx);
}

// Chooses the checked elements of every output, then has the family fill the references.
static void inst_reference(op_inst *c) {
    const int fd = c->row->fd;
    for (int k = 0; k < c->nt; k++) {
        case_tensor *t = &c->t[k];
        if (!is_output(t) || t->ref) continue;
        size_t want = t->n;
        if (t->grad && fd > 0) want = (size_t)fd < t->n ? (size_t)fd : t->n;
        else if (t->sample && !(t->grad && fd) && t->n > CASE_SAMPLE) want = CASE_SAMPLE;
        t->nref = want;
        t->ref = xcalloc(want + 1, sizeof(double));
        if (want < t->n) {
            t->idx = xmalloc(want * sizeof(size_t));
            for (size_t i = 0; i < want; i++)
                t->idx[i] = (size_t)((rnd() + 1.0) * 0.5 * t->n) % t->n;
        }
    }
    c->row->op->reference(c);
}

// Runs the case on b from its initial values; got[k]: output k's final values (else NULL).
static void inst_run(backend *b, const op_inst *c, double **got) {
    void *base[CASE_TENSORS] = {0}, *p[CASE_TENSORS] = {0};
    for (int k = 0; k < c->nt; k++) {
        const case_tensor *t = &c->t[k];
        if (t->absent) continue;
        const size_t es = elem_bytes(t->kind), bytes = (t->n + t->offset) * es;
        unsigned char *h = xcalloc(bytes + 8, 1), *v = h + t->offset * es;
        const int junk = t->role == ROLE_OUT;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < t->n; i++) {
            const double x = junk ? 100.5 + (double)((i * 7919) % 100) : t->val[i];
            if (t->kind == ELEM_F32) ((float *)v)[i] = (float)x;
            else if (t->kind == ELEM_BF16) ((uint16_t *)v)[i] = bf16_from_f32((float)x);
            else if (t->kind == ELEM_F64) ((double *)v)[i] = x;
            else ((int *)v)[i] = (int)x;
        }
        base[k] = b->alloc(b, bytes + 8);
        TRI_ASSERT(base[k]);
        b->copy_to_device(b, base[k], h, bytes);
        p[k] = (unsigned char *)base[k] + t->offset * es;
        free(h);
    }
    c->row->op->run(b, c, p);
    for (int k = 0; k < c->nt; k++) {
        const case_tensor *t = &c->t[k];
        got[k] = NULL;
        if (is_output(t)) {
            const size_t es = elem_bytes(t->kind);
            unsigned char *h = xmalloc(t->n * es + 8);
            b->copy_to_host(b, h, p[k], t->n * es);
            got[k] = xmalloc((t->n + 1) * sizeof(double));
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < t->n; i++)
                got[k][i] = t->kind == ELEM_F32    ? ((float *)h)[i]
                            : t->kind == ELEM_BF16 ? bf16_to_f32(((uint16_t *)h)[i])
                            : t->kind == ELEM_F64  ? ((double *)h)[i]
                                                   : ((int *)h)[i];
            free(h);
        }
        if (base[k]) b->free(b, base[k]);
    }
}

static void got_free(const op_inst *c, double **got) {
    for (int k = 0; k < c->nt; k++) free(got[k]);
}

// max |a - b| / max |b| over n values; equal values (infinities too) count 0, a NaN infinity.
static double rel_diff_d(const double *a, const double *b, size_t n) {
    double e = 0.0, m = 0.0;
#pragma omp parallel for schedule(static) reduction(max : e, m)
    for (size_t i = 0; i < n; i++) {
        if (isfinite(b[i])) m = fmax(m, fabs(b[i]));
        if (a[i] == b[i]) continue;
        const double d = fabs(a[i] - b[i]);
        e = d == d ? fmax(e, d) : INFINITY;
    }
    return e / (m > 0.0 ? m : 1.0);
}

// Units in the last place of bf16 between two bf16 values (held as doubles).
static int bf16_units(double a, double b) {
    return abs((int)bf16_from_f32((float)a) - (int)bf16_from_f32((float)b));
}

// Output t's error against its reference: max |got - ref| / max |ref| over the checked
// elements (ACC: got minus the initial value), or bf16 units of the rounded reference.
static double ref_error(const case_tensor *t, const double *got) {
    double *g = xmalloc((t->nref + 1) * sizeof(double)), e = 0.0;
    for (size_t k = 0; k < t->nref; k++) {
        const size_t i = ref_at(t, k);
        g[k] = got[i] - (t->role == ROLE_ACC ? t->val[i] : 0.0);
        if (t->kind == ELEM_BF16) e = fmax(e, bf16_units(g[k], t->ref[k]));
    }
    if (t->kind != ELEM_BF16) e = rel_diff_d(g, t->ref, t->nref);
    free(g);
    return e;
}

// ---------------------------------------------------------------------------------------
// The table of largest errors against the CPU (twin mode), printed at the end.

#define MAX_ROWS 1024
static struct {
    char name[200];
    double err, tol;
} rows[MAX_ROWS];
static int nrows;

OPS_REF_FN void record(const char *name, double err, double tol) {
    TRI_ASSERT(nrows < MAX_ROWS); // the table must show every row: raise MAX_ROWS
    snprintf(rows[nrows].name, sizeof rows[nrows].name, "%s", name);
    rows[nrows].err = err, rows[nrows].tol = tol;
    nrows++;
}

OPS_REF_FN void print_error_table(void) {
    printf("\n%-88s %10s %9s\n", "max |dut - cpu| / max |cpu| (bf16: units)", "error", "tolerance");
    for (int i = 0; i < nrows; i++)
        printf("%-88s %10.3g %9.1g%s\n", rows[i].name, rows[i].err, rows[i].tol,
               rows[i].err <= rows[i].tol ? "" : "  FAIL");
}

// ---------------------------------------------------------------------------------------
// The two modes

// Checks each output (grads_only: only the gradients) against the reference; `fd` names the
// gradients' reference in the check names.
static void inst_check_ref(const op_inst *c, double *const *got, const char *tag, int grads_only) {
    for (int k = 0; k < c->nt; k++) {
        const case_tensor *t = &c->t[k];
        if (!is_output(t) || (grads_only && !t->grad)) continue;
        const int by_fd = t->grad && c->row->fd;
        const double tol = t->kind == ELEM_BF16 ? TOL_BF16_UNITS : by_fd ? TOL_FD : t->tol;
        char name[200];
        snprintf(name, sizeof name, "%s %s%s%s%s", c->name, t->name,
                 t->role == ROLE_ACC ? " (accumulated)" : "", by_fd ? " vs finite differences" : "",
                 tag);
        const double e = ref_error(t, got[k]);
        TEST_CHECK(e <= tol, name,
                   "max error %.3g of the largest reference value, tolerance %.1g%s", e, tol,
                   t->idx ? " (on a sample)" : "");
    }
    if (!grads_only && c->row->op->check) c->row->op->check(c, got, tag);
}

// Row `index` of a table on each of the nb backends, against the double reference; tags[i]
// ends the names of backend i's checks.
OPS_REF_FN void op_case_check_ref(const op_case *row, size_t index, backend *const *bs,
                                  const char *const *tags, int nb) {
    op_inst c;
    inst_init(&c, row, index);
    inst_reference(&c);
    for (int i = 0; i < nb; i++) {
        double *got[CASE_TENSORS];
        inst_run(bs[i], &c, got);
        inst_check_ref(&c, got, tags[i], 0);
        got_free(&c, got);
    }
    inst_free(&c);
}

// Where the last op_case_check_twin spent its time: the device's two runs, the CPU's run
// (each with its transfers), and the whole case (the rest is the harness: values, conversions,
// comparisons, all on one host thread).
static double twin_seconds_dut, twin_seconds_cpu, twin_seconds_all;

// Row `index` on the device under test against the CPU backend: every output compared (and
// recorded for the table), the op's promises checked on the device, a rerun on the device
// bitwise the same, and in rows with finite differences the device's gradients against them.
OPS_REF_FN void op_case_check_twin(const op_case *row, size_t index, backend *dut, backend *cpu,
                                   const char *tag) {
    const double t0 = time_now_s();
    op_inst c;
    inst_init(&c, row, index);
    double *gd[CASE_TENSORS], *gc[CASE_TENSORS], *again[CASE_TENSORS];
    double t = time_now_s();
    inst_run(dut, &c, gd);
    twin_seconds_dut = time_now_s() - t;
    t = time_now_s();
    inst_run(cpu, &c, gc);
    twin_seconds_cpu = time_now_s() - t;
    int same = 1;
    for (int k = 0; k < c.nt; k++) {
        const case_tensor *t = &c.t[k];
        if (!is_output(t)) continue;
        char name[200];
        snprintf(name, sizeof name, "%s %s%s", c.name, t->name,
                 t->role == ROLE_ACC ? " (accumulated)" : "");
        double e = 0.0, tol = t->tol_cpu;
        if (t->kind == ELEM_BF16) {
            size_t differ = 0;
#pragma omp parallel for schedule(static) reduction(+ : differ) reduction(max : e)
            for (size_t i = 0; i < t->n; i++) {
                const int u = bf16_units(gd[k][i], gc[k][i]);
                differ += u != 0, e = fmax(e, u);
            }
            tol = TOL_BF16_UNITS;
            printf("# %s: %zu of %zu bf16 values one unit from the CPU's\n", name, differ, t->n);
        } else {
            e = rel_diff_d(gd[k], gc[k], t->n);
        }
        record(name, e, tol);
        TEST_CHECK(e <= tol, name, "max |dut - cpu| / max |cpu| = %.3g > %.1g", e, tol);
    }
    if (row->op->check) row->op->check(&c, gd, tag);
    t = time_now_s();
    inst_run(dut, &c, again);
    twin_seconds_dut += time_now_s() - t;
    for (int k = 0; k < c.nt; k++)
        if (is_output(&c.t[k])) same &= !memcmp(gd[k], again[k], c.t[k].n * sizeof(double));
    char name[200];
    snprintf(name, sizeof name, "%s repeatable (bitwise)%s", c.name, tag);
    TEST_CHECK(same, name, "two runs of the same case differ");
    if (row->fd) {
        inst_reference(&c);
        inst_check_ref(&c, gd, tag, 1);
    }
    got_free(&c, gd), got_free(&c, gc), got_free(&c, again);
    inst_free(&c);
    twin_seconds_all = time_now_s() - t0;
}
