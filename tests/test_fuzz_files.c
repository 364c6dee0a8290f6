// test_fuzz_files.c: seeded fuzzers of the files trident reads: llm.c token shards (data.c)
// and llm.c model files (llmc.c, through export, sample and model.init_from). Each case
// writes a valid file, damages it (or not) in one of the ways below, decides what trident
// must say with an oracle written from DESIGN.md's file formats (not from the readers), and
// runs a reader in a child process: in-process for every case (the function the command
// calls), and through the trident binary for every --cli-every'th case (`train`, `sample`,
// `export`). Each run must end with the oracle's verdict: exit 0, or exit 3 (data) / 4
// (model file) with the file named; never a signal, never past the time bound.
//
//   build/tests/test_fuzz_files [--cases N] [--seed S] [--cli-every K] [--trident BIN]
//
// make test runs 300 cases per family, every 30th also through the binary; more with
// --cases and --cli-every (a failing case prints its seed and number: rerun with the same
// --seed); --trident runs another build's binary (an older one, to see what it did). Per
// family it prints the cases, clean errors, successes, crashes, hangs, wrong successes and
// wrong failures.
#include <dirent.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "app/sample.h"
#include "base/bf16.h"
#include "io/data.h"
#include "io/export.h"
#include "io/model_init.h"
#include "fuzzlib.h"
#include "testlib.h"

#define CASE_TIMEOUT_S 20 // a case that runs longer is a hang
#define TINY_T 32         // tests/configs/tiny.yaml: seq_len, vocab_size, global_batch
#define TINY_V 256
#define TINY_GB 8

static char g_dir[256], g_trident[1024];
static uint64_t g_seed = 20240520, g_rng;

static uint64_t rnd(void) { return fuzz_rnd(&g_rng); }
static int64_t rnd_in(int64_t lo, int64_t hi) {
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}
static int chance(int percent) { return (int)(rnd() % 100) < percent; }

// ---- running a case in a child ----

typedef struct {
    int exit_code; // -1 when killed by a signal
    int sig;       // the signal, 0 when it exited
    int hung;      // killed by the time bound
    double seconds;
    char out[16384];
} child_result;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void read_output(const char *path, child_result *r) {
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(r->out, 1, sizeof r->out - 1, f) : 0;
    r->out[n] = '\0';
    if (f) fclose(f);
}

// argv exec'ed in a child; stdout and stderr captured.
static child_result run_child(char *const *argv, int timeout_s) {
    child_result r = {0};
    char out[512];
    snprintf(out, sizeof out, "%s/child.out", g_dir);
    fflush(stdout);
    fflush(stderr);
    const double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
        alarm((unsigned)timeout_s); // kept across exec: SIGALRM ends a hang
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) {
        r.exit_code = -1;
        r.sig = WTERMSIG(status);
        r.hung = r.sig == SIGALRM;
    } else {
        r.exit_code = WEXITSTATUS(status);
    }
    r.seconds = now_s() - t0;
    read_output(out, &r);
    return r;
}

typedef fuzz_family family;

// Scores one run against the verdict (want 0, or the error code with `named` in the
// output); prints a FAIL line for a wrong one.
static void score(family *fam, int c, const char *what, const child_result *r, int want,
                  const char *named) {
    fam->cases++;
    fam->seconds += r->seconds;
    const char *why = NULL;
    if (r->hung) fam->hangs++, why = "ran past the time bound";
    else if (r->sig) fam->crashes++, why = strsignal(r->sig);
    else if (want == 0 && r->exit_code != 0) fam->wrong_failures++, why = "refused a valid file";
    else if (want != 0 && r->exit_code == 0) fam->wrong_successes++, why = "accepted a bad file";
    else if (want != 0 && r->exit_code != want) fam->wrong_failures++, why = "wrong exit code";
    else if (want != 0 && !strstr(r->out, named)) fam->wrong_failures++, why = "file not named";
    else if (want != 0) fam->clean_errors++;
    else fam->successes++;
    if (!why) return;
    printf("FAIL %s_case_%d: %s (%s; exit %d, signal %d, expected %d naming %s; seed %llu)\n%s\n",
           fam->name, c, why, what, r->exit_code, r->sig, want, named ? named : "-",
           (unsigned long long)g_seed, r->out);
}

