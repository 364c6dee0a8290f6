// ckpt_fuzz.c: a seeded fuzzer of checkpoints (issue 15), run by tests/test_ckpt_fuzz.sh.
//
//   build/tests/ckpt_fuzz --seed S --cases N --work DIR [--case K] CKPT_DIR...
//
// Each CKPT_DIR is a checkpoint.dir that a run wrote (latest and step_N directories). For each
// family below, N cases: a copy of a random CKPT_DIR is damaged in one way, then a child
// process does what a resume does before it trains, through the library: it resolves the
// checkpoint as checkpoint.resume: auto would (ckpt_resolve_resume), checks it whole
// (ckpt_verify: the manifest, the rank files, every region's CRC), compares the config it
// recorded with the resuming one (config_resume_diff) and reads its model
// (ckpt_model_open and ckpt_model_read, tensor by tensor). Each case must end in one of two ways:
//   refused   exit 4, the damaged file named (and, for an edited field, the field), or
//   accepted  exit 0 with the progress, the data order (every field of the recorded cursor)
//             and the parameters of the checkpoint it should resolve to, bitwise (so a
//             resume continues bitwise; a damaged `latest` must resolve to the newest
//             complete checkpoint, or to the complete one it names);
// never a signal, never past 10 s, never a fresh start over checkpoints. Families:
//   manifest    bytes of manifest.yaml: a number changed, a byte flipped, a line deleted,
//               duplicated or swapped, the file truncated (the seal is left as it was)
//   resealed    a field of manifest.yaml set to another value, or region lines deleted,
//               duplicated or moved, then sealed again (what a version 1 manifest, which
//               has no checksum, is exposed to): the field checks alone must catch it (the
//               data order's fields too: each is checked against the recorded config, the
//               samples and the blend schedule)
//   rankfile    a rank file: bytes flipped or zeroed, truncated, extended, deleted, or two
//               swapped
//   latest      `latest` empty, deleted, a symlink loop, a directory, junk, naming a missing,
//               older or temporary step; with or without the newest manifest removed
// Prints per family: cases, clean errors, accepted (bitwise), crashes, hangs, wrong
// successes (a wrong resume), unnamed (exit 4 without the file or field named), and
// PASS/FAIL lines; --case K replays one case and keeps its directory.
#include <dirent.h>
#include <ftw.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "config/config.h"
#include "config/config_resume.h"
#include "io/checkpoint.h"
#include "model/params.h"

#define MAX_STEPS 16
#define CKPT_SEAL_KEY_NAME "manifest_crc32c" // the last line of a version 2 manifest
#define CASE_TIMEOUT_S 10.0

typedef enum { FAM_MANIFEST, FAM_RESEALED, FAM_RANKFILE, FAM_LATEST, FAM_COUNT } family;
static const char *const family_names[FAM_COUNT] = {"manifest", "resealed", "rankfile", "latest"};

// What a child reports of an accepted checkpoint.
typedef struct {
    int step, optim_t;
    int64_t samples, tokens;
    size_t numel;
    uint32_t params_crc;
    uint32_t order_crc; // the data order a resume continues (every field of the cursor)
    char resolved[512];
} outcome;

// A CRC over the data order a checkpoint records: what a resume continues must be what was
// written, field by field.
static uint32_t order_crc(const data_cursor *c) {
    uint32_t crc = 0;
    const int64_t head[] = {c->recorded, c->shuffle,     (int64_t)c->seed, c->global_batch,
                            c->step,     c->origin_step, c->retired,       c->n_sources};
    crc = crc32c_update(crc, head, sizeof head);
    for (int i = 0; i < c->n_sources; i++) {
        const data_cursor_source *s = &c->sources[i];
        const int64_t v[] = {s->samples, s->origin_samples, s->extras};
        crc = crc32c_update(crc, v, sizeof v);
        crc = crc32c_update(crc, &s->weight, sizeof s->weight);
        if (s->path) crc = crc32c_update(crc, s->path, strlen(s->path));
    }
    return crc;
}

typedef struct {
    char dir[512];          // the checkpoint.dir
    int n_steps;            // its step directories, ascending
    int steps[MAX_STEPS];   // their N
    outcome ref[MAX_STEPS]; // what each resolves to, undamaged
} base;

