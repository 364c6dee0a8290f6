// test_resume_diff.c: the resume's comparison of configs (config/config_resume.h), in process.
//   - every key of the table, changed alone, is found with its class and an effect (so a key
//     added later is compared without anyone writing a line for it);
//   - values written differently but equal are no change; unknown keys and sections and
//     unreadable values of a checkpoint are differences; a key the checkpoint lacks takes its
//     `absent` value;
//   - the effects with numbers: resharding, gradient accumulation, the LR decay's length;
//   - the run record's JSON of the list parses, values typed;
//   - README "Resuming" lists every key with its class and effect, and no other;
//   - seeded fuzz: random subsets of keys changed (the list is exactly that subset, the worst
//     class is theirs), and the recorded block's text damaged (a clean result or a clean
//     TRI_ERR_CKPT, never a crash; a bound on the time).
//
//   build/tests/test_resume_diff [--cases N] [--seed S]
//   build/tests/test_resume_diff --readme-rows    prints README "Resuming"'s rows from the table
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "config/config_keys_internal.h"
#include "config/config_resume.h"
#include "config/config_sources_internal.h"
#include "io/json.h"
#include "fuzzlib.h"
#include "testlib.h"

static uint64_t g_rng;
static uint64_t rnd(void) { return fuzz_rnd(&g_rng); }

// The block a manifest records for cfg: "config:" and the resolved config under it.
static char *block_of(const run_config *cfg, size_t *n) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fputs("config:\n", f);
    config_print_yaml(cfg, f, 2);
    fclose(f);
    *n = len;
    return text;
}

// A deep copy of a data.train / data.val value.
static void copy_sources(config_data_sources *d, const config_data_sources *s) {
    config_sources_free(d);
    d->n = s->n;
    d->listed = s->listed;
    d->items = xmalloc((size_t)s->n * sizeof *d->items);
    for (int i = 0; i < s->n; i++) {
        d->items[i].path = xstrdup(s->items[i].path);
        d->items[i].name = s->items[i].name ? xstrdup(s->items[i].name) : NULL;
        d->items[i].weight = s->items[i].weight;
    }
}

static void copy_cfg(run_config *dst, const run_config *src) {
    config_defaults(dst);
    for (int k = 0; k < K_COUNT; k++) {
        void *d = config_key_field(dst, k);
        const void *s = config_key_cfield(src, k);
        switch (CONFIG_KEYS[k].type) {
        case KT_STR:
            free(*(char **)d);
            *(char **)d = *(char *const *)s ? xstrdup(*(char *const *)s) : NULL;
            break;
        case KT_SOURCES: copy_sources(d, s); break;
        case KT_U64: *(uint64_t *)d = *(const uint64_t *)s; break;
        case KT_F64: *(double *)d = *(const double *)s; break;
        default: *(int *)d = *(const int *)s; break;
        }
    }
}

static int count_names(const char *const *names) {
    int n = 0;
    while (names[n]) n++;
    return n;
}

// Gives key k another value than it has (within its range where it has one); `salt` varies it.
static void change_key(run_config *cfg, key_id k, unsigned salt) {
    const key_desc *d = &CONFIG_KEYS[k];
    void *p = config_key_field(cfg, k);
    switch (d->type) {
    case KT_INT: {
        int v = *(int *)p, step = 1 + (int)(salt % 3);
        *(int *)p = v + step <= d->hi ? v + step : v - step;
        break;
    }
    case KT_DP: *(int *)p = *(int *)p == DP_AUTO ? 2 + (int)(salt % 3) : DP_AUTO; break;
    case KT_U64: *(uint64_t *)p += 1 + salt % 5; break;
    case KT_F64: {
        double v = *(double *)p, m = 2.0 + salt % 3;
        *(double *)p = v == 0 ? 0.5 : v * m < d->hi ? v * m : v / m;
        break;
    }
    case KT_BOOL: *(int *)p = !*(int *)p; break;
    case KT_ENUM: {
        const int n = count_names(d->names);
        *(int *)p = (*(int *)p + 1 + (int)(salt % (unsigned)(n - 1))) % n;
        break;
    }
    case KT_STR: {
        char buf[64];
        snprintf(buf, sizeof buf, "other/value_%u", salt);
        free(*(char **)p);
        *(char **)p = xstrdup(buf);
        break;
    }
    case KT_SOURCES: {
        char buf[64];
        snprintf(buf, sizeof buf, "other/value_%u_*.bin", salt);
        config_sources_set_glob(p, buf);
        break;
    }
    }
}