static void report(const family *fam) { fuzz_report(fam, "fuzz_"); }

static void write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

static void case_dir(char *out, size_t n, const char *fam, int c) {
    snprintf(out, n, "%s/%s_%d", g_dir, fam, c);
    mkdir(out, 0755);
}

// ---- the readers, in a worker process ----
// One worker runs the in-process cases one after the other (a fork per case costs about 30
// ms in a process that links the CUDA libraries); a case that kills it (a crash) or outlives
// the time bound (a hang) is scored as such, and the next case starts a new worker.

enum { JOB_SHARDS = 0, JOB_MODEL };

typedef struct {
    int family;
    char path[600], out[600]; // shards: the glob; a model file and the export's output
    int consumer;             // models: 0 export llmc, 1 export safetensors, 2 sample, 3 init_from
    int L, NH, C, maxT, V;    // the model a run with model.init_from expects
} job;

static int run_job(const job *j) {
    if (j->family == JOB_SHARDS) {
        data_stream ds;
        tri_status rc = data_open(&ds, j->path, TINY_T, TINY_V, TINY_GB, "data.train");
        if (rc == TRI_OK) data_close(&ds);
        return (int)rc;
    }
    if (j->consumer <= 1)
        return (int)export_run(j->path, j->consumer ? "safetensors" : "llmc", j->out, 0);
    if (j->consumer == 2) {
        // No prompt: one is refused (exit 2) for a vocabulary that is not byte-level when no
        // tokenizer is known, before the file's weights are read.
        sample_options o = {.run_or_file = j->path, .tokens = 2, .seed = 1, .threads = 1};
        return (int)sample_run(&o);
    }
    run_config cfg;
    config_defaults(&cfg);
    cfg.model.n_layer = j->L, cfg.model.n_head = j->NH, cfg.model.d_model = j->C;
    cfg.model.seq_len = j->maxT, cfg.model.vocab_size = j->V, cfg.model.vocab_pad_to = 8;
    param_table pt;
    params_build_full(&pt, &cfg.model, 1);
    cfg.model.init_from = (char *)j->path;
    float *host = malloc(pt.local_numel * sizeof(float) + 1);
    model_init mi;
    tri_status rc = model_init_open(&mi, &cfg, &pt);
    for (int i = 0; rc == TRI_OK && i < pt.n_entries; i++)
        rc = model_init_entry(&mi, i, host + pt.entries[i].offset);
    model_init_close(&mi);
    free(host);
    params_free(&pt);
    return (int)rc;
}

static pid_t g_worker = -1;
static int g_to_worker = -1, g_from_worker = -1;

static void worker_start(void) {
    int down[2], up[2];
    if (pipe(down) || pipe(up)) abort();
    fflush(stdout);
    fflush(stderr);
    g_worker = fork();
    if (g_worker == 0) {
        close(down[1]), close(up[0]);
        char out[512];
        snprintf(out, sizeof out, "%s/child.out", g_dir);
        job j;
        while (read(down[0], &j, sizeof j) == (ssize_t)sizeof j) {
            int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
            int rc = run_job(&j);
            fflush(stdout);
            fflush(stderr);
            if (write(up[1], &rc, sizeof rc) != (ssize_t)sizeof rc) break;
        }
        _exit(0);
    }
    close(down[0]), close(up[1]);
    g_to_worker = down[1], g_from_worker = up[0];
}

static void worker_end(int status, child_result *r) {
    if (WIFSIGNALED(status)) r->exit_code = -1, r->sig = WTERMSIG(status);
    close(g_to_worker), close(g_from_worker);
    g_worker = -1;
}