// ---- small helpers ----

static uint64_t rng_state;
static uint64_t rnd(void) { // splitmix64
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rnd_below(int n) { return n > 0 ? (int)(rnd() % (uint64_t)n) : 0; }

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    *n = fread(buf, 1, (size_t)len, f);
    buf[*n] = '\0';
    fclose(f);
    return buf;
}

static void write_file(const char *path, const char *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(buf, 1, n, f);
    fclose(f);
}

#define PB 4096 // every path buffer

__attribute__((format(printf, 2, 3))) static void pathf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out, PB, fmt, ap);
    va_end(ap);
}

// cp -r of a tree of directories, files and symlinks.
static void copy_tree(const char *src, const char *dst) {
    struct stat st;
    if (lstat(src, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        mkdir(dst, 0755);
        DIR *d = opendir(src);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char a[PB], b[PB];
            pathf(a, "%s/%s", src, de->d_name);
            pathf(b, "%s/%s", dst, de->d_name);
            copy_tree(a, b);
        }
        if (d) closedir(d);
    } else if (S_ISLNK(st.st_mode)) {
        char target[PB];
        ssize_t n = readlink(src, target, sizeof target - 1);
        if (n >= 0) target[n] = '\0';
        if (n < 0 || symlink(target, dst) != 0) exit(1);
    } else {
        size_t n;
        char *b = read_file(src, &n);
        write_file(dst, b, n);
        free(b);
    }
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

// rm -rf
static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

// The step directories of a checkpoint.dir, ascending.
static int list_steps(const char *dir, int *steps) {
    int n = 0, s;
    char extra;
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strlen(de->d_name) == 13 && sscanf(de->d_name, "step_%8d%c", &s, &extra) == 1 &&
            n < MAX_STEPS)
            steps[n++] = s;
    if (d) closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && steps[j - 1] > steps[j]; j--) {
            int t = steps[j];
            steps[j] = steps[j - 1], steps[j - 1] = t;
        }
    return n;
}

// ---- the child: what a resume does before training ----

static int child(const char *ckpt_dir, int out_fd) {
    run_config cfg;
    config_defaults(&cfg);
    free(cfg.checkpoint.dir);
    free(cfg.checkpoint.resume);
    cfg.checkpoint.dir = xstrdup(ckpt_dir);
    cfg.checkpoint.resume = xstrdup("auto");
    outcome o;
    memset(&o, 0, sizeof o);
    tri_status rc = ckpt_resolve_resume(&cfg, o.resolved, sizeof o.resolved);
    if (rc != TRI_OK) return (int)rc;
    if (!o.resolved[0]) return 11; // a fresh start over checkpoints: never right here
    ckpt_progress p;
    if ((rc = ckpt_verify(o.resolved, &p)) != TRI_OK) return (int)rc;
    o.order_crc = order_crc(&p.order);
    data_cursor_free(&p.order);
    // What a resume reads next (app/resume_diff.h): the config the checkpoint recorded,
    // compared with this one; a checkpoint the checks accept has a readable one.
    ckpt_recorded rec;
    if ((rc = ckpt_read_recorded(o.resolved, &rec)) != TRI_OK) return (int)rc;
    resume_changes changes = {0};
    rc = config_resume_diff(rec.config, rec.config_len, rec.manifest, rec.config_line, &cfg,
                            rec.step, &changes);
    resume_changes_free(&changes);
    ckpt_recorded_free(&rec);
    if (rc != TRI_OK) return (int)rc;
    run_config mcfg;
    config_defaults(&mcfg);
    param_table full;
    ckpt_model_reader *reader;
    if ((rc = ckpt_model_open(o.resolved, &mcfg, &full, &reader)) != TRI_OK) return (int)rc;
    // The parameters in table order, as the whole model would lie in memory: one CRC over them.
    uint32_t crc = 0;
    for (int i = 0; i < full.n_entries; i++) {
        const param_entry *e = &full.entries[i];
        float *t = xmalloc((size_t)e->local_numel * sizeof(float) + 1);
        rc = ckpt_model_read(reader, i, t);
        if (rc == TRI_OK) crc = crc32c_update(crc, t, (size_t)e->local_numel * sizeof(float));
        free(t);
        if (rc != TRI_OK) return (int)rc;
    }
    ckpt_model_close(reader);
    o.step = p.step, o.optim_t = p.optim_t, o.samples = p.samples, o.tokens = p.tokens;
    o.numel = full.local_numel;
    o.params_crc = crc;
    if (write(out_fd, &o, sizeof o) != (ssize_t)sizeof o) return 12;
    return 0;
}