static tri_status diff_of(const run_config *old, const run_config *now, int step,
                          resume_changes *out) {
    size_t n;
    char *block = block_of(old, &n);
    tri_status rc = config_resume_diff(block, n, "manifest.yaml", 10, now, step, out);
    free(block);
    return rc;
}

static tri_status diff_text(const char *block, const run_config *now, resume_changes *out) {
    return config_resume_diff(block, strlen(block), "manifest.yaml", 10, now, 0, out);
}

static const resume_change *find_change(const resume_changes *l, const char *key) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->items[i].key, key)) return &l->items[i];
    return NULL;
}

// A damaged block is reported on stderr: these hold it back while the cases run.
static int hush_begin(void) {
    fflush(stderr);
    int saved = dup(2), null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    close(null);
    return saved;
}
static void hush_end(int saved) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

// ---------------------------------------------------------------------------------------

static void test_every_key(void) {
    run_config base;
    config_defaults(&base);
    config_resolve_model(&base.model); // as config_load leaves it
    int bad = 0, by_class[4] = {0};
    char why[512] = "";
    for (int k = 0; k < K_COUNT; k++) {
        run_config now;
        copy_cfg(&now, &base);
        change_key(&now, k, 0);
        resume_changes l = {0};
        tri_status rc = diff_of(&base, &now, 0, &l);
        char path[64];
        config_key_path(k, path, sizeof path);
        const resume_change *c = l.n == 1 ? &l.items[0] : NULL;
        if (rc != TRI_OK || !c || strcmp(c->key, path) || c->cls != CONFIG_KEYS[k].resume ||
            !c->effect[0] || !strcmp(c->from, c->to)) {
            if (!bad++)
                snprintf(why, sizeof why, "%s: rc %d, %d changes (first %s, class %s)", path,
                         (int)rc, l.n, l.n ? l.items[0].key : "-",
                         l.n ? resume_class_name(l.items[0].cls) : "-");
        } else {
            by_class[c->cls]++;
        }
        resume_changes_free(&l);
        config_free(&now);
    }
    TEST_CHECK(!bad, "resume_diff_every_key_changed_alone", "%d keys wrong; %s", bad, why);
    printf("# %d keys: %d free, %d guarded, %d fixed\n", K_COUNT, by_class[RESUME_FREE],
           by_class[RESUME_GUARDED], by_class[RESUME_FIXED]);
    resume_changes l = {0};
    tri_status rc = diff_of(&base, &base, 0, &l);
    TEST_CHECK(rc == TRI_OK && l.n == 0, "resume_diff_same_config_no_change", "rc %d, %d changes",
               (int)rc, l.n);
    resume_changes_free(&l);
    config_free(&base);
}

// The brief's classes: the layout, the steps, evaluation, logging, checkpoints and the system
// are free; the model's shape fixed; the optimizer, batch, data, precision and seed guarded.
static void test_classes(void) {
    static const struct {
        const char *key;
        resume_class cls;
    } want[] = {
        {"parallel.tp", RESUME_FREE},       {"parallel.dp", RESUME_FREE},
        {"train.micro_batch", RESUME_FREE}, {"train.steps", RESUME_FREE},
        {"data.eval_every", RESUME_FREE},   {"log.every", RESUME_FREE},
        {"checkpoint.every", RESUME_FREE},  {"system.threads", RESUME_FREE},
        {"run.out_dir", RESUME_FREE},       {"model.n_layer", RESUME_FIXED},
        {"model.d_model", RESUME_FIXED},    {"model.n_head", RESUME_FIXED},
        {"model.vocab_size", RESUME_FIXED}, {"optim.lr", RESUME_GUARDED},
        {"optim.beta2", RESUME_GUARDED},    {"train.global_batch", RESUME_GUARDED},
        {"data.train", RESUME_GUARDED},     {"train.precision", RESUME_GUARDED},
        {"run.seed", RESUME_GUARDED},       {"checkpoint.resume_changes", RESUME_FREE},
    };
    int bad = 0;
    char why[256] = "";
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char section[32];
        const char *dot = strchr(want[i].key, '.');
        snprintf(section, sizeof section, "%.*s", (int)(dot - want[i].key), want[i].key);
        int k = config_find_key(section, dot + 1);
        if (k < 0 || CONFIG_KEYS[k].resume != want[i].cls) {
            if (!bad++)
                snprintf(why, sizeof why, "%s is %s", want[i].key,
                         k < 0 ? "missing" : resume_class_name(CONFIG_KEYS[k].resume));
        }
    }
    TEST_CHECK(!bad, "resume_diff_classes_as_issue_16", "%s", why);
}