static child_result run_in_worker(const job *j, int timeout_s) {
    child_result r = {0};
    if (g_worker < 0) worker_start();
    const double t0 = now_s();
    int rc = 0, status = 0;
    if (write(g_to_worker, j, sizeof *j) != (ssize_t)sizeof *j) abort();
    struct pollfd pfd = {.fd = g_from_worker, .events = POLLIN};
    const int ready = poll(&pfd, 1, timeout_s * 1000);
    if (ready == 0) { // past the bound: a hang
        kill(g_worker, SIGKILL);
        waitpid(g_worker, &status, 0);
        worker_end(status, &r);
        r.hung = 1, r.sig = SIGKILL;
    } else if (read(g_from_worker, &rc, sizeof rc) != (ssize_t)sizeof rc) { // it died
        waitpid(g_worker, &status, 0);
        worker_end(status, &r);
        if (!r.sig) r.sig = SIGABRT; // exited without answering
    } else {
        r.exit_code = rc;
    }
    r.seconds = now_s() - t0;
    char out[512];
    snprintf(out, sizeof out, "%s/child.out", g_dir);
    read_output(out, &r);
    return r;
}

// ---- token shards ----

// A file the glob matches: its bytes, or a non-regular kind.
enum { SHARD_FILE = 0, SHARD_DIR, SHARD_FIFO, SHARD_DANGLING };

typedef struct {
    int kind;
    unsigned char *bytes;
    size_t n, cap; // bytes used, allocated
} shard_file;

// Up to 64 random bytes appended, within the buffer's room.
static void append_bytes(unsigned char *bytes, size_t *n, size_t cap) {
    size_t extra = (size_t)rnd_in(1, 64);
    if (*n + extra > cap) extra = cap - *n;
    for (size_t i = 0; i < extra; i++) bytes[*n + i] = (unsigned char)rnd();
    *n += extra;
}

// The oracle (DESIGN.md "Files"): a regular file of 256 int32 words [20240520, 1, ntok] then
// ntok uint16 tokens, or [20240801, 7, ntok] and uint32 tokens; exactly 1024 + ntok * size
// bytes; every token below the vocabulary. Returns its samples of T, or -1 when invalid.
static int64_t shard_oracle(const shard_file *s, int V, int T) {
    if (s->kind != SHARD_FILE || s->n < 1024) return -1;
    int32_t h[3];
    memcpy(h, s->bytes, sizeof h);
    int size;
    if (h[0] == 20240520 && h[1] == 1) size = 2;
    else if (h[0] == 20240801 && h[1] == 7) size = 4;
    else return -1;
    if (h[2] < 0 || (int64_t)s->n != 1024 + (int64_t)h[2] * size) return -1;
    for (int64_t i = 0; i < h[2]; i++) {
        uint32_t t = 0;
        memcpy(&t, s->bytes + 1024 + i * size, (size_t)size);
        if (t >= (uint32_t)V) return -1;
    }
    return h[2] >= 1 ? (h[2] - 1) / T : 0;
}

static void make_shard(shard_file *s) {
    const int wide = chance(30);
    const int64_t ntok = chance(10) ? rnd_in(0, 40) : rnd_in(0, 700);
    const int size = wide ? 4 : 2;
    s->kind = SHARD_FILE;
    s->n = 1024 + (size_t)ntok * (size_t)size;
    s->cap = s->n + 256;
    s->bytes = calloc(1, s->cap);
    int32_t h[3] = {wide ? 20240801 : 20240520, wide ? 7 : 1, (int32_t)ntok};
    memcpy(s->bytes, h, sizeof h);
    for (int64_t i = 0; i < ntok; i++) {
        uint32_t t = (uint32_t)rnd_in(0, TINY_V - 1);
        memcpy(s->bytes + 1024 + i * size, &t, (size_t)size);
    }
}