// Runs the child on ckpt_dir with its output in log_path. Returns its exit code, or -SIG
// for a signal, or -1000 for a case that ran past the bound (killed).
static int run_child(const char *ckpt_dir, const char *log_path, outcome *o) {
    int fds[2];
    if (pipe(fds) != 0) exit(1);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        int log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(log, 1);
        dup2(log, 2);
        _exit(child(ckpt_dir, fds[1]));
    }
    close(fds[1]);
    // The pipe ends (EOF or the outcome) when the child exits; a child still running after
    // the bound is killed.
    struct pollfd pfd = {fds[0], POLLIN, 0};
    int status = 0;
    if (poll(&pfd, 1, (int)(CASE_TIMEOUT_S * 1000)) == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        close(fds[0]);
        return -1000;
    }
    memset(o, 0, sizeof *o);
    ssize_t got = read(fds[0], o, sizeof *o);
    close(fds[0]);
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return -WTERMSIG(status);
    int code = WEXITSTATUS(status);
    return code == 0 && got != (ssize_t)sizeof *o ? 12 : code;
}

// ---- damage ----

// A mutation: what it did (for the report), which file, and which field it edited (the
// name that a refusal must mention; "" when none can be asked for).
typedef struct {
    char what[512];
    char file[64];
    char field[64];
    int expect_step; // latest: the step it must resolve to (-1: must be refused)
    int unchanged;   // the damage left every byte as it was
} mutation;

static const char *const odd_values[] = {"-1",
                                         "0",
                                         "2147483648",
                                         "9223372036854775807",
                                         "9223372036854775808",
                                         "-9223372036854775808",
                                         "1e3",
                                         "abc",
                                         "",
                                         "0x10",
                                         "null",
                                         "[1, 2]",
                                         "{a: 1}",
                                         "1.5",
                                         "~",
                                         "\"7\"",
                                         "-0",
                                         "99999999999"};

// The value spans "key: value" of the manifest text (value up to ',', '}', ']' or the end
// of the line; the two numbers of a "[a, b]" one by one). Fields whose edit no check can
// see are left out: config.model.n_head and vocab_size (a consistent edit, sealed again,
// describes another valid model; only the seal tells) and the comment line.
typedef struct {
    size_t at, len;
    char key[48];
    char named[48]; // what a refusal names: the key, or the list its line belongs to
} value_span;

static int find_values(const char *t, size_t n, value_span *out, int cap) {
    int count = 0;
    for (size_t i = 0; i + 2 < n && count < cap; i++) {
        if (t[i] != ':' || t[i + 1] != ' ') continue;
        size_t k = i;
        while (k > 0 && (t[k - 1] == '_' || (t[k - 1] >= 'a' && t[k - 1] <= 'z') ||
                         (t[k - 1] >= '0' && t[k - 1] <= '9')))
            k--;
        if (k == i) continue;
        size_t line = k;
        while (line > 0 && t[line - 1] != '\n') line--;
        if (t[line] == '#') continue;
        value_span v;
        snprintf(v.key, sizeof v.key, "%.*s", (int)(i - k), t + k);
        // The resolved config is checked only for what a resume takes from it (run.seed
        // and the model's shape); an edit elsewhere is caught by the seal alone, which
        // names the file.
        const int config_line = !strncmp(t + line, "    ", 4);
        const int checked = !strcmp(v.key, "seed") || !strcmp(v.key, "n_layer") ||
                            !strcmp(v.key, "d_model") || !strcmp(v.key, "seq_len") ||
                            !strcmp(v.key, "vocab_pad_to");
        // So are mesh.schedule, zero and virtual_stages (a record of the writer's layout;
        // a checkpoint loads on any). A region's crc32c is checked against its bytes, and
        // that refusal names the rank file and the crc32c; a file's size against the
        // regions in it, which names the file.
        const int informational = !strcmp(v.key, "schedule") || !strcmp(v.key, "zero") ||
                                  !strcmp(v.key, "virtual_stages");
        const char *list = !strcmp(v.key, "crc32c")                     ? "crc32c"
                           : !strncmp(t + line, "  - {tensor:", 12)     ? "regions"
                           : !strncmp(t + line, "  - {name: rank_", 16) ? "rank_0"
                           : !strncmp(t + line, "  - {name:", 10)       ? "tensors"
                           : (config_line && !checked) || informational ? ""
                                                                        : v.key;
        snprintf(v.named, sizeof v.named, "%s", list);
        if (!strcmp(v.key, "n_head") || !strcmp(v.key, "vocab_size") ||
            !strcmp(v.key, CKPT_SEAL_KEY_NAME))
            continue;
        size_t s = i + 2, e = s;
        if (t[s] == '{' || t[s] == '\n') continue; // a mapping, not a value
        if (t[s] == '[') {                         // the two numbers of a pair, either
            size_t comma = s;
            while (comma < n && t[comma] != ',' && t[comma] != ']') comma++;
            size_t close = comma;
            while (close < n && t[close] != ']') close++;
            if (rnd() & 1) s = s + 1, e = comma;
            else s = comma + 2, e = close;
        } else {
            while (e < n && t[e] != ',' && t[e] != '}' && t[e] != '\n') e++;
        }
        if (e <= s && t[s] != ',') continue;
        v.at = s, v.len = e - s;
        out[count++] = v;
    }
    return count;
}

