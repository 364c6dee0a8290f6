// test_fuzz_rundir.c: a seeded fuzzer of `trident plan RUN_DIR`'s reader (plan_rundir_run):
// the run record (the newest {"type":"run"} line of metrics.jsonl) and timing.json. Each case
// writes a run directory from a valid pair (the fields the reader takes, in the format the
// trainer writes them, README "Predicted against measured, per stage"), damages it one way,
// decides from the format what the reader must say, and runs it in a child: exit 0, or the
// documented exit (2: no run record, 4: a damaged record or timing.json) with the file and,
// where the oracle knows it, the key named; never a signal, never past the time bound.
// Families:
//   values     one field's value replaced by a token wrong for it (refused naming the key),
//              or by one right for it (accepted)
//   keys       one field's key renamed, so that it is missing (refused naming the key)
//   structure  no metrics.jsonl, no run line, a torn record or timing.json, no timing.json
//              (accepted: nothing measured yet), another version, deep nesting, timing.json
//              of another layout, a newer damaged record after a good one, plan.stages of
//              another length than mesh.pp
//   bytes      random bytes flipped, inserted or cut in either file (accepted or refused,
//              cleanly)
//
//   build/tests/test_fuzz_rundir [--cases N] [--seed S]
//
// make test runs 150 cases per family (about 2 s); a failing case prints its seed and number.
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plan/plan.h"
#include "fuzzlib.h"
#include "testlib.h"

#define CASE_TIMEOUT_S 10

static uint64_t g_seed = 20251202, g_rng;
static char g_dir[256];
static int g_progress = -1; // the case being run: "family case\n", for main's report

static uint64_t rnd(void) { return fuzz_rnd(&g_rng); }

typedef fuzz_family family;

// The fields the reader takes: which file, the JSON key in the template, the name its
// messages give it, its kind and its valid value.
typedef enum { F_INT, F_INT0, F_NUM, F_POS, F_STR, F_TYPE, F_BOOL } field_kind;
typedef struct {
    int timing; // 0: the run record, 1: timing.json
    const char *ph, *key, *name;
    field_kind kind;
    const char *value;
} field;

static const field FIELDS[] = {
    {0, "@world@", "world", "world", F_INT, "2"},
    {0, "@tp@", "tp", "mesh.tp", F_INT, "1"},
    {0, "@pp@", "pp", "mesh.pp", F_INT, "2"},
    {0, "@mb@", "micro_batches", "micro_batches", F_INT, "8"},
    {0, "@sched@", "schedule", "config.parallel.schedule", F_STR, "\"1f1b\""},
    {0, "@vs@", "virtual_stages", "config.parallel.virtual_stages", F_INT, "1"},
    {0, "@dev@", "device", "plan.device", F_STR, "\"cpu\""},
    {0, "@cal@", "calibrated", "plan.calibrated", F_BOOL, "false"},
    {0, "@step@", "step_s", "plan.step_s", F_POS, "0.00202684"},
    {0, "@c0@", "compute_s", "plan.stages[0].compute_s", F_NUM, "0.00115364"},
    {0, "@w1@", "waits_s", "plan.stages[1].waits_s", F_NUM, "0.000198967"},
    {0, "@m1@", "comm_s", "plan.stages[1].comm_s", F_NUM, "2.15568e-05"},
    {1, "@type@", "type", "type", F_TYPE, "\"timing\""},
    {1, "@tworld@", "world", "world", F_INT, "2"},
    {1, "@tdp@", "dp", "mesh.dp", F_INT, "1"},
    {1, "@logged@", "logged_steps", "logged_steps", F_INT0, "6"},
    {1, "@from@", "from_step", "from_step", F_INT0, "3"},
    {1, "@rank1@", "pp_rank", "stages[1].pp_rank", F_INT0, "1"},
    {1, "@ranks0@", "ranks", "stages[0].ranks", F_INT, "1"},
    {1, "@tc0@", "compute_ms", "stages[0].compute_ms", F_NUM, "1.794"},
    {1, "@tw1@", "waits_ms", "stages[1].waits_ms", F_NUM, "3.439"},
    {1, "@ts1@", "compute_spread_ms", "stages[1].compute_spread_ms", F_NUM, "0.000"},
};
#define N_FIELDS (int)(sizeof FIELDS / sizeof *FIELDS)

