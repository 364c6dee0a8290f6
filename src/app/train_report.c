// train_report.c: what the console says about a run besides the numbers of a step: the
// progress fields of the step line (MFU, elapsed time, ETA) and, at the end, where the
// run's outputs are and the exact commands that use them next (sample, export, train on).
#include "app/trainer_internal.h"

#include <errno.h> // program_invocation_name
#include <math.h>
#include <string.h>
#include <sys/stat.h>

// "42s", "3:07", "1:02:03".
static void format_duration(char *buf, size_t n, double s) {
    long long t = isfinite(s) && s > 0 ? (long long)(s + 0.5) : 0;
    if (t < 60) snprintf(buf, n, "%llds", t);
    else if (t < 3600) snprintf(buf, n, "%lld:%02lld", t / 60, t % 60);
    else snprintf(buf, n, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
}

void train_progress(char *buf, size_t n, double mfu, double elapsed_s, int step, int first_step,
                    int steps) {
    char mfu_text[32] = "", elapsed[32], eta[32];
    if (isfinite(mfu)) snprintf(mfu_text, sizeof mfu_text, " | MFU %.1f%%", 100.0 * mfu);
    format_duration(elapsed, sizeof elapsed, elapsed_s);
    // The wall time per step so far (evaluations and checkpoints included) for the rest.
    const int done = step - first_step + 1;
    format_duration(eta, sizeof eta, done > 0 ? elapsed_s / done * (steps - step) : 0.0);
    snprintf(buf, n, "%s | %s elapsed, ETA %s", mfu_text, elapsed, eta);
}

// Appends `text` to out (n bytes, len used so far); returns the new length.
static size_t append(char *out, size_t len, size_t n, const char *text) {
    if (len < n) len += (size_t)snprintf(out + len, n - len, "%s", text);
    return len < n ? len : n - 1;
}

// Appends " arg" to out, in single quotes when a shell would split or expand it.
static size_t append_shell_word(char *out, size_t len, size_t n, const char *arg) {
    static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                               "_./=:,@%+-";
    const int quote = *arg == '\0' || arg[strspn(arg, safe)] != '\0';
    if (len) len = append(out, len, n, " ");
    if (quote) len = append(out, len, n, "'");
    for (const char *c = arg; *c; c++) {
        const char one[2] = {*c, '\0'};
        len = append(out, len, n, *c == '\'' ? "'\\''" : one);
    }
    if (quote) len = append(out, len, n, "'");
    return len;
}

// A command line from words, each quoted as a shell needs ("" when it does not fit in n).
static void shell_command(char *out, size_t n, const char *const *words, int count) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < count; i++) len = append_shell_word(out, len, n, words[i]);
    if (len >= n - 1) out[0] = '\0';
}

// This process's command line as a shell would take it (Linux's /proc/self/cmdline); ""
// where that cannot be read or is too long to print.
static void own_command_line(char *out, size_t n) {
    char args[8192];
    const char *words[512];
    FILE *f = fopen("/proc/self/cmdline", "rb");
    size_t got = f ? fread(args, 1, sizeof args - 1, f) : 0;
    if (f) fclose(f);
    int count = 0;
    for (size_t i = 0; i < got && got < sizeof args - 1 && count < 512; i += strlen(args + i) + 1)
        words[count++] = args + i;
    args[got] = '\0';
    if (got == 0 || got == sizeof args - 1 || count == 512) count = 0;
    shell_command(out, n, words, count);
}

void train_report_outputs(const trainer *tr, int stopped_at) {
    const run_config *cfg = tr->cfg;
    const char *out = cfg->run.out_dir, *bin = program_invocation_name;
    const int steps = cfg->train.steps, last = stopped_at >= 0 ? stopped_at : steps;
    // The final model is written at the last step only; a llama's is its final checkpoint
    // (llm.c's model.bin holds GPT-2 only), which sample reads and export does not.
    const int llama = model_arch_is_llama(&cfg->model);
    const int model = last >= steps && !llama;
    char metrics[4096];
    if (cfg->log.metrics) snprintf(metrics, sizeof metrics, "%s", cfg->log.metrics);
    else snprintf(metrics, sizeof metrics, "%s/metrics.jsonl", out);
    LOG_INFO("outputs:");
    if (model) LOG_INFO("  model        %s/model.bin", out);
    else if (llama && last >= steps) LOG_INFO("  model        the final checkpoint (below)");
    else LOG_INFO("  model        none yet (stopped at step %d of %d)", last, steps);
    LOG_INFO("  metrics      %s", metrics);
    if (cfg->log.tensorboard)
        LOG_INFO("  tensorboard  %s (tensorboard --logdir %s)", cfg->log.tensorboard,
                 cfg->log.tensorboard);
    // The last step always writes a checkpoint, and so does a stop after a trained step; a
    // run resumed at its last step wrote none.
    char ckpt[4200] = "";
    struct stat st;
    if (cfg->checkpoint.dir) snprintf(ckpt, sizeof ckpt, "%s/step_%08d", cfg->checkpoint.dir, last);
    if (ckpt[0] && stat(ckpt, &st) != 0) ckpt[0] = '\0';
    if (ckpt[0]) LOG_INFO("  checkpoint   %s", ckpt);
    else if (cfg->checkpoint.dir) LOG_INFO("  checkpoint   none at step %d", last);
    else LOG_INFO("  checkpoint   none (checkpoint.dir is null: set it to make a run resumable)");
    // sample and export read the model, or else the checkpoint (DESIGN.md "CLI").
    const char *source = model ? out : ckpt[0] ? cfg->checkpoint.dir : NULL;
    if (!source) return;

    char cmd[3600], safetensors[4200];
    snprintf(safetensors, sizeof safetensors, "%s/model.safetensors", out);
    LOG_INFO("next:");
    shell_command(cmd, sizeof cmd, (const char *[]){bin, "sample", source, "--tokens", "200"}, 5);
    if (cmd[0]) LOG_INFO("  sample       %s", cmd);
    shell_command(
        cmd, sizeof cmd,
        (const char *[]){bin, "export", source, "--format", "safetensors", "--out", safetensors},
        7);
    if (cmd[0] && !llama) LOG_INFO("  export       %s", cmd);
    own_command_line(cmd, sizeof cmd);
    // The same command resumes from the last checkpoint (with more steps after the last one);
    // a run given a checkpoint path would start from that one again, hence resume: auto.
    const char *auto_resume = strcmp(cfg->checkpoint.resume, "auto")
                                  ? " --set checkpoint.resume=auto"
                                  : "";
    const int done = last >= steps; // the run is complete: a resume trains more steps
    const int to = done ? 2 * steps : steps;
    char more[64] = "";
    if (done) snprintf(more, sizeof more, " --set train.steps=%d", to);
    if (ckpt[0] && cmd[0]) {
        LOG_INFO("  resume       %s%s%s", cmd, auto_resume, more);
        LOG_INFO("               (from %s on to step %d%s)", ckpt, to,
                 tr->li->world > 1 ? ", launched as this run was: the same mpirun or srun" : "");
    } else if (ckpt[0]) {
        LOG_INFO("  resume       the command of this run%s%s", auto_resume, more);
    }
}