// Lines [start offsets] of a text.
static int find_lines(const char *t, size_t n, size_t *starts, int cap) {
    int count = 0;
    for (size_t i = 0; i < n && count < cap; i++)
        if (i == 0 || t[i - 1] == '\n') starts[count++] = i;
    return count;
}

static size_t line_end(const char *t, size_t n, size_t at) {
    while (at < n && t[at] != '\n') at++;
    return at < n ? at + 1 : n;
}

// text[at, at+len) := repl.
static char *text_splice(const char *t, size_t *n, size_t at, size_t len, const char *repl,
                         size_t rlen) {
    char *out = malloc(*n - len + rlen + 1);
    memcpy(out, t, at);
    memcpy(out + at, repl, rlen);
    memcpy(out + at + rlen, t + at + len, *n - at - len);
    *n = *n - len + rlen;
    out[*n] = '\0';
    return out;
}

// The text without its seal line, sealed again.
static char *reseal(char *t, size_t *n) {
    size_t body = *n;
    if (body && t[body - 1] == '\n') body--;
    while (body > 0 && t[body - 1] != '\n') body--;
    if (strncmp(t + body, CKPT_SEAL_KEY_NAME ":", strlen(CKPT_SEAL_KEY_NAME) + 1)) body = *n;
    char line[64];
    snprintf(line, sizeof line, "%s: 0x%08x\n", CKPT_SEAL_KEY_NAME, crc32c_update(0, t, body));
    char *out = text_splice(t, n, body, *n - body, line, strlen(line));
    free(t);
    return out;
}

// An edit of one value span: returns the new text; *field the key when its value changed.
static char *edit_value(char *t, size_t *n, mutation *mu) {
    value_span spans[4096];
    int count = find_values(t, *n, spans, 4096);
    const value_span *v = &spans[rnd_below(count)];
    char old[64], repl[128];
    snprintf(old, sizeof old, "%.*s", (int)(v->len < 63 ? v->len : 63), t + v->at);
    long long x = atoll(old);
    const int numeric = old[0] == '-' || (old[0] >= '0' && old[0] <= '9');
    switch (numeric ? rnd_below(6) : 5) {
    case 0: snprintf(repl, sizeof repl, "%lld", x + 1); break;
    case 1: snprintf(repl, sizeof repl, "%lld", x - 1); break;
    case 2: snprintf(repl, sizeof repl, "%lld", x * 2 + 1); break;
    case 3: snprintf(repl, sizeof repl, "%lld", -x - 1); break;
    case 4: snprintf(repl, sizeof repl, "0%s", old); break; // the same number: a no-op edit
    default:
        snprintf(repl, sizeof repl, "%s",
                 odd_values[rnd_below(sizeof odd_values / sizeof *odd_values)]);
    }
    snprintf(mu->what, sizeof mu->what, "%s: '%s' -> '%s'", v->key, old, repl);
    // A number that reads the same (07 for 7, -0 for 0) changes nothing to be named.
    char *end;
    long long y = strtoll(repl, &end, 10);
    int same = (numeric && *repl && !*end && y == x) ||
               (repl[0] == '"' && !strncmp(repl + 1, old, strlen(old)) &&
                !strcmp(repl + 1 + strlen(old), "\""));
    snprintf(mu->field, sizeof mu->field, "%s", same ? "" : v->named);
    return text_splice(t, n, v->at, v->len, repl, strlen(repl));
}