static const char *RECORD_T =
    "{\"type\":\"run\",\"version\":\"0.1.0\",\"world\":@world@,\"mesh\":{\"tp\":@tp@,\"pp\":@pp@,"
    "\"dp\":1},\"backend\":\"cpu\",\"config\":{\"run\":{\"name\":\"tiny\"},\"parallel\":{\"tp\":1,"
    "\"pp\":2,\"dp\":1,\"virtual_stages\":@vs@,\"schedule\":@sched@}},\"micro_batches\":@mb@,"
    "\"plan\":{\"device\":@dev@,\"calibrated\":@cal@,\"step_s\":@step@,\"schedule_s\":0.00194391,"
    "\"bubble\":0.1111,\"stages\":[{\"compute_s\":@c0@,\"waits_s\":0.000851639,"
    "\"comm_s\":2.15568e-05},{\"compute_s\":0.00180631,\"waits_s\":@w1@,\"comm_s\":@m1@}]}}\n"
    "{\"type\":\"step\",\"step\":1,\"loss\":5.5,\"step_ms\":6.7}\n";
static const char *TIMING_T =
    "{\"type\":@type@,\"version\":1,\"world\":@tworld@,\"mesh\":{\"tp\":1,\"pp\":2,\"dp\":@tdp@},"
    "\"first_step\":1,\"logged_steps\":@logged@,\"median_of\":4,\"from_step\":@from@,"
    "\"to_step\":6,\"stages\":[{\"pp_rank\":0,\"ranks\":@ranks0@,\"compute_ms\":@tc0@,"
    "\"waits_ms\":4.079,\"comm_ms\":0.238,\"step_ms\":6.714,\"compute_spread_ms\":0.000},"
    "{\"pp_rank\":@rank1@,\"ranks\":1,\"compute_ms\":2.274,\"waits_ms\":@tw1@,\"comm_ms\":0.279,"
    "\"step_ms\":7.160,\"compute_spread_ms\":@ts1@}]}\n";

// The template t with every placeholder set (field `which` to `value`, or its key renamed when
// `rename`), into a malloc'ed string.
static char *fill(const char *t, int which, const char *value, int rename) {
    char *out = malloc(strlen(t) + 4096), *o = out;
    for (const char *p = t; *p;) {
        int hit = -1;
        for (int i = 0; i < N_FIELDS && hit < 0; i++)
            if (!strncmp(p, FIELDS[i].ph, strlen(FIELDS[i].ph))) hit = i;
        if (hit < 0) {
            *o++ = *p++;
            continue;
        }
        if (hit == which && rename) { // `"key":` just written becomes `"key_x":`
            char *q = o - 2;          // the key's closing quote
            memmove(q + 2, q, 2), memcpy(q, "_x", 2), o += 2;
        }
        o += sprintf(o, "%s", hit == which && value ? value : FIELDS[hit].value);
        p += strlen(FIELDS[hit].ph);
    }
    *o = 0;
    return out;
}

// A fresh run directory for case c of `fam` with the two files (NULL: left out).
static void make_dir(char *dir, size_t n, const family *fam, int c, const char *record, size_t rlen,
                     const char *timing, size_t tlen) {
    snprintf(dir, n, "%s/%s_%d", g_dir, fam->name, c);
    mkdir(dir, 0755);
    char path[600];
    if (record)
        snprintf(path, sizeof path, "%s/metrics.jsonl", dir), fuzz_write_text(path, record, rlen);
    if (timing)
        snprintf(path, sizeof path, "%s/timing.json", dir), fuzz_write_text(path, timing, tlen);
}