static void test_recorded_forms(void) {
    run_config now;
    config_defaults(&now);
    config_resolve_model(&now.model); // as config_load leaves it
    resume_changes l = {0};
    // Equal values written otherwise; a section and keys missing (the defaults).
    tri_status rc = diff_text("config:\n  optim: {lr: 1.0e-3, eps: 0.00000001}\n"
                              "  checkpoint:\n    async: yes\n  parallel:\n    dp: \"auto\"\n",
                              &now, &l);
    TEST_CHECK(rc == TRI_OK && l.n == 0, "resume_diff_equal_values_other_text",
               "rc %d, %d changes (first %s)", (int)rc, l.n, l.n ? l.items[0].key : "-");
    resume_changes_free(&l);
    rc = diff_text("config:\n  model:\n    n_layer: 4\n    future_knob: 3\n"
                   "  moe:\n    experts: 8\n  train:\n    steps: many\n    grad_clip: [1]\n"
                   "  log: 5\n  system: null\n",
                   &now, &l);
    const resume_change *knob = find_change(&l, "model.future_knob"), *moe = find_change(&l, "moe");
    const resume_change *steps = find_change(&l, "train.steps");
    const resume_change *clip = find_change(&l, "train.grad_clip"), *sec = find_change(&l, "log");
    TEST_CHECK(rc == TRI_OK && l.n == 5 && knob && knob->cls == RESUME_GUARDED && sec &&
                   sec->cls == RESUME_GUARDED && !strcmp(sec->from, "5") &&
                   !strcmp(knob->from, "3") && moe && moe->cls == RESUME_GUARDED && steps &&
                   steps->cls == RESUME_FREE && !strcmp(steps->from, "many") && clip &&
                   clip->cls == RESUME_GUARDED && !strcmp(clip->from, "(a list)"),
               "resume_diff_unknown_and_unreadable", "rc %d, %d changes", (int)rc, l.n);
    resume_changes_free(&l);
    int hushed = hush_begin();
    rc = diff_text("config:\n  - a list\n", &now, &l);
    int rc2 = diff_text("config: [unclosed\n", &now, &l);
    int rc3 = diff_text("other:\n  run: {}\n", &now, &l);
    hush_end(hushed);
    TEST_CHECK(rc == TRI_ERR_CKPT && rc2 == TRI_ERR_CKPT && rc3 == TRI_ERR_CKPT && l.n == 0,
               "resume_diff_not_a_config_block", "rc %d %d %d, %d changes", (int)rc, rc2, rc3, l.n);
    // A key a checkpoint does not record takes its `absent` text: every such text is read by
    // its key (an empty block makes every key absent).
    rc = diff_text("config:\n  run: {}\n", &now, &l);
    TEST_CHECK(rc == TRI_OK, "resume_diff_absent_keys", "rc %d", (int)rc);
    resume_changes_free(&l);
    config_free(&now);
}