// A line operation on the manifest: delete, duplicate, replace by another, swap.
static char *edit_lines(char *t, size_t *n, mutation *mu, int regions_only) {
    static size_t starts[1 << 16];
    int count = find_lines(t, *n, starts, 1 << 16), first = 0;
    if (regions_only) {
        for (int i = 0; i < count; i++)
            if (!strncmp(t + starts[i], "  - {tensor:", 12)) {
                first = i;
                break;
            }
    }
    const int last = count - 1; // the seal line stays last
    int a = first + rnd_below(last - first), b = first + rnd_below(last - first);
    // Issue 15's case, half the time among region lines: a region replaced by another of
    // the same tensor and kind (another rank's part), which a count of elements passes.
    int same_tensor = regions_only && (rnd() & 1);
    if (same_tensor) {
        const char *comma = strchr(strchr(t + starts[a], ',') + 1, ',');
        const size_t key = (size_t)(comma - (t + starts[a]));
        int others[1 << 12], n_others = 0;
        for (int i = first; i < last && n_others < (1 << 12); i++)
            if (i != a && !strncmp(t + starts[i], t + starts[a], key)) others[n_others++] = i;
        if (n_others) b = others[rnd_below(n_others)];
        else same_tensor = 0;
    }
    size_t a0 = starts[a], a1 = line_end(t, *n, a0), b0 = starts[b], b1 = line_end(t, *n, b0);
    char *line_b = strndup(t + b0, b1 - b0), *out;
    switch (same_tensor ? 1 : rnd_below(3)) {
    case 0:
        snprintf(mu->what, sizeof mu->what, "line %d deleted", a + 1);
        out = text_splice(t, n, a0, a1 - a0, "", 0);
        break;
    case 1:
        snprintf(mu->what, sizeof mu->what, "line %d replaced by line %d", a + 1, b + 1);
        out = text_splice(t, n, a0, a1 - a0, line_b, strlen(line_b));
        break;
    default:
        snprintf(mu->what, sizeof mu->what, "line %d duplicated", b + 1);
        out = text_splice(t, n, b0, 0, line_b, strlen(line_b));
    }
    free(line_b);
    return out;
}

static void damage_manifest(const char *step_dir, family fam, mutation *mu) {
    char path[PB];
    pathf(path, "%s/manifest.yaml", step_dir);
    snprintf(mu->file, sizeof mu->file, "manifest.yaml");
    size_t n;
    char *t = read_file(path, &n), *out = NULL;
    const size_t n0 = n;
    const int op = rnd_below(fam == FAM_RESEALED ? 2 : 5);
    if (op == 0) out = edit_value(t, &n, mu);
    else if (op == 1) out = edit_lines(t, &n, mu, fam == FAM_RESEALED);
    else if (op == 2) { // bytes flipped
        out = malloc(n + 1);
        memcpy(out, t, n + 1);
        int k = 1 + rnd_below(3);
        for (int i = 0; i < k; i++) out[rnd_below((int)n)] ^= (char)(1 << rnd_below(8));
        snprintf(mu->what, sizeof mu->what, "%d bits flipped", k);
    } else if (op == 3) { // truncated
        size_t at = (size_t)rnd_below((int)n);
        out = text_splice(t, &n, at, n - at, "", 0);
        snprintf(mu->what, sizeof mu->what, "truncated to %zu bytes", at);
    } else {
        out = edit_lines(t, &n, mu, 0);
    }
    mu->unchanged = n == n0 && !memcmp(out, t, n);
    free(t);
    if (fam == FAM_RESEALED) out = reseal(out, &n);
    write_file(path, out, n);
    free(out);
}