// Runs the reader on dir (in this process: the cases run in one child of main, whose death
// by a signal main reports with the case, kept in the progress file; a fork per case costs
// ~20 ms here); want 0, or an exit code naming `file` (metrics.jsonl or timing.json) and
// `key` (when not NULL); want -1: 0, 2 or 4, a refusal naming either file.
static void run_case(family *fam, int c, const char *dir, int want, const char *file,
                     const char *key) {
    char out[600];
    snprintf(out, sizeof out, "%s.out", dir);
    char where[64];
    const int wn = snprintf(where, sizeof where, "%-16s %8d\n", fam->name, c);
    if (pwrite(g_progress, where, (size_t)wn, 0) != wn) abort();
    fflush(stdout);
    fflush(stderr);
    const int saved = dup(2);
    FILE *o = freopen(out, "w", stderr);
    (void)o;
    plan_options po = {.top = 15};
    FILE *quiet = fopen("/dev/null", "w"), *keep = stdout;
    stdout = quiet;
    alarm(CASE_TIMEOUT_S);
    const int rc = (int)plan_rundir_run(dir, &po);
    alarm(0);
    stdout = keep;
    fclose(quiet);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char text[4096] = "";
    FILE *f = fopen(out, "r");
    if (f) {
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = 0;
        fclose(f);
    }
    fam->cases++;
    const char *why = NULL;
    char named[700] = "";
    if (file) snprintf(named, sizeof named, "%s/%s", dir, file);
    if (rc == 0 && want > 0) fam->wrong_successes++, why = "accepted a bad run directory";
    else if (rc == 0) fam->successes++;
    else if (want == 0 || (want > 0 && rc != want) || (want < 0 && rc != 2 && rc != 4))
        fam->wrong_failures++, why = "refused, or the wrong exit";
    else if (want > 0 && (!strstr(text, named) || (key && !strstr(text, key))))
        fam->wrong_failures++, why = "file or key not named";
    else if (want < 0 && !strstr(text, "metrics.jsonl") && !strstr(text, "timing.json"))
        fam->wrong_failures++, why = "no file named";
    else fam->clean_errors++;
    if (why)
        printf("FAIL %s_case_%d: %s (exit %d, expected %d naming %s %s; seed %llu)\n%s\n",
               fam->name, c, why, rc, want, file ? file : "-", key ? key : "-",
               (unsigned long long)g_seed, text);
}

static void report(const family *fam) { fuzz_report(fam, "fuzz_rundir_"); }

// Writes the pair with field `which` set to `value` (or renamed) and runs it.
static void field_case(family *fam, int c, int which, const char *value, int rename, int want) {
    char *rec = fill(RECORD_T, which, value, rename), *tim = fill(TIMING_T, which, value, rename);
    char dir[400];
    make_dir(dir, sizeof dir, fam, c, rec, strlen(rec), tim, strlen(tim));
    const field *fl = which >= 0 ? &FIELDS[which] : NULL;
    run_case(fam, c, dir, want, fl && want ? (fl->timing ? "timing.json" : "metrics.jsonl") : NULL,
             fl && want ? fl->name : NULL);
    free(rec);
    free(tim);
}

static void fuzz_values(family *fam, int cases) {
    // Wrong for every field of a kind (ints: 1 to at least 2^20, or from 0).
    static const char *const BAD_ANY[] = {"null", "[]", "{}", "\"\"", "-1", "1e999", "-1e-9"};
    static const char *const BAD_INT[] = {"1.5", "\"2\"", "true", "1e300", "-0.5"};
    static const char *const BAD_NUM[] = {"\"1\"", "true", "-2.5e3"};
    static const char *const BAD_STR[] = {"1", "true", "\"\"",
                                          "\"an-uncommonly-long-name-for-a-device-or-a-schedule-"
                                          "longer-than-any-trident-writes-at-all\""};
    static const char *const GOOD_NUM[] = {"0.5", "1e3", "12", "3.25e-4"};
    for (int c = 0; c < cases; c++) {
        const int which = (int)(rnd() % N_FIELDS);
        const field *fl = &FIELDS[which];
        const char *v = fl->value;
        int want = 4;
        const uint64_t pick = rnd();
        switch (fl->kind) {
        case F_INT:
        case F_INT0:
            v = pick % 2 ? BAD_ANY[pick / 2 % 7] : BAD_INT[pick / 2 % 5];
            if (pick % 11 == 0) v = fl->value, want = 0; // itself, written as trident does
            break;
        case F_NUM:
        case F_POS:
            v = pick % 2 ? BAD_ANY[pick / 2 % 7] : BAD_NUM[pick / 2 % 3];
            if (pick % 3 == 0) v = GOOD_NUM[pick / 3 % 4], want = 0;
            if (pick % 7 == 0) v = "0", want = fl->kind == F_POS ? 4 : 0;
            break;
        case F_STR:
            v = BAD_STR[pick % 4];
            if (pick % 5 == 0) v = "\"zb-h1\"", want = 0;
            break;
        case F_TYPE: v = pick % 2 ? "\"timings\"" : BAD_STR[pick / 2 % 4]; break;
        case F_BOOL:
            v = pick % 3 == 0 ? "true" : pick % 3 == 1 ? "1" : "\"false\"";
            want = pick % 3 == 0 ? 0 : 4;
            break;
        }
        field_case(fam, c, which, v, 0, want);
    }
}

static void fuzz_keys(family *fam, int cases) {
    for (int c = 0; c < cases; c++) field_case(fam, c, (int)(rnd() % N_FIELDS), NULL, 1, 4);
}

