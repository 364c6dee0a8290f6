// test_fuzz_profile.c: a seeded fuzzer of the device-profile reader (plan_profile_load,
// `trident plan --device FILE`). Each case starts from a profile plan_profile_write wrote,
// damages it one way, decides from the format (README "Planning a run": every key but
// config, seconds and matmul_points required; rates above 0, gemm_half and latencies at
// least 0; profile_version 1) what the reader must say, and loads it in a child process:
// exit 0, or exit 2 (TRI_ERR_CONFIG) with the file and, where the oracle knows it, the key
// named; never a signal, never past the time bound. Families:
//   lines      one line deleted (a required key's: refused naming it; the matmul_points
//              header: refused, not YAML; a comment or a matmul point: accepted)
//   values     one field's value replaced by a token whose verdict the format decides
//   structure  another version, a repeated or unknown key, deep nesting, a root that is no
//              mapping, a point with a bad dtype
//   bytes      random bytes flipped, inserted or cut (accepted or refused, cleanly)
//   comm       a per-collective line appended (fuzz_comm)
//   scaling    a thread_scaling line appended (fuzz_scaling)
//
//   build/tests/test_fuzz_profile [--cases N] [--seed S]
//
// make test runs 200 cases per family; a failing case prints its seed and number.
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plan/plan_profile.h"
#include "fuzzlib.h"
#include "testlib.h"

#define CASE_TIMEOUT_S 10

static uint64_t g_seed = 20250601, g_rng;
static char g_dir[256];

static uint64_t rnd(void) { return fuzz_rnd(&g_rng); }

typedef fuzz_family family;

// Loads `path` in a child; want 0, or 2 with `path` and `key` (when not NULL) in its output;
// want -1: either, cleanly.
static void run_case(family *fam, int c, const char *path, int want, const char *key) {
    char out[512];
    snprintf(out, sizeof out, "%s.out", path);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *o = freopen(out, "w", stderr);
        (void)o;
        alarm(CASE_TIMEOUT_S);
        plan_device dev;
        _exit(plan_profile_load(path, "--device", 1, &dev));
    }
    int status;
    waitpid(pid, &status, 0);
    char text[4096] = "";
    FILE *f = fopen(out, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    fam->cases++;
    const char *why = NULL;
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) fam->hangs++, why = "hung";
    else if (WIFSIGNALED(status)) fam->crashes++, why = strsignal(WTERMSIG(status));
    else if (rc == 0 && want > 0) fam->wrong_successes++, why = "accepted a bad profile";
    else if (rc == 0) fam->successes++;
    else if (want == 0 || rc != 2) fam->wrong_failures++, why = "refused, or the wrong exit";
    else if (!strstr(text, path) || (key && !strstr(text, key)))
        fam->wrong_failures++, why = "file or key not named";
    else fam->clean_errors++;
    if (why)
        printf("FAIL %s_case_%d: %s (exit %d, expected %d naming %s; seed %llu)\n%s\n", fam->name,
               c, why, rc, want, key ? key : "-", (unsigned long long)g_seed, text);
}

static void report(const family *fam) { fuzz_report(fam, "fuzz_profile_"); }

static char *g_valid; // the profile plan_profile_write wrote
static size_t g_valid_len;

static const char *const REQUIRED[] = {
    "profile_version", "device",    "host",      "date",        "threads",          "ranks",
    "peak_fp32",       "peak_bf16", "peak_tf32", "matmul_rate", "matmul_rate_bf16", "gemm_half",
    "attn_rate",       "elem_bw",   "mem_bw",    "intra_bw",    "inter_bw",         "latency_intra",
    "latency_inter",   "fbw"};
#define N_REQUIRED (int)(sizeof REQUIRED / sizeof *REQUIRED)
// The {value: X} fields (from peak_fp32 on, fbw aside) and whether 0 is allowed.
static int zero_ok(const char *k) { return !strcmp(k, "gemm_half") || !strncmp(k, "latency", 7); }

// The line of `text` holding `key:` at its start: [*b, *e) (e past the newline).
static int find_line(const char *key, size_t *b, size_t *e) {
    const size_t kl = strlen(key);
    for (size_t i = 0; i < g_valid_len; i = *e) {
        const char *nl = memchr(g_valid + i, '\n', g_valid_len - i);
        *b = i, *e = nl ? (size_t)(nl - g_valid) + 1 : g_valid_len;
        if (!strncmp(g_valid + i, key, kl) && g_valid[i + kl] == ':') return 1;
    }
    return 0;
}