static void damage_rankfile(const char *step_dir, mutation *mu) {
    char names[8][64], path[PB], other[PB];
    int nf = 0;
    for (int r = 0; r < 8; r++) {
        pathf(path, "%s/rank_%05d.bin", step_dir, r);
        if (access(path, F_OK) == 0) snprintf(names[nf++], sizeof names[0], "rank_%05d.bin", r);
    }
    const char *name = names[rnd_below(nf)];
    snprintf(mu->file, sizeof mu->file, "%s", name);
    pathf(path, "%s/%s", step_dir, name);
    size_t n;
    char *b = read_file(path, &n);
    switch (rnd_below(nf > 1 ? 6 : 5)) {
    case 0: {
        int k = 1 + rnd_below(4);
        for (int i = 0; i < k; i++) b[rnd_below((int)n)] ^= (char)(1 << rnd_below(8));
        write_file(path, b, n);
        snprintf(mu->what, sizeof mu->what, "%s: %d bits flipped", name, k);
        break;
    }
    case 1: {
        size_t at = (size_t)rnd_below((int)n), len = 1 + (size_t)rnd_below(4096);
        memset(b + at, 0, at + len > n ? n - at : len);
        write_file(path, b, n);
        snprintf(mu->what, sizeof mu->what, "%s: bytes from %zu zeroed", name, at);
        break;
    }
    case 2: {
        size_t at = (size_t)rnd_below((int)n);
        write_file(path, b, at);
        snprintf(mu->what, sizeof mu->what, "%s: truncated to %zu bytes", name, at);
        break;
    }
    case 3: {
        char *more = calloc(n + 512, 1);
        memcpy(more, b, n);
        write_file(path, more, n + 1 + (size_t)rnd_below(511));
        free(more);
        snprintf(mu->what, sizeof mu->what, "%s: extended", name);
        break;
    }
    case 4:
        unlink(path);
        snprintf(mu->what, sizeof mu->what, "%s: deleted", name);
        break;
    default: { // two rank files swapped
        const char *name2 = names[name == names[0] ? 1 : 0];
        pathf(other, "%s/%s", step_dir, name2);
        char tmp[PB];
        pathf(tmp, "%s.swap", path);
        rename(path, tmp), rename(other, path), rename(tmp, other);
        snprintf(mu->what, sizeof mu->what, "%s and %s swapped", name, name2);
        snprintf(mu->file, sizeof mu->file, "rank_");
    }
    }
    free(b);
}

// Damages `latest` (and maybe manifests); sets the step it must resolve to, or -1.
static void damage_latest(const base *bs, const char *dir, mutation *mu) {
    char path[PB], m[PB];
    pathf(path, "%s/latest", dir);
    snprintf(mu->file, sizeof mu->file, "latest");
    const int newest = bs->steps[bs->n_steps - 1];
    int named = -1; // the complete step that a usable latest names
    char text[128];
    unlink(path);
    switch (rnd_below(11)) {
    case 0: write_file(path, "", 0), snprintf(mu->what, sizeof mu->what, "latest empty"); break;
    case 1: snprintf(mu->what, sizeof mu->what, "latest deleted"); break;
    case 2:
        if (symlink("latest", path) != 0) exit(1);
        snprintf(mu->what, sizeof mu->what, "latest a symlink loop");
        break;
    case 3:
        if (symlink("nowhere", path) != 0) exit(1);
        snprintf(mu->what, sizeof mu->what, "latest a dangling symlink");
        break;
    case 4: mkdir(path, 0755), snprintf(mu->what, sizeof mu->what, "latest a directory"); break;
    case 5: {
        char junk[64];
        for (int i = 0; i < 63; i++) junk[i] = (char)(1 + rnd_below(255));
        write_file(path, junk, 64);
        snprintf(mu->what, sizeof mu->what, "latest junk");
        break;
    }
    case 6:
        write_file(path, "step_99999999\n", 14);
        snprintf(mu->what, sizeof mu->what, "latest names a missing step");
        break;
    case 7:
        snprintf(text, sizeof text, "../%s/step_%08d\n", strrchr(dir, '/') + 1, newest);
        write_file(path, text, strlen(text));
        snprintf(mu->what, sizeof mu->what, "latest names a path");
        break;
    case 8:
        snprintf(text, sizeof text, "step_%08d.tmp\n", newest);
        write_file(path, text, strlen(text));
        snprintf(mu->what, sizeof mu->what, "latest names a temporary directory");
        break;
    case 9: // an older complete checkpoint: a usable latest, followed
        named = bs->steps[0];
        snprintf(text, sizeof text, "step_%08d \n\n", named);
        write_file(path, text, strlen(text));
        snprintf(mu->what, sizeof mu->what, "latest names the older step_%08d", named);
        break;
    default:
        snprintf(text, sizeof text, "step_%08d\n", newest);
        write_file(path, text, strlen(text));
        named = newest;
        snprintf(mu->what, sizeof mu->what, "latest intact");
    }
    // Sometimes the newest (or every) checkpoint loses its manifest too.
    int complete[MAX_STEPS];
    for (int i = 0; i < bs->n_steps; i++) complete[i] = 1;
    const int drop = rnd_below(4);
    for (int i = 0; i < bs->n_steps; i++) {
        if (drop == 1 ? i != bs->n_steps - 1 : drop != 2) continue;
        pathf(m, "%s/step_%08d/manifest.yaml", dir, bs->steps[i]);
        unlink(m);
        complete[i] = 0;
        if (bs->steps[i] == named) named = -1;
    }
    if (drop == 1) strcat(mu->what, ", newest manifest removed");
    if (drop == 2) strcat(mu->what, ", every manifest removed");
    mu->expect_step = -1;
    for (int i = 0; i < bs->n_steps; i++)
        if (complete[i]) mu->expect_step = bs->steps[i];
    if (named >= 0) mu->expect_step = named;
}

