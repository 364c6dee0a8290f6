// config_resume.c: the config a checkpoint recorded, read back over the defaults, and its
// differences from the resuming run's config, key by key through the key table
// (config_resume.h). The effects of most keys are the table's text; the layout, the batch
// and the schedule keys add their numbers here.
#include "config/config_resume.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "base/yaml_limit.h"
#include "config/config_print_internal.h"
#include "config/config_sources_internal.h"
#include "config/config_values_internal.h"

// ---------------------------------------------------------------------------------------
// The list

static void add_change(resume_changes *l, const char *key, resume_class cls, char *from, char *to,
                       char *from_json, char *to_json, char *effect) {
    l->items = xgrow(l->items, l->n, &l->cap, sizeof *l->items);
    l->items[l->n++] = (resume_change){.key = xstrdup(key),
                                       .from = from,
                                       .to = to,
                                       .from_json = from_json,
                                       .to_json = to_json,
                                       .cls = cls,
                                       .effect = effect};
}

void resume_changes_add(resume_changes *l, const char *key, resume_class cls, const char *from,
                        const char *to, const char *effect) {
    add_change(l, key, cls, xstrdup(from), xstrdup(to), config_quoted(from), config_quoted(to),
               xstrdup(effect));
}

void resume_changes_free(resume_changes *l) {
    for (int i = 0; i < l->n; i++) {
        resume_change *c = &l->items[i];
        free(c->key), free(c->from), free(c->to), free(c->from_json), free(c->to_json);
        free(c->effect);
    }
    free(l->items);
    memset(l, 0, sizeof *l);
}

resume_class resume_changes_worst(const resume_changes *l) {
    resume_class worst = RESUME_UNSET;
    for (int i = 0; i < l->n; i++)
        if (l->items[i].cls > worst) worst = l->items[i].cls;
    return worst;
}

char *resume_changes_json(const resume_changes *l) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) tri_out_of_host_memory(0, "the run record's resume changes");
    fputc('[', f);
    for (int i = 0; i < l->n; i++) {
        const resume_change *c = &l->items[i];
        char *key = config_quoted(c->key), *effect = config_quoted(c->effect);
        fprintf(f, "%s{\"key\":%s,\"from\":%s,\"to\":%s,\"class\":\"%s\",\"effect\":%s}",
                i ? "," : "", key, c->from_json, c->to_json, resume_class_name(c->cls), effect);
        free(key), free(effect);
    }
    fputc(']', f);
    fclose(f);
    return text;
}

const char *resume_class_name(resume_class c) {
    switch (c) {
    case RESUME_FREE: return "free";
    case RESUME_GUARDED: return "guarded";
    case RESUME_FIXED: return "fixed";
    case RESUME_UNSET: break;
    }
    return "unset";
}

// ---------------------------------------------------------------------------------------
// The recorded config

// What reading the recorded block found besides the values.
typedef struct {
    unsigned char present[K_COUNT];
    char *unreadable[K_COUNT]; // the recorded text of a value this trident cannot read
    resume_changes unknown;    // keys and sections this trident does not have
} recorded_info;

// A value of the block as text for a message: its scalar, or what kind of node it is.
static const char *node_text(const yaml_node_t *n) {
    if (n->type == YAML_SCALAR_NODE) return (const char *)n->data.scalar.value;
    return n->type == YAML_MAPPING_NODE ? "(a mapping)" : "(a list)";
}

static void add_unknown(recorded_info *info, const char *path, const yaml_node_t *val,
                        const char *what) {
    char effect[160];
    snprintf(effect, sizeof effect,
             "the checkpoint was trained with a setting this trident does not have (%s), which "
             "cannot be kept",
             what);
    resume_changes_add(&info->unknown, path, RESUME_GUARDED, node_text(val), "(none)", effect);
}

static void read_section(yaml_document_t *doc, const config_tags *tags, const char *section,
                         yaml_node_t *map, run_config *cfg, recorded_info *info) {
    config_ctx c;
    config_ctx_init(&c, "checkpoint", NULL);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *key = yaml_document_get_node(doc, p->key);
        yaml_node_t *val = yaml_document_get_node(doc, p->value);
        if (!key || !val || key->type != YAML_SCALAR_NODE) continue;
        const char *name = (const char *)key->data.scalar.value;
        const int k = config_find_key(section, name);
        if (k < 0) {
            char path[256];
            snprintf(path, sizeof path, "%s.%.200s", section, name);
            add_unknown(info, path, val, "an unknown key");
            continue;
        }
        if (info->present[k]) continue; // a duplicate: the first one counts, as in a config
        info->present[k] = 1;
        config_set_node(&c, cfg, doc, val, tags, k,
                        (config_loc){(int)val->start_mark.line + 1, -1});
        if (c.bad[k]) info->unreadable[k] = xstrdup(node_text(val));
    }
    config_report_discard(&c, NULL, 0); // what was wrong is in info
}