static void test_effects(void) {
    run_config old, now;
    config_defaults(&old);
    config_resolve_model(&old.model); // as config_load leaves it
    old.parallel.tp = 2, old.parallel.dp = 2, old.train.steps = 600;
    copy_cfg(&now, &old);
    now.parallel.tp = 1, now.parallel.dp = 4, now.train.steps = 900, now.train.micro_batch = 2;
    resume_changes l = {0};
    tri_status rc = diff_of(&old, &now, 300, &l);
    const resume_change *tp = find_change(&l, "parallel.tp"), *dp = find_change(&l, "parallel.dp");
    const resume_change *st = find_change(&l, "train.steps");
    const resume_change *mb = find_change(&l, "train.micro_batch");
    const char *reshard = "resharded from tp2 x pp1 x dp2 to tp1 x pp1 x dp4";
    char want_steps[256];
    snprintf(want_steps, sizeof want_steps,
             "the LR decay now ends at step 900 instead of 600 (warmup unchanged); the LR of "
             "the next step (301) %.3g -> %.3g",
             optim_lr(&old.optim, 600, 300), optim_lr(&old.optim, 900, 300));
    TEST_CHECK(rc == TRI_OK && l.n == 4 && tp && !strcmp(tp->effect, reshard) && dp &&
                   !strcmp(dp->effect, reshard) && st && !strcmp(st->effect, want_steps) && mb &&
                   strstr(mb->effect, "gradient accumulation: 2 -> 4 micro-batches per step"),
               "resume_diff_effects_with_numbers", "%d changes: %s | %s | %s", l.n,
               tp ? tp->effect : "-", st ? st->effect : "-", mb ? mb->effect : "-");
    resume_changes_free(&l);
    // steps at or below the checkpoint's step, and a guarded LR key with the next step's LR
    config_free(&now);
    copy_cfg(&now, &old);
    now.train.steps = 200, now.optim.lr = 2e-3;
    rc = diff_of(&old, &now, 300, &l);
    st = find_change(&l, "train.steps");
    const resume_change *lr = find_change(&l, "optim.lr");
    TEST_CHECK(rc == TRI_OK && st && strstr(st->effect, "at step 300") &&
                   strstr(st->effect, "nothing more is trained") && lr &&
                   strstr(lr->effect, "the LR of the next step (301)") &&
                   lr->cls == RESUME_GUARDED && resume_changes_worst(&l) == RESUME_GUARDED,
               "resume_diff_effects_past_end_and_lr", "%s | %s", st ? st->effect : "-",
               lr ? lr->effect : "-");
    // the run record's JSON
    resume_changes_add(&l, "data order", RESUME_GUARDED, "plain \"order\"", "shuffled",
                       "another order of the samples");
    char *json = resume_changes_json(&l);
    json_doc *doc = json_doc_new();
    char err[256] = "";
    const json_value *v = json_parse(doc, json, strlen(json), 8, err, sizeof err);
    int ok = v && v->type == JSON_ARRAY && (int)v->u.array.n == l.n;
    for (size_t i = 0; ok && i < v->u.array.n; i++) {
        const json_value *o = v->u.array.items[i], *key = json_get(o, "key");
        const json_value *to = json_get(o, "to"), *cls = json_get(o, "class");
        ok = key && key->type == JSON_STRING && to && json_get(o, "from") && cls &&
             json_get(o, "effect");
        if (ok && !strcmp(key->u.str.s, "train.steps")) ok = to->type == JSON_NUMBER;
        if (ok && !strcmp(key->u.str.s, "data order"))
            ok = !strcmp(json_get(o, "from")->u.str.s, "plain \"order\"") &&
                 !strcmp(cls->u.str.s, "guarded");
    }
    TEST_CHECK(ok, "resume_diff_record_json", "%s: %s", err, json);
    json_doc_free(doc);
    free(json);
    resume_changes_free(&l);
    config_free(&now);
    config_free(&old);
}