// ---- one case ----

typedef struct {
    int cases, clean, accepted, crashes, hangs, wrong, unnamed, wrong_code;
    double seconds;
} tally;

static int log_has(const char *log_path, const char *needle) {
    size_t n;
    char *t = read_file(log_path, &n);
    int has = t && strstr(t, needle) != NULL;
    free(t);
    return has;
}

static int outcome_equal(const outcome *a, const outcome *b) {
    return a->step == b->step && a->optim_t == b->optim_t && a->samples == b->samples &&
           a->tokens == b->tokens && a->numel == b->numel && a->params_crc == b->params_crc &&
           a->order_crc == b->order_crc;
}

static void run_case(const base *bases, int n_bases, family fam, uint64_t seed, int k,
                     const char *work, int keep, tally *ty) {
    rng_state = seed * 0x100000001B3ull + (uint64_t)fam * 1000003u + (uint64_t)k;
    const base *bs = &bases[rnd_below(n_bases)];
    char dir[PB], step_dir[PB], log_path[PB];
    pathf(dir, "%s/%s_%d", work, family_names[fam], k);
    remove_tree(dir);
    copy_tree(bs->dir, dir);
    const int newest = bs->steps[bs->n_steps - 1];
    pathf(step_dir, "%s/step_%08d", dir, newest);
    pathf(log_path, "%s.log", dir);
    mutation mu;
    memset(&mu, 0, sizeof mu);
    mu.expect_step = newest;
    if (fam == FAM_MANIFEST || fam == FAM_RESEALED) damage_manifest(step_dir, fam, &mu);
    else if (fam == FAM_RANKFILE) damage_rankfile(step_dir, &mu);
    else damage_latest(bs, dir, &mu);
    outcome o;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    const int code = run_child(dir, log_path, &o);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ty->seconds += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    ty->cases++;
    const char *verdict = NULL;
    if (code == -1000) ty->hangs++, verdict = "hang (killed after 10 s)";
    else if (code < 0) ty->crashes++, verdict = "crash (signal)";
    else if (code == 0) {
        const outcome *ref = NULL;
        for (int i = 0; i < bs->n_steps; i++)
            if (bs->steps[i] == mu.expect_step) ref = &bs->ref[i];
        // A manifest with a byte changed must be refused: the seal covers every byte.
        if (fam == FAM_MANIFEST && !mu.unchanged)
            ty->wrong++, verdict = "wrong success (an edited manifest accepted past its seal)";
        else if (ref && outcome_equal(&o, ref)) ty->accepted++;
        else ty->wrong++, verdict = "wrong success (accepted, not the checkpoint's state)";
    } else if (code == 4) {
        // A refusal must name the file (the manifest, the rank file, or latest and the
        // directory of the checkpoints it found none of), and an edited field.
        // (An edit that breaks the YAML itself is named by its line.)
        int named = (log_has(log_path, mu.file) || !strcmp(mu.field, "crc32c")) &&
                    (!mu.field[0] || log_has(log_path, mu.field) ||
                     log_has(log_path, "not valid YAML"));
        if (fam == FAM_LATEST) named = mu.expect_step < 0 && log_has(log_path, "step_N");
        if (named) ty->clean++;
        else ty->unnamed++, verdict = "refused without naming the file or field";
    } else {
        ty->wrong_code++;
        verdict = code == 11 ? "a fresh start over checkpoints" : "an exit code other than 4";
    }
    if (verdict || keep)
        printf("  %s case %d (seed %llu): %s: %s (exit %d)%s%s\n", family_names[fam], k,
               (unsigned long long)seed, mu.what, verdict ? verdict : "ok", code,
               keep ? "; log " : "", keep ? log_path : "");
    if (!keep) remove_tree(dir), unlink(log_path);
}