// One damage; the oracle decides what it did.
static void damage_shard(shard_file *s) {
    int32_t *h = (int32_t *)s->bytes;
    const int size = h[0] == 20240801 ? 4 : 2;
    switch (rnd() % 11) {
    case 0: h[rnd() % 2] = (int32_t)rnd(); break; // magic or version
    case 1: { // the other format's magic or version: a mismatched pair
        if (rnd() % 2) h[0] = h[0] == 20240520 ? 20240801 : 20240520;
        else h[1] = h[1] == 1 ? 7 : 1;
        break;
    }
    case 2: { // the token count
        const int32_t v[] = {-1,
                             INT32_MIN,
                             INT32_MAX,
                             (int32_t)((uint32_t)h[2] + 1),
                             (int32_t)((uint32_t)h[2] - 1),
                             (int32_t)rnd(),
                             0};
        h[2] = v[rnd() % 7];
        break;
    }
    case 3: s->n = s->n ? (size_t)rnd_in(0, (int64_t)s->n - 1) : 0; break; // truncated
    case 4: append_bytes(s->bytes, &s->n, s->cap); break;                  // trailing bytes
    case 5: { // a token out of range (within what is left of the file)
        if (h[2] <= 0 || s->n < 1024 + (size_t)size) break;
        int64_t i = rnd_in(0, h[2] - 1);
        if (1024 + (size_t)(i + 1) * (size_t)size > s->n) i = (int64_t)(s->n - 1024) / size - 1;
        uint32_t t = size == 2 ? (uint32_t)rnd_in(TINY_V, 65535)
                               : (rnd() % 2 ? 0x80000000u + (uint32_t)rnd_in(0, 9)
                                            : (uint32_t)rnd_in(TINY_V, UINT32_MAX));
        memcpy(s->bytes + 1024 + i * size, &t, (size_t)size);
        break;
    }
    case 6: // other header words: not part of the format, ignored
        for (int w = 3; w < 256; w++) h[w] = (int32_t)rnd();
        break;
    case 7: s->n = 0; break; // empty
    case 8: s->kind = (int)rnd_in(SHARD_DIR, SHARD_DANGLING); break;
    case 9: // random bytes anywhere
        for (int k = 0; k < 4 && s->n; k++) s->bytes[rnd() % s->n] = (unsigned char)rnd();
        break;
    default: break; // left valid
    }
}

static void put_shard(const char *path, const shard_file *s) {
    if (s->kind == SHARD_DIR) mkdir(path, 0755);
    else if (s->kind == SHARD_FIFO) mkfifo(path, 0644);
    else if (s->kind == SHARD_DANGLING) symlink("/nonexistent/shard.bin", path);
    else write_bytes(path, s->bytes, s->n);
}

static void fuzz_shards(int cases, int cli_every, family *fam, family *cli) {
    for (int c = 0; c < cases; c++) {
        g_rng = g_seed * 1000003ULL + (uint64_t)c;
        char dir[512], pattern[600], names[3][700];
        case_dir(dir, sizeof dir, "shards", c);
        snprintf(pattern, sizeof pattern, "%s/shard_*.bin", dir);
        const int n = (int)rnd_in(1, 3);
        int64_t samples = 0;
        const char *named = NULL;
        for (int k = 0; k < n; k++) {
            shard_file s;
            make_shard(&s);
            for (int d = chance(25) ? 0 : (int)rnd_in(1, 2); d > 0; d--) damage_shard(&s);
            snprintf(names[k], sizeof names[k], "%s/shard_%03d.bin", dir, k);
            put_shard(names[k], &s);
            const int64_t got = shard_oracle(&s, TINY_V, TINY_T);
            if (got < 0 && !named) named = names[k]; // shards are read in name order
            samples += got > 0 ? got : 0;
            free(s.bytes);
        }
        if (!named && samples < TINY_GB) named = pattern; // fewer samples than one batch
        const int want = named ? TRI_ERR_DATA : 0;
        job j = {.family = JOB_SHARDS};
        snprintf(j.path, sizeof j.path, "%s", pattern);
        child_result r = run_in_worker(&j, CASE_TIMEOUT_S);
        score(fam, c, "data_open", &r, want, named);
        if (cli_every <= 0 || c % cli_every) continue;
        char set_train[700], set_out[600];
        snprintf(set_train, sizeof set_train, "data.train=%s", pattern);
        snprintf(set_out, sizeof set_out, "run.out_dir=%s/run", dir);
        char *argv[] = {g_trident,       "train", "tests/configs/tiny.yaml", "--set",
                        set_train,       "--set", "data.eval_every=0",       "--set",
                        "train.steps=1", "--set", "system.threads=1",        "--set",
                        set_out,         NULL};
        r = run_child(argv, 3 * CASE_TIMEOUT_S);
        score(cli, c, "trident train", &r, want, named);
    }
}

// ---- llm.c model files ----

typedef struct {
    int version, maxT, V, L, NH, C, Vp;
    unsigned char *bytes;
    size_t n, cap;
    int kind; // SHARD_FILE, SHARD_DIR, SHARD_FIFO (as for shards)
} model_file;