// Parses the block `config:` -> sections -> keys over the defaults into cfg.
static tri_status read_recorded(const char *text, size_t n, const char *origin, int first_line,
                                run_config *cfg, recorded_info *info) {
    config_tags tags = {0};
    size_t deep_line = 0;
    if (ylimit_scan((const unsigned char *)text, n, YLIMIT_MAX_DEPTH, &deep_line,
                    config_tags_collect, &tags)) {
        config_tags_free(&tags);
        LOG_ERROR("checkpoint %s:%zu: config: nested deeper than %d levels", origin,
                  deep_line + (size_t)first_line - 1, YLIMIT_MAX_DEPTH);
        return TRI_ERR_CKPT;
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) tri_out_of_host_memory(0, "a YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, n);
    tri_status rc = TRI_ERR_CKPT;
    if (!yaml_parser_load(&parser, &doc)) {
        LOG_ERROR("checkpoint %s:%zu: config: not valid YAML: %s", origin,
                  parser.problem_mark.line + (size_t)first_line,
                  parser.problem ? parser.problem : "unreadable");
    } else {
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        yaml_node_t *sections = NULL;
        if (root && root->type == YAML_MAPPING_NODE &&
            root->data.mapping.pairs.top - root->data.mapping.pairs.start == 1) {
            yaml_node_t *k = yaml_document_get_node(&doc, root->data.mapping.pairs.start->key);
            if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, "config"))
                sections = yaml_document_get_node(&doc, root->data.mapping.pairs.start->value);
        }
        if (!sections || sections->type != YAML_MAPPING_NODE) {
            LOG_ERROR("checkpoint %s:%d: config: not a mapping of sections", origin, first_line);
        } else {
            rc = TRI_OK;
            for (yaml_node_pair_t *p = sections->data.mapping.pairs.start;
                 p < sections->data.mapping.pairs.top; p++) {
                yaml_node_t *key = yaml_document_get_node(&doc, p->key);
                yaml_node_t *val = yaml_document_get_node(&doc, p->value);
                if (!key || !val || key->type != YAML_SCALAR_NODE) continue;
                const char *name = (const char *)key->data.scalar.value;
                const int known = config_section_first_key(name) >= 0;
                const scalar_view v = config_view_of(val, &tags);
                char path[128];
                snprintf(path, sizeof path, "%.100s", name);
                if (known && val->type == YAML_MAPPING_NODE)
                    read_section(&doc, &tags, name, val, cfg, info);
                else if (!known) add_unknown(info, path, val, "an unknown section");
                else if (val->type != YAML_SCALAR_NODE || !config_is_null(&v)) // null: empty
                    add_unknown(info, path, val, "a section that is not a mapping of keys");
            }
        }
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    config_tags_free(&tags);
    return rc;
}

// Keys the block does not hold: the behaviour before them (`absent`), else the default.
static void fill_absent(run_config *cfg, const recorded_info *info) {
    for (int k = 0; k < K_COUNT; k++) {
        const char *a = CONFIG_KEYS[k].absent;
        if (info->present[k] || !a) continue;
        config_ctx c;
        config_ctx_init(&c, "absent", NULL);
        scalar_view v = {.type = YAML_SCALAR_NODE, .text = a, .len = strlen(a)};
        config_set_value(&c, cfg, k, &v, (config_loc){0, -1});
        TRI_ASSERT(!c.bad[k]); // the table's own text
        config_report_discard(&c, NULL, 0);
    }
}

// ---------------------------------------------------------------------------------------
// Effects

static char *textf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *textf(const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return xstrdup(buf);
}

static void layout_text(const run_config *c, char *buf, size_t n) {
    char dp[16];
    if (c->parallel.dp == DP_AUTO) snprintf(dp, sizeof dp, "auto");
    else snprintf(dp, sizeof dp, "%d", c->parallel.dp);
    snprintf(buf, n, "tp%d x pp%d x dp%s", c->parallel.tp, c->parallel.pp, dp);
    if (c->parallel.virtual_stages > 1)
        snprintf(buf + strlen(buf), n - strlen(buf), " (%d virtual stages)",
                 c->parallel.virtual_stages);
}

// Micro-batches per step and replica, 0 while dp is not resolved.
static int micro_per_step(const run_config *c) {
    const int dp = c->parallel.dp;
    return dp > 0 && c->train.micro_batch > 0 ? c->train.global_batch / (c->train.micro_batch * dp)
                                              : 0;
}

// The learning rate of step `step` (0-based) under the recorded schedule with only key k
// set to its new value: what this one change does to the next step's rate.
static double lr_with(const run_config *old, const run_config *now, key_id k, int step) {
    optim_config oc = old->optim;
    int steps = old->train.steps;
    switch (k) {
    case K_OPT_LR: oc.lr = now->optim.lr; break;
    case K_OPT_MIN_LR: oc.min_lr = now->optim.min_lr; break;
    case K_OPT_WARMUP_STEPS: oc.warmup_steps = now->optim.warmup_steps; break;
    case K_OPT_DECAY: oc.decay = now->optim.decay; break;
    case K_TRAIN_STEPS: steps = now->train.steps; break;
    default: break;
    }
    return optim_lr(&oc, steps, step);
}