// ---- main ----

static void load_base(base *bs, const char *dir, const char *work) {
    snprintf(bs->dir, sizeof bs->dir, "%s", dir);
    bs->n_steps = list_steps(dir, bs->steps);
    if (bs->n_steps < 1) {
        fprintf(stderr, "ckpt_fuzz: %s holds no step_N directory\n", dir);
        exit(1);
    }
    for (int i = 0; i < bs->n_steps; i++) {
        // Each step resolved alone: a checkpoint.dir whose latest names it.
        char one[PB], log_path[PB], text[32];
        pathf(one, "%s/ref", work);
        char src[PB], dst[PB];
        remove_tree(one);
        mkdir(one, 0755);
        pathf(src, "%s/step_%08d", dir, bs->steps[i]);
        pathf(dst, "%s/step_%08d", one, bs->steps[i]);
        copy_tree(src, dst);
        snprintf(text, sizeof text, "step_%08d\n", bs->steps[i]);
        pathf(log_path, "%s/ref.log", work);
        char latest[PB];
        pathf(latest, "%s/latest", one);
        write_file(latest, text, strlen(text));
        int code = run_child(one, log_path, &bs->ref[i]);
        if (code != 0) {
            fprintf(stderr, "ckpt_fuzz: the undamaged %s/step_%08d does not load (exit %d, %s)\n",
                    dir, bs->steps[i], code, log_path);
            exit(1);
        }
    }
}

int main(int argc, char **argv) {
    uint64_t seed = 1;
    int cases = 100, only = -1;
    const char *work = NULL;
    base bases[8];
    int n_bases = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc) cases = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--work") && i + 1 < argc) work = argv[++i];
        else if (n_bases < 8 && work) load_base(&bases[n_bases++], argv[i], work);
        else {
            fprintf(stderr,
                    "usage: ckpt_fuzz --seed S --cases N --work DIR [--case K] CKPT_DIR...\n");
            return 2;
        }
    }
    if (!n_bases) {
        fprintf(stderr, "usage: ckpt_fuzz --seed S --cases N --work DIR [--case K] CKPT_DIR...\n");
        return 2;
    }
    int failed = 0;
    for (int f = 0; f < FAM_COUNT; f++) {
        tally ty;
        memset(&ty, 0, sizeof ty);
        for (int k = only >= 0 ? only : 0; k < (only >= 0 ? only + 1 : cases); k++)
            run_case(bases, n_bases, (family)f, seed, k, work, only >= 0, &ty);
        const int bad = ty.crashes + ty.hangs + ty.wrong + ty.unnamed + ty.wrong_code;
        printf("%s ckpt_fuzz_%s: %d cases (seed %llu): %d clean errors, %d accepted bitwise, %d "
               "crashes, %d hangs, %d wrong successes, %d unnamed, %d other exits; %.1f s\n",
               bad ? "FAIL" : "PASS", family_names[f], ty.cases, (unsigned long long)seed, ty.clean,
               ty.accepted, ty.crashes, ty.hangs, ty.wrong, ty.unnamed, ty.wrong_code, ty.seconds);
        failed += bad > 0;
    }
    return failed ? 1 : 0;
}