static int64_t model_numel(int64_t maxT, int64_t L, int64_t C, int64_t Vp) {
    return Vp * C + maxT * C + 2 * C + L * (12 * C * C + 13 * C);
}

static void make_model(model_file *m, int big_vocab) {
    m->kind = SHARD_FILE;
    m->version = chance(30) ? 5 : 3;
    m->NH = 1 << rnd_in(0, 2);
    m->C = m->NH * (int)rnd_in(1, 6);
    m->L = (int)rnd_in(1, 3);
    m->maxT = (int)rnd_in(1, 24);
    m->V = big_vocab ? (int)rnd_in(TINY_V, 300) : (int)rnd_in(1, 300);
    m->Vp = m->V + (int)rnd_in(0, 40);
    const int64_t numel = model_numel(m->maxT, m->L, m->C, m->Vp);
    const size_t elem = m->version == 3 ? 4 : 2;
    m->n = 1024 + (size_t)numel * elem;
    m->cap = m->n + 256;
    m->bytes = calloc(1, m->cap);
    int32_t h[8] = {20240326, m->version, m->maxT, m->V, m->L, m->NH, m->C, m->Vp};
    memcpy(m->bytes, h, sizeof h);
    for (int64_t i = 0; i < numel; i++) {
        const int padding = i < (int64_t)m->Vp * m->C && i / m->C >= m->V;
        float v = padding && chance(2) ? NAN
                  : padding            ? 0.0f
                                       : (float)((double)rnd_in(-1000, 1000) / 5000.0);
        if (elem == 4) memcpy(m->bytes + 1024 + i * 4, &v, 4);
        else {
            uint16_t b = bf16_from_f32(v);
            memcpy(m->bytes + 1024 + i * 2, &b, 2);
        }
    }
}

static void damage_model(model_file *m) {
    int32_t *h = (int32_t *)m->bytes;
    const size_t elem = h[1] == 5 ? 2 : 4;
    const int64_t numel = m->n > 1024 ? ((int64_t)m->n - 1024) / (int64_t)elem : 0;
    switch (rnd() % 10) {
    case 0: h[0] = (int32_t)rnd(); break;
    case 1: {
        const int32_t v[] = {0, 1, 2, 4, 6, -3, (int32_t)rnd()};
        h[1] = v[rnd() % 7];
        break;
    }
    case 2: { // a dim
        const int w = (int)rnd_in(2, 7);
        const int32_t v[] = {0,
                             -1,
                             INT32_MIN,
                             INT32_MAX,
                             (int32_t)((uint32_t)h[w] + 1),
                             (int32_t)((uint32_t)h[w] - 1),
                             (int32_t)rnd(),
                             1 << 20,
                             1 << 24};
        h[w] = v[rnd() % 9];
        break;
    }
    case 3: m->n = m->n ? (size_t)rnd_in(0, (int64_t)m->n - 1) : 0; break;
    case 4: append_bytes(m->bytes, &m->n, m->cap); break;
    case 5: { // a non-finite value
        if (numel <= 0) break;
        const int64_t i = rnd_in(0, numel - 1);
        if (elem == 4) {
            const uint32_t v[] = {0x7fc00000u, 0x7f800001u, 0xffc00000u, 0x7f800000u, 0xff800000u};
            memcpy(m->bytes + 1024 + i * 4, &v[rnd() % 5], 4);
        } else {
            const uint16_t v[] = {0x7fc0u, 0x7f81u, 0xffc0u, 0x7f80u, 0xff80u};
            memcpy(m->bytes + 1024 + i * 2, &v[rnd() % 5], 2);
        }
        break;
    }
    case 6: // header words past the dims: not part of the format, ignored
        for (int w = 8; w < 256; w++) h[w] = (int32_t)rnd();
        break;
    case 7: { // the header whose 2^64 values wrapped to none (export aborted, exit 134)
        const int32_t wrap[8] = {20240326, 3, 1024, 3843757, 349525, 1, 1 << 21, 3843757};
        memcpy(h, wrap, sizeof wrap);
        m->n = 1024;
        break;
    }
    case 8: m->kind = rnd() % 2 ? SHARD_DIR : SHARD_FIFO; break;
    default: m->n = rnd() % 2 ? 0 : m->n; break; // empty, or left valid
    }
}

