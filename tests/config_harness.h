// config_harness.h: what the config tests share: YAML files written to a fresh temp
// directory, config_load and config_resolve_world with stderr captured, and a look into the
// captured text. One test binary includes it once (the helpers are static).
#pragma once
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"

static char g_dir[256];
static int g_files;
static char *g_err; // stderr of the last captured call

// Writes `text` to a new file in the temp directory; returns its path (malloc'd).
static inline char *write_yaml(const char *text) {
    char *path = malloc(strlen(g_dir) + 32);
    sprintf(path, "%s/c%03d.yaml", g_dir, g_files++);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    return path;
}

static inline int capture_begin(void) {
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    return saved;
}

static inline void capture_end(int saved) {
    char path[300];
    snprintf(path, sizeof path, "%s/stderr.txt", g_dir);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    free(g_err);
    g_err = calloc((size_t)n + 1, 1);
    if (fread(g_err, 1, (size_t)n, f) != (size_t)n) g_err[0] = '\0';
    fclose(f);
}

static inline tri_status load_path(run_config *cfg, const char *path, int n_set, char **sets) {
    config_defaults(cfg); // as main.c does: config_load parses over the defaults
    int saved = capture_begin();
    tri_status rc = config_load(cfg, path, n_set, sets);
    capture_end(saved);
    return rc;
}

// Loads `yaml` with the given --set arguments (NULL-terminated varargs list).
static inline tri_status load_text(run_config *cfg, const char *yaml, char **sets) {
    char *path = write_yaml(yaml);
    int n = 0;
    while (sets && sets[n]) n++;
    tri_status rc = load_path(cfg, path, n, sets);
    free(path);
    return rc;
}
#define SETS(...) ((char *[]){__VA_ARGS__, NULL})

static inline tri_status resolve(run_config *cfg, int world) {
    int saved = capture_begin();
    tri_status rc = config_resolve_world(cfg, world);
    capture_end(saved);
    return rc;
}

static inline int has(const char *needle) { return g_err && strstr(g_err, needle) != NULL; }

static inline tri_status load_ok(run_config *cfg, char **sets) {
    tri_status rc = load_text(cfg, "", sets);
    if (rc != TRI_OK) printf("  (setup load failed: %s)\n", g_err);
    return rc;
}

// Makes the temp directory (/tmp/trident_NAME_XXXXXX); non-zero on failure.
static inline int harness_init(const char *name) {
    snprintf(g_dir, sizeof g_dir, "/tmp/trident_%s_XXXXXX", name);
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    return 0;
}

static inline void harness_done(void) {
    free(g_err);
    g_err = NULL;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
}