static void fuzz_structure(family *fam, int cases) {
    char *rec = fill(RECORD_T, -1, NULL, 0), *tim = fill(TIMING_T, -1, NULL, 0);
    const size_t rl = strlen(rec), tl = strlen(tim);
    char *buf = malloc(rl + tl + 70000);
    for (int c = 0; c < cases; c++) {
        const int kind = (int)(rnd() % 11);
        char dir[400];
        const char *first_nl = strchr(rec, '\n');
        size_t o = 0;
        switch (kind) {
        case 0: // no metrics.jsonl
            make_dir(dir, sizeof dir, fam, c, NULL, 0, tim, tl);
            run_case(fam, c, dir, 2, "metrics.jsonl", NULL);
            break;
        case 1: // no run line: the step line alone
            make_dir(dir, sizeof dir, fam, c, first_nl + 1, strlen(first_nl + 1), tim, tl);
            run_case(fam, c, dir, 2, "metrics.jsonl", NULL);
            break;
        case 2: { // a torn record: cut inside the run line
            const size_t cut = 20 + rnd() % (size_t)(first_nl - rec - 20);
            make_dir(dir, sizeof dir, fam, c, rec, cut, tim, tl);
            run_case(fam, c, dir, 4, "metrics.jsonl", NULL);
            break;
        }
        case 3: { // a torn timing.json
            const size_t cut = rnd() % (tl - 2);
            make_dir(dir, sizeof dir, fam, c, rec, rl, tim, cut);
            run_case(fam, c, dir, 4, "timing.json", NULL);
            break;
        }
        case 4: // no timing.json: the prediction alone
            make_dir(dir, sizeof dir, fam, c, rec, rl, NULL, 0);
            run_case(fam, c, dir, 0, NULL, NULL);
            break;
        case 5: { // another version of timing.json
            char *v = strstr(tim, "\"version\":1");
            o = (size_t)(v - tim) + 10;
            memcpy(buf, tim, o);
            o += (size_t)sprintf(buf + o, "%d", 2 + (int)(rnd() % 9));
            memcpy(buf + o, v + 11, strlen(v + 11) + 1), o += strlen(v + 11);
            make_dir(dir, sizeof dir, fam, c, rec, rl, buf, o);
            run_case(fam, c, dir, 4, "timing.json", "version");
            break;
        }
        case 6: { // deep nesting in either file
            const int in_timing = (int)(rnd() % 2), depth = 70 + (int)(rnd() % 30000);
            const char *src = in_timing ? tim : rec;
            o = (size_t)sprintf(buf, "{\"deep\":");
            for (int i = 0; i < depth; i++) buf[o++] = '[';
            for (int i = 0; i < depth; i++) buf[o++] = ']';
            buf[o++] = ',';
            memcpy(buf + o, src + 1, strlen(src + 1)), o += strlen(src + 1);
            if (in_timing) make_dir(dir, sizeof dir, fam, c, rec, rl, buf, o);
            else make_dir(dir, sizeof dir, fam, c, buf, o, tim, tl);
            run_case(fam, c, dir, 4, in_timing ? "timing.json" : "metrics.jsonl", NULL);
            break;
        }
        case 7: { // timing.json of another layout (pp 1 x dp 2)
            char *t = fill(TIMING_T, -1, NULL, 0), *m = strstr(t, "\"pp\":2,\"dp\":1");
            memcpy(m, "\"pp\":1,\"dp\":2", 13);
            make_dir(dir, sizeof dir, fam, c, rec, rl, t, strlen(t));
            run_case(fam, c, dir, 4, "timing.json", "mesh");
            free(t);
            break;
        }
        case 8: { // a newer run record, damaged, after a good one: the newest counts
            char *bad = fill(RECORD_T, 8, "-1", 0);
            o = (size_t)sprintf(buf, "%s%s", rec, bad);
            make_dir(dir, sizeof dir, fam, c, buf, o, tim, tl);
            run_case(fam, c, dir, 4, "metrics.jsonl", "plan.step_s");
            free(bad);
            break;
        }
        case 10: { // plan.stages of another length than mesh.pp: one stage, or a third
            const char *second = strstr(rec, "},{\"compute_s\"");
            const char *end = strstr(rec, "]}}");
            o = (size_t)(second - rec) + 1;
            memcpy(buf, rec, o);
            if (rnd() % 2) { // both, and a copy of the second: ",{...}" twice
                const size_t n = (size_t)(end - second - 1);
                memcpy(buf + o, second + 1, n), o += n;
                memcpy(buf + o, second + 1, n), o += n;
            }
            memcpy(buf + o, end, strlen(end)), o += strlen(end);
            make_dir(dir, sizeof dir, fam, c, buf, o, tim, tl);
            run_case(fam, c, dir, 4, "metrics.jsonl", "plan.stages");
            break;
        }
        case 9: { // nothing measured yet: median_of 0 and no stages
            o = (size_t)sprintf(buf,
                                "{\"type\":\"timing\",\"version\":1,\"world\":2,\"mesh\":{\"tp\":1,"
                                "\"pp\":2,\"dp\":1},\"first_step\":1,\"logged_steps\":0,"
                                "\"median_of\":0,\"from_step\":0,\"to_step\":0,\"stages\":[%s]}\n",
                                rnd() % 2 ? "" : "{\"pp_rank\":0}");
            make_dir(dir, sizeof dir, fam, c, rec, rl, buf, o);
            run_case(fam, c, dir, strstr(buf, "pp_rank") ? 4 : 0, "timing.json",
                     strstr(buf, "pp_rank") ? "stages" : NULL);
            break;
        }
        }
    }
    free(buf);
    free(rec);
    free(tim);
}

