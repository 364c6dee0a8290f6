// test_env.c: the table of environment variables (src/base/env.h) is the only way src/ and
// cuda/ touch the environment, and README.md's "Environment variables" lists every entry
// (one line each, naming who reads it) and nothing else. Run from the repository root.
#include <ctype.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "testlib.h"

// Reads a whole file into a NUL-terminated buffer; NULL when it cannot.
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    buf[got] = '\0';
    return buf;
}

// ---------------------------------------------------------------------------------------
// No call that reads or writes the environment outside src/base/env.c
//
// A call is the function's name followed by '(' in code (comments and literals aside), so
// a macro that wraps getenv is caught at its definition.

static const char *const ENV_CALLS[] = {"getenv", "secure_getenv", "setenv", "unsetenv",
                                        "putenv", "clearenv",      NULL};
static int g_scanned = 0;
static char g_offenders[4096] = "";

static int is_ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

// Blanks out comments and the contents of string and character literals (newlines kept), so
// that a comment or a message naming a function is not a call of it.
static void code_only(char *t) {
    enum { CODE, LINE_COMMENT, BLOCK_COMMENT, STRING, CHAR } state = CODE;
    for (char *p = t; *p; p++) {
        switch (state) {
        case CODE:
            if (p[0] == '/' && p[1] == '/') state = LINE_COMMENT, *p = ' ';
            else if (p[0] == '/' && p[1] == '*') state = BLOCK_COMMENT, *p++ = ' ', *p = ' ';
            else if (*p == '"') state = STRING;
            else if (*p == '\'') state = CHAR;
            break;
        case LINE_COMMENT:
            if (*p == '\n') state = CODE;
            else *p = ' ';
            break;
        case BLOCK_COMMENT:
            if (p[0] == '*' && p[1] == '/') state = CODE, *p++ = ' ', *p = ' ';
            else if (*p != '\n') *p = ' ';
            break;
        case STRING:
        case CHAR:
            if (*p == '\\' && p[1] && p[1] != '\n') *p++ = ' ', *p = ' ';
            else if (*p == (state == STRING ? '"' : '\'')) state = CODE;
            else if (*p != '\n') *p = ' ';
            break;
        }
    }
}

// The first line of `text` (code only) that calls one of ENV_CALLS, or 0.
static int env_call_line(const char *text, const char **which) {
    int line = 1;
    for (const char *p = text; *p; p++) {
        if (*p == '\n') line++;
        if (p > text && is_ident(p[-1])) continue;
        for (int i = 0; ENV_CALLS[i]; i++) {
            size_t n = strlen(ENV_CALLS[i]);
            if (strncmp(p, ENV_CALLS[i], n) || is_ident(p[n])) continue;
            const char *q = p + n;
            while (*q == ' ' || *q == '\t' || *q == '\n') q++;
            if (*q == '(') return *which = ENV_CALLS[i], line;
        }
    }
    return 0;
}

static int scan_file(const char *path, const struct stat *st, int type, struct FTW *ftw) {
    (void)st, (void)ftw;
    if (type != FTW_F || !strcmp(path, "src/base/env.c")) return 0; // the table's file
    const char *dot = strrchr(path, '.');
    if (!dot ||
        (strcmp(dot, ".c") && strcmp(dot, ".h") && strcmp(dot, ".cu") && strcmp(dot, ".cuh")))
        return 0;
    char *text = read_text(path);
    if (!text) return 0;
    g_scanned++;
    code_only(text);
    const char *which = NULL;
    int line = env_call_line(text, &which);
    if (line) {
        size_t used = strlen(g_offenders);
        snprintf(g_offenders + used, sizeof g_offenders - used, " %s:%d (%s)", path, line, which);
    }
    free(text);
    return 0;
}

static void test_no_env_calls_outside_table(void) {
    nftw("src", scan_file, 16, FTW_PHYS);
    nftw("cuda", scan_file, 16, FTW_PHYS);
    TEST_CHECK(g_scanned > 50 && !g_offenders[0], "env_no_getenv_outside_table",
               "%d files scanned; the environment is read or written outside src/base/env.c "
               "(use env_get(ENV_...) and add the variable to ENV_TABLE):%s",
               g_scanned, g_offenders);
}

// ---------------------------------------------------------------------------------------
// The table itself

static void test_table_complete(void) {
    int ok = 1;
    char why[512] = "";
    for (int i = 0; i < ENV_COUNT && ok; i++) {
        const env_desc *d = &ENV_TABLE[i];
        if (!d->name || !d->values || !d->unset || !d->meaning || !d->name[0] || !d->meaning[0]) {
            snprintf(why, sizeof why, "entry %d has an empty field", i);
            ok = 0;
        }
        for (int j = 0; j < i && ok; j++)
            if (!strcmp(d->name, ENV_TABLE[j].name))
                snprintf(why, sizeof why, "%s is listed twice", d->name), ok = 0;
    }
    TEST_CHECK(ok, "env_table_complete", "%s", why);
}