// README "Resuming": a table row "| `KEY` | CLASS | EFFECT |" for every key, and no other.
static void test_readme(void) {
    FILE *f = fopen("README.md", "r");
    char line[2048];
    int in_section = 0, rows = 0, bad = 0, seen[K_COUNT] = {0};
    char why[1024] = "";
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "### Resuming", 12)) in_section = 1;
        else if (in_section && !strncmp(line, "#", 1)) break;
        if (!in_section || strncmp(line, "| `", 3)) continue;
        char key[128] = "", cls[32] = "", effect[1024] = "";
        if (sscanf(line, "| `%127[^`]` | %31[a-z] | %1023[^\n]", key, cls, effect) != 3) continue;
        size_t n = strlen(effect);
        if (n >= 2 && !strcmp(effect + n - 2, " |")) effect[n - 2] = '\0';
        rows++;
        int k = -1;
        for (int i = 0; i < K_COUNT; i++) {
            char path[64];
            if (!strcmp(config_key_path(i, path, sizeof path), key)) k = i;
        }
        if (k < 0) {
            if (!bad++) snprintf(why, sizeof why, "README names %s, which is not a key", key);
        } else if (strcmp(cls, resume_class_name(CONFIG_KEYS[k].resume)) ||
                   strcmp(effect, CONFIG_KEYS[k].effect)) {
            if (!bad++)
                snprintf(why, sizeof why,
                         "README's row of %s differs from the table: want\n| `%s` | %s | %s |", key,
                         key, resume_class_name(CONFIG_KEYS[k].resume), CONFIG_KEYS[k].effect);
        } else {
            seen[k]++;
        }
    }
    if (f) fclose(f);
    for (int k = 0; k < K_COUNT && !bad; k++) {
        if (seen[k] == 1) continue;
        char path[64];
        config_key_path(k, path, sizeof path);
        bad++;
        snprintf(why, sizeof why,
                 "README \"Resuming\" has %d rows of %s; want one:\n| `%s` | %s | %s |", seen[k],
                 path, path, resume_class_name(CONFIG_KEYS[k].resume), CONFIG_KEYS[k].effect);
    }
    TEST_CHECK(f && rows > 0 && !bad, "resume_readme_lists_every_key", "%d rows; %s", rows, why);
}

// ---- seeded fuzz ----

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Random subsets of keys changed: the list is that subset, each with its class.
static void fuzz_subsets(int cases) {
    run_config base;
    config_defaults(&base);
    config_resolve_model(&base.model); // as config_load leaves it
    base.parallel.dp = 2;
    int wrong = 0, n_changes = 0;
    char why[256] = "";
    const double t0 = now_s();
    for (int c = 0; c < cases; c++) {
        run_config now;
        copy_cfg(&now, &base);
        unsigned char pick[K_COUNT] = {0};
        resume_class worst = RESUME_UNSET;
        int want = 0;
        for (int k = 0; k < K_COUNT; k++) {
            if (rnd() % 100 >= 15) continue;
            pick[k] = 1, want++;
            change_key(&now, k, (unsigned)(rnd() % 1000));
            if (CONFIG_KEYS[k].resume > worst) worst = CONFIG_KEYS[k].resume;
        }
        resume_changes l = {0};
        tri_status rc = diff_of(&base, &now, (int)(rnd() % 3000), &l);
        int ok = rc == TRI_OK && l.n == want && resume_changes_worst(&l) == worst;
        for (int i = 0; ok && i < l.n; i++) {
            const char *dot = strchr(l.items[i].key, '.');
            char section[32];
            snprintf(section, sizeof section, "%.*s", dot ? (int)(dot - l.items[i].key) : 0,
                     l.items[i].key);
            int k = dot ? config_find_key(section, dot + 1) : -1;
            ok = k >= 0 && pick[k] && l.items[i].cls == CONFIG_KEYS[k].resume &&
                 l.items[i].effect[0];
        }
        n_changes += l.n;
        if (!ok && !wrong++)
            snprintf(why, sizeof why, "case %d: rc %d, %d changes for %d picked", c, (int)rc, l.n,
                     want);
        resume_changes_free(&l);
        config_free(&now);
    }
    config_free(&base);
    printf("# fuzz resume_subsets: %d cases, %d changes, %d wrong lists, %.2f s\n", cases,
           n_changes, wrong, now_s() - t0);
    TEST_CHECK(!wrong, "resume_fuzz_subsets", "%s", why);
}