static void fuzz_lines(family *fam, int cases) {
    size_t starts[256], n = 0;
    for (size_t i = 0; i < g_valid_len && n < 256; i++)
        if (i == 0 || g_valid[i - 1] == '\n') starts[n++] = i;
    char *buf = malloc(g_valid_len + 1);
    for (int c = 0; c < cases; c++) {
        const size_t l = rnd() % n, b = starts[l], e = l + 1 < n ? starts[l + 1] : g_valid_len;
        memcpy(buf, g_valid, b);
        memcpy(buf + b, g_valid + e, g_valid_len - e);
        const char *key = NULL;
        for (int k = 0; k < N_REQUIRED; k++) {
            const size_t kl = strlen(REQUIRED[k]);
            if (!strncmp(g_valid + b, REQUIRED[k], kl) && g_valid[b + kl] == ':') key = REQUIRED[k];
        }
        // Without its "matmul_points:" line the points are a list under a mapping: not YAML.
        const int orphans = !strncmp(g_valid + b, "matmul_points:", 14);
        char path[400];
        snprintf(path, sizeof path, "%s/lines_%d.yaml", g_dir, c);
        fuzz_write_text(path, buf, g_valid_len - (e - b));
        run_case(fam, c, path, key || orphans ? 2 : 0, key);
    }
    free(buf);
}

static void fuzz_values(family *fam, int cases) {
    static const struct {
        const char *tok;
        int verdict; // 0 valid, 1 invalid, 2 valid only where 0 is allowed
    } TOKENS[] = {{"1.5e11", 0}, {"42", 0},   {"3.25", 0},   {"0", 2},      {"-1", 1},
                  {"-0.5", 1},   {"nan", 1},  {".inf", 1},   {"inf", 1},    {"1e999", 1},
                  {"abc", 1},    {"\"\"", 1}, {"[1, 2]", 1}, {"{a: 1}", 1}, {"1e-400", 1},
                  {"0x10", 0},   {"~", 1},    {"12abc", 1}};
    const int n_tok = sizeof TOKENS / sizeof *TOKENS;
    char *buf = malloc(g_valid_len + 256);
    for (int c = 0; c < cases; c++) {
        const char *key = REQUIRED[6 + rnd() % (N_REQUIRED - 7)]; // peak_fp32 .. latency_inter
        const int t = (int)(rnd() % n_tok);
        size_t b, e;
        if (!find_line(key, &b, &e)) continue;
        const char *v = strstr(g_valid + b, "{value: ") + 8, *ve = strchr(v, ',');
        size_t o = 0;
        memcpy(buf, g_valid, (size_t)(v - g_valid)), o = (size_t)(v - g_valid);
        o += (size_t)sprintf(buf + o, "%s", TOKENS[t].tok);
        memcpy(buf + o, ve, g_valid_len - (size_t)(ve - g_valid));
        o += g_valid_len - (size_t)(ve - g_valid);
        const int bad = TOKENS[t].verdict == 1 || (TOKENS[t].verdict == 2 && !zero_ok(key));
        char path[400];
        snprintf(path, sizeof path, "%s/values_%d.yaml", g_dir, c);
        fuzz_write_text(path, buf, o);
        run_case(fam, c, path, bad ? 2 : 0, key);
    }
    free(buf);
}

static void fuzz_structure(family *fam, int cases) {
    char *buf = malloc(g_valid_len + 70000);
    for (int c = 0; c < cases; c++) {
        const int kind = (int)(rnd() % 6);
        size_t o = 0;
        const char *key = NULL;
        if (kind == 0) { // another version
            const long v = (long)(rnd() % 5) + 2;
            o = (size_t)sprintf(buf, "profile_version: %ld\n", v);
            size_t b, e;
            find_line("profile_version", &b, &e);
            memcpy(buf + o, g_valid + e, g_valid_len - e), o += g_valid_len - e;
            key = "profile_version";
        } else if (kind == 1 || kind == 2) { // a required key repeated, or an unknown key
            key = kind == 1 ? REQUIRED[rnd() % N_REQUIRED] : "matmul_rat";
            size_t b, e;
            find_line(kind == 1 ? key : "matmul_rate", &b, &e);
            memcpy(buf, g_valid, g_valid_len), o = g_valid_len;
            if (kind == 1) memcpy(buf + o, g_valid + b, e - b), o += e - b;
            else o += (size_t)sprintf(buf + o, "matmul_rat: 1\n");
        } else if (kind == 3) { // deep nesting
            const int depth = 60 + (int)(rnd() % 20000);
            memcpy(buf, g_valid, g_valid_len), o = g_valid_len;
            o += (size_t)sprintf(buf + o, "config: ");
            for (int i = 0; i < depth; i++) buf[o++] = '[';
            buf[o++] = '\n';
        } else if (kind == 4) { // no mapping at the root
            o = (size_t)sprintf(buf, "%s", rnd() % 2 ? "- a\n- b\n" : "just text\n");
        } else { // a matmul point with a bad dtype
            memcpy(buf, g_valid, g_valid_len), o = g_valid_len;
            o += (size_t)sprintf(buf + o, "  - {m: 1, n: 2, k: 3, dtype: fp64, rate: 5}\n");
            key = "matmul_points";
        }
        char path[400];
        snprintf(path, sizeof path, "%s/structure_%d.yaml", g_dir, c);
        fuzz_write_text(path, buf, o);
        run_case(fam, c, path, 2, key);
    }
    free(buf);
}