static void fuzz_bytes(family *fam, int cases) {
    char *rec = fill(RECORD_T, -1, NULL, 0), *tim = fill(TIMING_T, -1, NULL, 0);
    const size_t rl = strlen(rec), tl = strlen(tim);
    char *buf = malloc(rl + tl + 64);
    for (int c = 0; c < cases; c++) {
        const int in_timing = (int)(rnd() % 2);
        const char *src = in_timing ? tim : rec;
        size_t n = in_timing ? tl : rl;
        memcpy(buf, src, n);
        const int edits = 1 + (int)(rnd() % 4);
        for (int e = 0; e < edits && n > 2; e++) {
            const size_t at = rnd() % n;
            switch (rnd() % 3) {
            case 0: buf[at] = (char)(rnd() % 256); break;
            case 1:
                memmove(buf + at + 1, buf + at, n - at), buf[at] = (char)(rnd() % 256), n++;
                break;
            default: memmove(buf + at, buf + at + 1, n - at - 1), n--; break;
            }
        }
        char dir[400];
        if (in_timing) make_dir(dir, sizeof dir, fam, c, rec, rl, buf, n);
        else make_dir(dir, sizeof dir, fam, c, buf, n, tim, tl);
        run_case(fam, c, dir, -1, NULL, NULL);
    }
    free(buf);
    free(rec);
    free(tim);
}

int main(int argc, char **argv) {
    int cases = 150;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cases")) cases = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) g_seed = strtoull(argv[i + 1], NULL, 10);
    }
    g_rng = g_seed;
    log_init();
    snprintf(g_dir, sizeof g_dir, "/tmp/trident-fuzz-rundir-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    char progress[300];
    snprintf(progress, sizeof progress, "%s/progress", g_dir);
    g_progress = open(progress, O_RDWR | O_CREAT | O_TRUNC, 0644);
    fflush(stdout);
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) { // a crash or a hang of the child: which case
        int status;
        waitpid(pid, &status, 0);
        if (WIFSIGNALED(status)) {
            char where[64] = "";
            if (pread(g_progress, where, sizeof where - 1, 0) < 0) where[0] = 0;
            TEST_CHECK(0, "fuzz_rundir_no_signal", "%s at %s (family, case; seed %llu)",
                       WTERMSIG(status) == SIGALRM ? "hung" : strsignal(WTERMSIG(status)), where,
                       (unsigned long long)g_seed);
        }
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd)) return 1;
        if (WIFEXITED(status)) return WEXITSTATUS(status);
        TEST_EXIT();
    }
    family base = {.name = "valid"};
    field_case(&base, 0, -1, NULL, 0, 0);
    TEST_CHECK(base.successes == 1, "fuzz_rundir_valid_reads", "the valid run directory reads");
    family values = {.name = "values"}, keys = {.name = "keys"};
    family structure = {.name = "structure"}, bytes = {.name = "bytes"};
    fuzz_values(&values, cases);
    fuzz_keys(&keys, cases);
    fuzz_structure(&structure, cases);
    fuzz_bytes(&bytes, cases);
    report(&values);
    report(&keys);
    report(&structure);
    report(&bytes);
    printf("fuzz_rundir: seed %llu, %d cases per family\n", (unsigned long long)g_seed, cases);
    fflush(stdout);
    _exit(test_failures_ ? 1 : 0);
}
