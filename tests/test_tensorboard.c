// test_tensorboard.c: the TensorBoard writer's file handling (io/tensorboard.h): a failed
// write warns once, names the file and stops the output; event file names sort after the
// files already in the directory; a directory that cannot be made fails tb_open with exit 4
// naming the key. tests/test_tensorboard.sh reads the events back with TensorBoard itself.
#include "io/tensorboard.h"
#include "config_harness.h"
#include "testlib.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

static metrics_step a_step(int step) {
    return (metrics_step){.step = step,
                          .loss = 2.5,
                          .lr = 1e-3,
                          .grad_norm = 0.5,
                          .tokens = 4096,
                          .step_ms = 10,
                          .tokens_per_s = 409600,
                          .mfu = 0.25};
}

static void test_write_failure(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/full", g_dir);
    tb_log tb;
    tri_status rc = tb_open(&tb, dir, 1);
    // The disk fills up: every later write fails with ENOSPC.
    FILE *full = fopen("/dev/full", "wb");
    int ok = rc == TRI_OK && tb.f && full;
    if (ok) {
        fclose(tb.f);
        tb.f = full;
    }
    int saved = capture_begin();
    if (ok) tb_write_step(&tb, &(metrics_step){0});
    capture_end(saved);
    TEST_CHECK(ok && !tb.f && count(g_err, "warning: log.tensorboard: cannot write") == 1 &&
                   strstr(g_err, tb.path) && strstr(g_err, "No space left on device"),
               "tb_write_failure_warns_naming_the_file", "rc %d, stderr: %s", rc, g_err);
    saved = capture_begin();
    tb_write_step(&tb, &(metrics_step){.step = 2});
    tb_write_eval(&tb, 2, NULL, 1.0);
    capture_end(saved);
    TEST_CHECK(!tb.f && g_err[0] == '\0', "tb_write_failure_stops_the_output_quietly",
               "after the failure, stderr: %s", g_err);
    tb_close(&tb);
}

static void test_names_sort_after_existing(void) {
    char dir[300], path[400];
    snprintf(dir, sizeof dir, "%s/sorted", g_dir);
    snprintf(path, sizeof path, "%s/events.out.tfevents.9999999990.otherhost", dir);
    tb_log first;
    tri_status rc = tb_open(&first, dir, 1); // makes the directory
    tb_close(&first);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    tb_log tb;
    int saved = capture_begin();
    rc = rc == TRI_OK ? tb_open(&tb, dir, 7) : rc;
    capture_end(saved);
    TEST_CHECK(rc == TRI_OK && strstr(tb.path, "/events.out.tfevents.9999999991."),
               "tb_file_name_sorts_after_the_newest", "rc %d, path %s", rc,
               rc == TRI_OK ? tb.path : "-");
    if (rc == TRI_OK) {
        tb_write_step(&tb, &(metrics_step){.step = 7});
        tb_close(&tb);
    }
}

static void test_unwritable_dir(void) {
    char file[300], dir[400];
    snprintf(file, sizeof file, "%s/a_file", g_dir);
    snprintf(dir, sizeof dir, "%s/tb", file);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    tb_log tb;
    int saved = capture_begin();
    tri_status rc = tb_open(&tb, dir, 1);
    capture_end(saved);
    TEST_CHECK(rc == TRI_ERR_CKPT && strstr(g_err, "error: log.tensorboard: cannot create") &&
                   strstr(g_err, dir) && strstr(g_err, "HINT:"),
               "tb_open_unwritable_dir_exit4", "rc %d, stderr: %s", rc, g_err);
    tb_close(&tb);
    metrics_step s = a_step(1);
    tb_write_step(&tb, &s); // a closed writer ignores writes
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/trident-test-tb-XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("FAIL tb_tmpdir: cannot create %s\n", g_dir);
        return 1;
    }
    test_write_failure();
    test_names_sort_after_existing();
    test_unwritable_dir();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", g_dir);
    TEST_EXIT();
}