static void fuzz_bytes(family *fam, int cases) {
    char *buf = malloc(g_valid_len + 64);
    for (int c = 0; c < cases; c++) {
        memcpy(buf, g_valid, g_valid_len);
        size_t n = g_valid_len;
        const int kind = (int)(rnd() % 3), hits = 1 + (int)(rnd() % 4);
        for (int h = 0; h < hits; h++) {
            const size_t at = rnd() % n;
            if (kind == 0) buf[at] = (char)(rnd() & 0xff);
            else if (kind == 1 && n < g_valid_len + 60) {
                memmove(buf + at + 1, buf + at, n - at), buf[at] = (char)(rnd() & 0xff), n++;
            } else n = at;
            if (!n) break;
        }
        char path[400];
        snprintf(path, sizeof path, "%s/bytes_%d.yaml", g_dir, c);
        fuzz_write_text(path, buf, n);
        run_case(fam, c, path, -1, NULL);
    }
    free(buf);
}

// The optional per-collective lines (plan_calibrate_comm.c): a valid profile with one
// comm_<op>: {value: [latency, bandwidth], source: ...} appended, its value drawn from valid
// and invalid tokens (a latency may be 0, a bandwidth must be above 0), the wrong arity, or a
// bad source.
static void fuzz_comm(family *fam, int cases) {
    static const char *const KEYS[] = {"comm_all_reduce", "comm_reduce_scatter", "comm_all_gather",
                                       "comm_send"};
    static const struct {
        const char *tok;
        int verdict; // 0 valid, 1 invalid, 2 valid only as a latency (0)
    } TOK[] = {{"2e-06", 0}, {"5e9", 0}, {"0", 2},     {"-1", 1},  {"nan", 1},
               {".inf", 1},  {"abc", 1}, {"1e999", 1}, {"[1]", 1}, {"~", 1}};
    const int n_tok = sizeof TOK / sizeof *TOK;
    char *buf = malloc(g_valid_len + 256);
    for (int c = 0; c < cases; c++) {
        const char *key = KEYS[rnd() % 4];
        const int a = (int)(rnd() % n_tok), b = (int)(rnd() % n_tok), kind = (int)(rnd() % 8);
        memcpy(buf, g_valid, g_valid_len);
        size_t o = g_valid_len;
        int bad;
        if (kind == 0) { // one number only
            o += (size_t)sprintf(buf + o, "%s: {value: [%s], source: measured}\n", key, TOK[a].tok);
            bad = 1;
        } else if (kind == 1) { // a source that is neither
            o += (size_t)sprintf(buf + o, "%s: {value: [1e-6, 1e9], source: guessed}\n", key);
            bad = 1;
        } else {
            o += (size_t)sprintf(buf + o, "%s: {value: [%s, %s], source: %s}\n", key, TOK[a].tok,
                                 TOK[b].tok, kind % 2 ? "measured" : "estimate");
            bad = TOK[a].verdict == 1 || TOK[b].verdict != 0;
        }
        char path[400];
        snprintf(path, sizeof path, "%s/comm_%d.yaml", g_dir, c);
        fuzz_write_text(path, buf, o);
        run_case(fam, c, path, bad ? 2 : 0, key);
    }
    free(buf);
}