// What changing key k from old's value to now's does (k's value differs).
static char *effect_of(key_id k, const run_config *old, const run_config *now, int step) {
    const char *table = CONFIG_KEYS[k].effect;
    char a[96], b[96];
    switch (k) {
    case K_PAR_TP:
    case K_PAR_PP:
    case K_PAR_DP:
    case K_PAR_VIRTUAL_STAGES:
        layout_text(old, a, sizeof a);
        layout_text(now, b, sizeof b);
        return textf("resharded from %s to %s", a, b);
    case K_TRAIN_MICRO_BATCH: {
        const int m0 = micro_per_step(old), m1 = micro_per_step(now);
        if (m0 > 0 && m1 > 0)
            return textf("gradient accumulation: %d -> %d micro-batches per step and replica "
                         "(the same global batch)",
                         m0, m1);
        return xstrdup(table);
    }
    case K_TRAIN_GLOBAL_BATCH: {
        const long long t0 = (long long)old->train.global_batch * old->model.seq_len;
        const long long t1 = (long long)now->train.global_batch * now->model.seq_len;
        return textf("each step takes %d sequences instead of %d (%lld tokens instead of %lld): "
                     "the gradient's noise and the data per step change; the data goes on at "
                     "the checkpoint's sample",
                     now->train.global_batch, old->train.global_batch, t1, t0);
    }
    default: break;
    }
    const int lr_key = k == K_TRAIN_STEPS || k == K_OPT_LR || k == K_OPT_MIN_LR ||
                       k == K_OPT_WARMUP_STEPS || k == K_OPT_DECAY;
    if (!lr_key) return xstrdup(table);
    char head[512];
    if (k == K_TRAIN_STEPS && now->train.steps <= step)
        return textf("the checkpoint is at step %d, which is already the end of a %d-step run: "
                     "nothing more is trained",
                     step, now->train.steps);
    if (k == K_TRAIN_STEPS && now->optim.decay != DECAY_CONSTANT)
        snprintf(head, sizeof head,
                 "the LR decay now ends at step %d instead of %d (warmup "
                 "unchanged)",
                 now->train.steps, old->train.steps);
    else if (k == K_TRAIN_STEPS)
        snprintf(head, sizeof head,
                 "training now ends at step %d instead of %d (constant LR "
                 "after the warmup)",
                 now->train.steps, old->train.steps);
    else snprintf(head, sizeof head, "%s", table);
    const double lr0 = optim_lr(&old->optim, old->train.steps, step);
    const double lr1 = lr_with(old, now, k, step);
    if (step >= old->train.steps || lr0 == lr1) return xstrdup(head);
    return textf("%s; the LR of the next step (%d) %.3g -> %.3g", head, step + 1, lr0, lr1);
}

// ---------------------------------------------------------------------------------------
// The diff

tri_status config_resume_diff(const char *recorded, size_t n, const char *origin, int first_line,
                              const run_config *now, int ckpt_step, resume_changes *out) {
    run_config old;
    config_defaults(&old);
    recorded_info info;
    memset(&info, 0, sizeof info);
    tri_status rc = read_recorded(recorded, n, origin, first_line, &old, &info);
    if (rc == TRI_OK) fill_absent(&old, &info);
    config_resolve_model(&old.model); // a manifest from before the rule keys: their rule
    for (int k = 0; k < K_COUNT && rc == TRI_OK; k++) {
        const key_desc *d = &CONFIG_KEYS[k];
        TRI_ASSERT(d->resume != RESUME_UNSET); // tests/test_config.c checks every key
        char path[64];
        config_key_path(k, path, sizeof path);
        if (info.unreadable[k]) {
            char *to = config_value_text(now, k, 0);
            resume_changes_add(out, path, d->resume, info.unreadable[k], to,
                               "this trident cannot read the checkpoint's value, so it cannot "
                               "be kept");
            free(to);
            continue;
        }
        char *from = config_value_text(&old, k, 0), *to = config_value_text(now, k, 0);
        if (!strcmp(from, to)) {
            free(from), free(to);
            continue;
        }
        add_change(out, path, d->resume, from, to, config_value_text(&old, k, 1),
                   config_value_text(now, k, 1), effect_of(k, &old, now, ckpt_step));
    }
    for (int i = 0; i < info.unknown.n && rc == TRI_OK; i++) { // moved over, not copied
        out->items = xgrow(out->items, out->n, &out->cap, sizeof *out->items);
        out->items[out->n++] = info.unknown.items[i];
        memset(&info.unknown.items[i], 0, sizeof info.unknown.items[i]);
    }
    resume_changes_free(&info.unknown);
    for (int k = 0; k < K_COUNT; k++) free(info.unreadable[k]);
    config_free(&old);
    return rc;
}