// ---------------------------------------------------------------------------------------
// README.md's section lists exactly the table

static void test_readme_lists_table(void) {
    char *readme = read_text("README.md");
    if (!readme) {
        TEST_CHECK(0, "env_readme_section", "cannot read README.md (run from the repository root)");
        return;
    }
    char *sec = strstr(readme, "\n## Environment variables\n");
    TEST_CHECK(sec != NULL, "env_readme_section", "README.md has no \"## Environment variables\"");
    if (!sec) {
        free(readme);
        return;
    }
    sec++;
    char *end = strstr(sec + 3, "\n## ");
    if (end) end[1] = '\0'; // the section alone

    // Each entry: a table row "| `NAME` | KIND | ..." on one line.
    char missing[1024] = "";
    for (int i = 0; i < ENV_COUNT; i++) {
        char row[128];
        snprintf(row, sizeof row, "\n| `%s` | %s |", ENV_TABLE[i].name,
                 env_kind_name(ENV_TABLE[i].kind));
        if (!strstr(sec, row)) {
            size_t used = strlen(missing);
            snprintf(missing + used, sizeof missing - used, " %s (%s)", ENV_TABLE[i].name,
                     env_kind_name(ENV_TABLE[i].kind));
        }
    }
    TEST_CHECK(!missing[0], "env_readme_lists_every_entry",
               "README.md's \"Environment variables\" lacks a row \"| `NAME` | KIND |\" for:%s",
               missing);

    // And no row for a variable the table does not have.
    char extra[1024] = "";
    int rows = 0;
    for (char *p = strstr(sec, "\n| `"); p; p = strstr(p + 1, "\n| `")) {
        char name[128];
        if (sscanf(p, "\n| `%127[^`]`", name) != 1) continue;
        rows++;
        int known = 0;
        for (int i = 0; i < ENV_COUNT; i++) known |= !strcmp(name, ENV_TABLE[i].name);
        if (!known) {
            size_t used = strlen(extra);
            snprintf(extra + used, sizeof extra - used, " %s", name);
        }
    }
    TEST_CHECK(!extra[0] && rows == ENV_COUNT, "env_readme_lists_only_the_table",
               "%d rows for %d entries; not in ENV_TABLE:%s", rows, ENV_COUNT, extra);
    free(readme);
}

// ---------------------------------------------------------------------------------------
// The accessors

static void test_accessors(void) {
    const env_id id = ENV_TEST_CKPT_DELAY_MS; // read only when a checkpoint is written
    env_unset(id);
    int unset_ok = !env_get(id) && !env_flag(id) && env_int(id, -7) == -7;
    env_set(id, "1");
    int one_ok = env_get(id) && !strcmp(env_get(id), "1") && env_flag(id) && env_int(id, 0) == 1;
    env_set(id, "12");
    int twelve_ok = !env_flag(id) && env_int(id, 0) == 12;
    env_set(id, "true");
    int word_ok = !env_flag(id); // only "1" turns a flag on, as before the table
    env_unset(id);
    TEST_CHECK(unset_ok && one_ok && twelve_ok && word_ok && !getenv(ENV_TABLE[id].name),
               "env_accessors", "unset %d, \"1\" %d, \"12\" %d, \"true\" %d", unset_ok, one_ok,
               twelve_ok, word_ok);
}

// env_choice: the index of an exact match, the default when unset, -1 for anything else
// (TRIDENT_CUDA_ATTN, whose CUDA reader turns -1 into exit 2).
static void test_choice(void) {
    const env_id id = ENV_TRIDENT_CUDA_ATTN;
    static const char *const names[] = {"fa2", "v1"};
    env_unset(id);
    const int unset = env_choice(id, names, 2, 0);
    env_set(id, "v1");
    const int v1 = env_choice(id, names, 2, 0);
    env_set(id, "fa2");
    const int fa2 = env_choice(id, names, 2, 1);
    env_set(id, "V1");
    const int upper = env_choice(id, names, 2, 0);
    env_set(id, "");
    const int empty = env_choice(id, names, 2, 0);
    env_set(id, "fa");
    const int prefix = env_choice(id, names, 2, 0);
    env_set(id, "fa2 ");
    const int longer = env_choice(id, names, 2, 0);
    env_unset(id);
    TEST_CHECK(unset == 0 && v1 == 1 && fa2 == 0 && upper == -1 && empty == -1 && prefix == -1 &&
                   longer == -1,
               "env_choice", "unset %d, v1 %d, fa2 %d, V1 %d, \"\" %d, fa %d, \"fa2 \" %d", unset,
               v1, fa2, upper, empty, prefix, longer);
}

int main(void) {
    test_no_env_calls_outside_table();
    test_table_complete();
    test_readme_lists_table();
    test_accessors();
    test_choice();
    TEST_EXIT();
}