// The optional thread_scaling line (plan_calibrate.c's measure_scaling): a valid profile with
// thread_scaling: {value: [[threads, mm, attn, elem], ...], source: measured} appended, 0 to 9
// points whose thread counts and rates are drawn from valid and invalid tokens. The oracle: 1
// to 8 points, each of 4 numbers, the threads whole, at least 1 and ascending, the rates
// finite and above 0.
static void fuzz_scaling(family *fam, int cases) {
    static const struct {
        const char *tok;
        double v; // its value; NAN: not a number the reader takes
    } THR[] = {{"1", 1},     {"2", 2}, {"3", 3},   {"4", 4},     {"8", 8},
               {"2.5", 2.5}, {"0", 0}, {"-1", -1}, {"abc", NAN}, {"70000", 70000}},
      RATE[] = {{"1e9", 1e9}, {"2.5e10", 2.5e10}, {"7", 7},       {"0", 0},  {"-3e9", -3e9},
                {"nan", NAN}, {".inf", NAN},      {"1e999", NAN}, {"x", NAN}};
    const int n_thr = sizeof THR / sizeof *THR, n_rate = sizeof RATE / sizeof *RATE;
    char *buf = malloc(g_valid_len + 2048);
    for (int c = 0; c < cases; c++) {
        memcpy(buf, g_valid, g_valid_len);
        size_t o = g_valid_len;
        const int n = (int)(rnd() % 10), sorted = rnd() % 4 != 0, arity = rnd() % 8 ? 4 : 3;
        int bad = n < 1 || n > 8 || arity != 4;
        o += (size_t)sprintf(buf + o, "thread_scaling: {value: [");
        double last = 0;
        for (int i = 0; i < n; i++) {
            // Mostly ascending whole counts (1, 2, 4, ...), sometimes a drawn one.
            const int t = sorted ? -1 : (int)(rnd() % n_thr);
            char thr[32];
            double tv;
            if (t < 0) tv = (double)(1 << i), snprintf(thr, sizeof thr, "%d", 1 << i);
            else tv = THR[t].v, snprintf(thr, sizeof thr, "%s", THR[t].tok);
            if (!(tv >= 1 && tv <= 65536 && tv == floor(tv) && tv > last)) bad = 1;
            last = tv;
            o += (size_t)sprintf(buf + o, "%s[%s", i ? ", " : "", thr);
            for (int k = 1; k < arity; k++) {
                const int r = rnd() % 3 ? (int)(rnd() % 3) : (int)(rnd() % n_rate);
                if (!(RATE[r].v > 0) || !isfinite(RATE[r].v)) bad = 1;
                o += (size_t)sprintf(buf + o, ", %s", RATE[r].tok);
            }
            buf[o++] = ']';
        }
        o += (size_t)sprintf(buf + o, "], source: measured}\n");
        char path[400];
        snprintf(path, sizeof path, "%s/scaling_%d.yaml", g_dir, c);
        fuzz_write_text(path, buf, o);
        run_case(fam, c, path, bad ? 2 : 0, "thread_scaling");
    }
    free(buf);
}

int main(int argc, char **argv) {
    int cases = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cases")) cases = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) g_seed = strtoull(argv[i + 1], NULL, 10);
    }
    g_rng = g_seed;
    log_init();
    snprintf(g_dir, sizeof g_dir, "/tmp/trident-fuzz-profile-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    plan_profile pr = {.config = "tests/configs/tiny.yaml", .seconds = 1.5, .matmul_rate = 8e10};
    plan_device_lookup("cpu", 1, &pr.dev);
    pr.dev.attn_rate = 5e10, pr.dev.elem_bw = 1e10, pr.dev.matmul_rate_bf16 = 6e10;
    pr.dev.calib = (plan_calib){.calibrated = 1, .threads = 2, .ranks = 1};
    snprintf(pr.dev.calib.host, sizeof pr.dev.calib.host, "fuzzhost");
    snprintf(pr.dev.calib.date, sizeof pr.dev.calib.date, "2025-06-01T00:00:00Z");
    snprintf(pr.dev.calib.omp_wait, sizeof pr.dev.calib.omp_wait, "OMP_WAIT_POLICY=passive");
    for (int i = 0; i < 6; i++)
        pr.points[pr.n_points++] = (plan_matmul_point){
            .m = 16 << i, .n = 64, .k = 64, .dtype = DTYPE_FP32, .rate = 1e9 * (i + 1)};
    char valid[400];
    snprintf(valid, sizeof valid, "%s/valid.yaml", g_dir);
    if (plan_profile_write(&pr, valid)) return 1;
    FILE *f = fopen(valid, "rb");
    g_valid = malloc(1 << 16);
    g_valid_len = fread(g_valid, 1, (1 << 16) - 1, f);
    g_valid[g_valid_len] = 0;
    fclose(f);
    family base = {.name = "valid"};
    run_case(&base, 0, valid, 0, NULL);
    TEST_CHECK(base.successes == 1, "fuzz_profile_valid_loads", "the written profile loads");

    family lines = {.name = "lines"}, values = {.name = "values"};
    family structure = {.name = "structure"}, bytes = {.name = "bytes"}, comm = {.name = "comm"};
    family scaling = {.name = "scaling"};
    fuzz_lines(&lines, cases);
    fuzz_comm(&comm, cases / 2);
    fuzz_scaling(&scaling, cases / 2);
    fuzz_values(&values, cases);
    fuzz_structure(&structure, cases);
    fuzz_bytes(&bytes, cases);
    report(&lines);
    report(&values);
    report(&structure);
    report(&bytes);
    report(&comm);
    report(&scaling);
    printf("fuzz_profile: seed %llu, %d cases per family\n", (unsigned long long)g_seed, cases);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd)) return 1;
    TEST_EXIT();
}