// The oracle (DESIGN.md "Files"): 256 int32 words [20240326, 3 (fp32) or 5 (bf16), maxT, V, L,
// NH, C, Vp], then Vp*C + maxT*C + 2C + L*(12C^2 + 13C) values; dims positive (and within
// the reader's stated bounds), C a multiple of NH, V <= Vp; every value of the model finite
// (wte's rows V..Vp-1 are padding, never read).
static int model_oracle(const model_file *m) {
    if (m->kind != SHARD_FILE || m->n < 1024) return 0;
    int32_t h[8];
    memcpy(h, m->bytes, sizeof h);
    if (h[0] != 20240326 || (h[1] != 3 && h[1] != 5)) return 0;
    const int64_t maxs[8] = {0,
                             0,
                             LLMC_MAX_SEQ_LEN,
                             LLMC_MAX_VOCAB,
                             LLMC_MAX_LAYERS,
                             LLMC_MAX_D_MODEL,
                             LLMC_MAX_D_MODEL,
                             LLMC_MAX_VOCAB};
    for (int w = 2; w < 8; w++)
        if (h[w] < 1 || h[w] > maxs[w]) return 0;
    if (h[6] % h[5] || h[7] < h[3]) return 0;
    const int64_t elem = h[1] == 3 ? 4 : 2, numel = model_numel(h[2], h[4], h[6], h[7]);
    if ((int64_t)m->n != 1024 + numel * elem) return 0;
    for (int64_t i = 0; i < numel; i++) {
        if (i < (int64_t)h[7] * h[6] && i / h[6] >= h[3]) continue; // padding
        uint32_t bits;
        if (elem == 4) memcpy(&bits, m->bytes + 1024 + i * 4, 4);
        else {
            uint16_t b;
            memcpy(&b, m->bytes + 1024 + i * 2, 2);
            bits = (uint32_t)b << 16;
        }
        if ((bits & 0x7f800000u) == 0x7f800000u) return 0;
    }
    return 1;
}

