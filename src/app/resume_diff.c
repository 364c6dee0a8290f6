// resume_diff.c: the resume's comparison of configs, its messages and its decision
// (resume_diff.h).
#include "app/resume_diff.h"

#include <string.h>

#include "config/config_resume.h"
#include "io/checkpoint.h"

// "--set a=1 --set b=2" for the keys of class `cls`: the values that undo those changes.
static void undo_sets(const resume_changes *l, resume_class cls, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < l->n && len + 1 < n; i++) {
        const resume_change *c = &l->items[i];
        if (c->cls != cls || !strchr(c->key, '.') || !strcmp(c->to, "(none)")) continue;
        int w = snprintf(buf + len, n - len, "%s--set %s=%s", len ? " " : "", c->key, c->from);
        if (w < 0 || (size_t)w >= n - len) { // cut short: end at the last whole one
            buf[len] = '\0';
            break;
        }
        len += (size_t)w;
    }
}

// Prints the changes of class `cls`: free ones as information, the others as warnings (allowed)
// or errors (refused).
static void print_class(const resume_changes *l, resume_class cls, int refused) {
    for (int i = 0; i < l->n; i++) {
        const resume_change *c = &l->items[i];
        if (c->cls != cls) continue;
        if (cls == RESUME_FREE)
            LOG_INFO("resume: %s %s -> %s: %s", c->key, c->from, c->to, c->effect);
        else if (!refused)
            LOG_WARN("resume: %s %s -> %s (%s; allowed by checkpoint.resume_changes): %s", c->key,
                     c->from, c->to, resume_class_name(cls), c->effect);
        else LOG_ERROR("  %s %s -> %s: %s", c->key, c->from, c->to, c->effect);
    }
}

static int count_class(const resume_changes *l, resume_class cls) {
    int n = 0;
    for (int i = 0; i < l->n; i++) n += l->items[i].cls == cls;
    return n;
}

// Prints the list and decides (this rank alone).
static tri_status decide(const char *ckpt, const run_config *cfg, const resume_changes *l) {
    const int allow = cfg->checkpoint.resume_changes == RESUME_CHANGES_ALLOW;
    const int n_guarded = count_class(l, RESUME_GUARDED), n_fixed = count_class(l, RESUME_FIXED);
    print_class(l, RESUME_FREE, 0);
    char undo[1024];
    if (n_fixed > 0) {
        print_class(l, RESUME_GUARDED, !allow);
        LOG_ERROR("cannot resume from %s: this run's model differs from the checkpoint's in %d "
                  "key%s of its shape, so the checkpoint's tensors cannot load into it:",
                  ckpt, n_fixed, n_fixed > 1 ? "s" : "");
        print_class(l, RESUME_FIXED, 1);
        undo_sets(l, RESUME_FIXED, undo, sizeof undo);
        LOG_HINT("resume it with the checkpoint's model keys (%s), or start a new model with "
                 "checkpoint.resume: none; checkpoint.resume_changes: allow cannot change a "
                 "model's shape",
                 undo);
        return TRI_ERR_CKPT;
    }
    if (n_guarded > 0 && !allow) {
        LOG_ERROR("cannot resume from %s as configured: %d guarded key%s differ%s from the "
                  "checkpoint's config, changing what the run trains:",
                  ckpt, n_guarded, n_guarded > 1 ? "s" : "", n_guarded > 1 ? "" : "s");
        print_class(l, RESUME_GUARDED, 1);
        undo_sets(l, RESUME_GUARDED, undo, sizeof undo);
        LOG_HINT("to continue the checkpoint's run, set %s back (%s); to resume with the "
                 "change%s, set checkpoint.resume_changes: allow (each is then listed as a "
                 "warning); to start afresh, checkpoint.resume: none",
                 n_guarded > 1 ? "them" : "it", undo[0] ? undo : "the checkpoint's values",
                 n_guarded > 1 ? "s" : "");
        return TRI_ERR_CONFIG;
    }
    print_class(l, RESUME_GUARDED, 0);
    return TRI_OK;
}

tri_status resume_check(const char *ckpt, const run_config *cfg, comm *cm, int world,
                        char **record_json) {
    *record_json = NULL;
    ckpt_recorded rec;
    resume_changes changes = {0};
    int mute = log_mute_if_not_rank0();
    tri_status rc = ckpt_read_recorded(ckpt, &rec);
    if (rc == TRI_OK) {
        rc = config_resume_diff(rec.config, rec.config_len, rec.manifest, rec.config_line, cfg,
                                rec.step, &changes);
        // Differences that no single key shows (the data order a checkpoint recorded) join
        // the list here, through resume_changes_add, before the decision.
        ckpt_recorded_free(&rec);
    }
    if (rc == TRI_OK) rc = decide(ckpt, cfg, &changes);
    else LOG_ERROR("could not resume from %s; nothing was written", ckpt);
    log_unmute(mute);
    if (world > 1) {
        double worst = rc;
        tri_status crc = comm_all_reduce(cm, COMM_GROUP_WORLD, &worst, 1, DTYPE_FP64,
                                         COMM_REDUCE_MAX);
        rc = crc != TRI_OK ? crc : (tri_status)(int)worst;
    }
    if (rc == TRI_OK) {
        char *list = resume_changes_json(&changes);
        size_t n = strlen(list) + 32;
        *record_json = xmalloc(n);
        snprintf(*record_json, n, ",\"resume_changes\":%s", list);
        free(list);
    }
    resume_changes_free(&changes);
    return rc;
}