// The recorded block damaged: bytes flipped, lines deleted, duplicated or re-indented, junk
// values. Each case ends with TRI_OK or a clean TRI_ERR_CKPT (a crash ends this process).
static void fuzz_block(int cases) {
    run_config base;
    config_defaults(&base);
    config_resolve_model(&base.model); // as config_load leaves it
    size_t n;
    char *block = block_of(&base, &n);
    int ok_cases = 0, errors = 0, other = 0;
    double worst = 0;
    const double t0 = now_s();
    const int hushed = hush_begin();
    static const char *const junk[] = {
        "[",       "{a: [", "!!binary x", "&a x", "*a",    "? x", "'",
        "\"\\u00", "-",     ": :",        "\t",   "1e999", "~",   "- [1, 2]"};
    for (int c = 0; c < cases; c++) {
        char *t = xmalloc(2 * n + 64);
        memcpy(t, block, n + 1);
        size_t len = n;
        const int edits = 1 + (int)(rnd() % 4);
        for (int e = 0; e < edits && len > 0; e++) {
            size_t at = rnd() % len;
            switch (rnd() % 5) {
            case 0: t[at] = (char)(1 + rnd() % 255); break; // a byte changed (never NUL)
            case 1: {                                       // a line deleted
                char *ls = t + at, *le = strchr(ls, '\n');
                while (ls > t && ls[-1] != '\n') ls--;
                size_t cut = le ? (size_t)(le - ls) + 1 : strlen(ls);
                memmove(ls, ls + cut, strlen(ls + cut) + 1);
                len -= cut;
                break;
            }
            case 2: { // a line duplicated
                char *ls = t + at, *le = strchr(ls, '\n');
                while (ls > t && ls[-1] != '\n') ls--;
                size_t dup = le ? (size_t)(le - ls) + 1 : strlen(ls);
                if (len + dup >= 2 * n + 32) break;
                memmove(ls + dup, ls, strlen(ls) + 1);
                len += dup;
                break;
            }
            case 3: t[at] = t[at] == ' ' ? 'x' : ' '; break; // indentation broken
            default: {                                       // a value replaced by junk
                char *colon = strchr(t + at, ':');
                if (!colon) break;
                const char *j = junk[rnd() % (sizeof junk / sizeof *junk)];
                char *le = strchr(colon, '\n');
                size_t tail = le ? strlen(le) : 0, jl = strlen(j);
                if ((size_t)(colon - t) + 2 + jl + tail >= 2 * n + 60) break;
                memmove(colon + 2 + jl, le ? le : colon + strlen(colon), tail + 1);
                colon[1] = ' ';
                memcpy(colon + 2, j, jl);
                len = strlen(t);
            }
            }
        }
        resume_changes l = {0};
        const double c0 = now_s();
        tri_status rc = config_resume_diff(t, strlen(t), "manifest.yaml", 10, &base, 0, &l);
        const double dt = now_s() - c0;
        if (dt > worst) worst = dt;
        if (rc == TRI_OK) ok_cases++;
        else if (rc == TRI_ERR_CKPT && l.n == 0) errors++;
        else other++;
        resume_changes_free(&l);
        free(t);
    }
    hush_end(hushed);
    free(block);
    config_free(&base);
    printf("# fuzz resume_block: %d cases, %d compared, %d clean errors, 0 crashes, %d wrong "
           "results, slowest %.3f s, %.2f s in all\n",
           cases, ok_cases, errors, other, worst, now_s() - t0);
    TEST_CHECK(!other && worst < 1.0, "resume_fuzz_block", "%d wrong results, slowest %.3f s",
               other, worst);
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "--readme-rows")) {
        for (int k = 0; k < K_COUNT; k++) {
            char path[64];
            printf("| `%s` | %s | %s |\n", config_key_path(k, path, sizeof path),
                   resume_class_name(CONFIG_KEYS[k].resume), CONFIG_KEYS[k].effect);
        }
        return 0;
    }
    int cases = 2000;
    uint64_t seed = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cases")) cases = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) seed = strtoull(argv[i + 1], NULL, 10);
    }
    g_rng = seed;
    log_init();
    test_every_key();
    test_classes();
    test_recorded_forms();
    test_effects();
    test_readme();
    fuzz_subsets(cases);
    fuzz_block(cases);
    printf("# seed %llu, %d cases per fuzz family\n", (unsigned long long)seed, cases);
    printf("%d passed, %d failed\n", test_passes_, test_failures_);
    TEST_EXIT();
}