static void fuzz_models(int cases, int cli_every, family *fam, family *cli) {
    static const char *what[] = {"export llmc", "export safetensors", "sample", "model.init_from"};
    for (int c = 0; c < cases; c++) {
        g_rng = g_seed * 2000003ULL + (uint64_t)c;
        char dir[512], path[600], out[600];
        case_dir(dir, sizeof dir, "models", c);
        snprintf(path, sizeof path, "%s/model.bin", dir);
        snprintf(out, sizeof out, "%s/out.bin", dir);
        const int consumer = c % 4;
        model_file m;
        make_model(&m, consumer == 3);
        for (int d = chance(25) ? 0 : (int)rnd_in(1, 2); d > 0; d--) damage_model(&m);
        if (m.kind == SHARD_DIR) mkdir(path, 0755);
        else if (m.kind == SHARD_FIFO) mkfifo(path, 0644);
        else write_bytes(path, m.bytes, m.n);
        int valid = model_oracle(&m);
        int32_t h[8];
        memcpy(h, m.bytes, sizeof h);
        if (consumer == 3 && valid) // init_from also wants the config's shape
            valid = h[2] == m.maxT && h[3] == m.V && h[4] == m.L && h[5] == m.NH && h[6] == m.C;
        // A directory named as a model is a run directory: its model.bin is what is missing.
        char inner[700];
        snprintf(inner, sizeof inner, "%s/model.bin", path);
        const char *named = m.kind == SHARD_DIR && consumer <= 2 ? inner : path;
        job j = {.family = JOB_MODEL,
                 .consumer = consumer,
                 .L = m.L,
                 .NH = m.NH,
                 .C = m.C,
                 .maxT = m.maxT,
                 .V = m.V};
        snprintf(j.path, sizeof j.path, "%s", path);
        snprintf(j.out, sizeof j.out, "%s", out);
        child_result r = run_in_worker(&j, CASE_TIMEOUT_S);
        score(fam, c, what[consumer], &r, valid ? 0 : TRI_ERR_CKPT, named);
        if (r.exit_code == 0 && consumer == 0) { // the export holds the model as fp32
            struct stat st;
            const int64_t numel = model_numel(h[2], h[4], h[6], h[7]);
            if (stat(out, &st) != 0 || st.st_size != 1024 + 4 * numel) {
                fam->wrong_successes++;
                printf("FAIL models_case_%d: export wrote %lld bytes, not %lld\n", c,
                       (long long)st.st_size, (long long)(1024 + 4 * numel));
            }
        }
        free(m.bytes);
        if (cli_every <= 0 || c % cli_every) continue;
        char sets[6][64], set_out[600], set_init[700];
        snprintf(sets[0], 64, "model.n_layer=%d", m.L);
        snprintf(sets[1], 64, "model.n_head=%d", m.NH);
        snprintf(sets[2], 64, "model.d_model=%d", m.C);
        snprintf(sets[3], 64, "model.seq_len=%d", m.maxT);
        snprintf(sets[4], 64, "model.vocab_size=%d", m.V);
        snprintf(set_out, sizeof set_out, "run.out_dir=%s/run", dir);
        snprintf(set_init, sizeof set_init, "model.init_from=%s", path);
        char *exp[] = {g_trident, "export", path, "--format", consumer ? "safetensors" : "llmc",
                       "--out",   out,      NULL};
        char *smp[] = {g_trident, "sample", path,        "--tokens", "2",
                       "--seed",  "1",      "--threads", "1",        NULL};
        char *trn[] = {g_trident,
                       "train",
                       "tests/configs/tiny.yaml",
                       "--set",
                       set_init,
                       "--set",
                       sets[0],
                       "--set",
                       sets[1],
                       "--set",
                       sets[2],
                       "--set",
                       sets[3],
                       "--set",
                       sets[4],
                       "--set",
                       "train.steps=1",
                       "--set",
                       "data.eval_every=0",
                       "--set",
                       "train.micro_batch=1",
                       "--set",
                       "train.global_batch=1",
                       "--set",
                       "system.threads=1",
                       "--set",
                       set_out,
                       NULL};
        char **argv = consumer <= 1 ? exp : consumer == 2 ? smp : trn;
        r = run_child(argv, 3 * CASE_TIMEOUT_S);
        score(cli, c, what[consumer], &r, valid ? 0 : TRI_ERR_CKPT, named);
    }
}

int main(int argc, char **argv) {
    int cases = 300, cli_every = 30;
    const char *trident = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cli-every") && i + 1 < argc) cli_every = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--trident") && i + 1 < argc) trident = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--cases N] [--seed S] [--cli-every K] [--trident BIN]\n",
                    argv[0]);
            return 2;
        }
    }
    log_init();
    // The trident binary beside this test's directory (build/tests/.. -> build/trident).
    char self[1024];
    snprintf(self, sizeof self, "%s", argv[0]);
    if (trident) snprintf(g_trident, sizeof g_trident, "%s", trident);
    else snprintf(g_trident, sizeof g_trident, "%s/../trident", dirname(self));
    if (access(g_trident, X_OK) != 0) cli_every = 0;
    snprintf(g_dir, sizeof g_dir, "/tmp/trident_fuzz_files_%d", (int)getpid());
    mkdir(g_dir, 0755);
    const double t0 = (double)time(NULL);
    family shards = {.name = "shards"}, shards_cli = {.name = "shards_cli"};
    family models = {.name = "models"}, models_cli = {.name = "models_cli"};
    fuzz_shards(cases, cli_every, &shards, &shards_cli);
    fuzz_models(cases, cli_every, &models, &models_cli);
    if (g_worker > 0) {
        close(g_to_worker); // the worker's read ends: it exits
        waitpid(g_worker, NULL, 0);
    }
    report(&shards);
    if (cli_every > 0) report(&shards_cli);
    report(&models);
    if (cli_every > 0) report(&models_cli);
    printf("fuzz_files: seed %llu, %d cases per family, %.0f s\n", (unsigned long long)g_seed,
           cases, (double)time(NULL) - t0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("warning: could not remove %s\n", g_dir);
    TEST_EXIT();
}
