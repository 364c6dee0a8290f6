// hf_config.c: see hf_config.h.
#include "io/hf_config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/json.h"

#define CONFIG_JSON_MAX ((size_t)1 << 20)

int hf_is_model_dir(const char *path) {
    struct stat st;
    char p[4200];
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    snprintf(p, sizeof p, "%s/config.json", path);
    return stat(p, &st) == 0;
}

typedef struct {
    const char *path;
    const json_value *root;
} reader;

static tri_status missing(const reader *r, const char *key, const char *what) {
    LOG_ERROR("%s: \"%s\" %s", r->path, key, what);
    LOG_HINT("config.json is damaged or not a Hugging Face model's; write it again "
             "(save_pretrained)");
    return TRI_ERR_CKPT;
}

static tri_status refused(const reader *r, const char *key, const char *value, const char *why) {
    LOG_ERROR("%s: \"%s\" is %s: %s", r->path, key, value, why);
    LOG_HINT("trident computes GPT2LMHeadModel and LlamaForCausalLM as Hugging Face does only "
             "without this setting; start from a model that does not use it");
    return TRI_ERR_CONFIG;
}

// A positive int key (required unless def >= 0, its default).
static tri_status get_int(const reader *r, const char *key, int def, int *out) {
    const json_value *v = json_get(r->root, key);
    if (!v || v->type == JSON_NULL) {
        if (def < 0) return missing(r, key, "is missing (a positive whole number)");
        *out = def;
        return TRI_OK;
    }
    uint64_t u;
    if (!json_uint(v, INT_MAX, &u) || u == 0)
        return missing(r, key, "is not a positive whole number that fits an int");
    *out = (int)u;
    return TRI_OK;
}

// A positive finite number, default def.
static tri_status get_num(const reader *r, const char *key, double def, double *out) {
    const json_value *v = json_get(r->root, key);
    *out = def;
    if (!v || v->type == JSON_NULL) return TRI_OK;
    if (v->type != JSON_NUMBER || !(v->u.number > 0) || !isfinite(v->u.number))
        return missing(r, key, "is not a positive number");
    *out = v->u.number;
    return TRI_OK;
}

// A boolean (default def).
static tri_status get_bool(const reader *r, const char *key, int def, int *out) {
    const json_value *v = json_get(r->root, key);
    *out = def;
    if (!v || v->type == JSON_NULL) return TRI_OK;
    if (v->type != JSON_TRUE && v->type != JSON_FALSE) return missing(r, key, "is not true/false");
    *out = v->type == JSON_TRUE;
    return TRI_OK;
}

// A string key that must be one of `ok` (NULL-terminated) when present.
static tri_status want_string(const reader *r, const char *key, const char *const *ok) {
    const json_value *v = json_get(r->root, key);
    if (!v) return TRI_OK;
    if (v->type != JSON_STRING) return missing(r, key, "is not a string");
    for (int i = 0; ok[i]; i++)
        if (!strcmp(v->u.str.s, ok[i])) return TRI_OK;
    char q[160];
    snprintf(q, sizeof q, "\"%.100s\"", v->u.str.s);
    return refused(r, key, q, "trident's activation is the one this architecture defines");
}

// A key that must be absent, null or false. The message shows a scalar as it is, and an object
// by its "type" / "rope_type" (rope_scaling's), so the user sees which setting it was.
static tri_status want_unset(const reader *r, const char *key, const char *why) {
    const json_value *v = json_get(r->root, key);
    if (!v || v->type == JSON_NULL || v->type == JSON_FALSE) return TRI_OK;
    char shown[160];
    const json_value *t = json_get(v, "type");
    if (!t || t->type != JSON_STRING) t = json_get(v, "rope_type");
    if (v->type == JSON_TRUE) snprintf(shown, sizeof shown, "true");
    else if (v->type == JSON_NUMBER) snprintf(shown, sizeof shown, "%g", v->u.number);
    else if (v->type == JSON_STRING) snprintf(shown, sizeof shown, "\"%.100s\"", v->u.str.s);
    else if (t && t->type == JSON_STRING)
        snprintf(shown, sizeof shown, "an object of type \"%.100s\"", t->u.str.s);
    else snprintf(shown, sizeof shown, "%s", json_type_name(v));
    return refused(r, key, shown, why);
}

static int token_id(const reader *r, const char *key) {
    uint64_t u;
    const json_value *v = json_get(r->root, key);
    return v && json_uint(v, INT_MAX, &u) ? (int)u : -1;
}

static tri_status parse_gpt2(const reader *r, hf_config *h) {
    TRI_CHECK(get_int(r, "n_layer", -1, &h->n_layer));
    TRI_CHECK(get_int(r, "n_head", -1, &h->n_head));
    TRI_CHECK(get_int(r, "n_embd", -1, &h->d_model));
    TRI_CHECK(get_int(r, "vocab_size", -1, &h->vocab_size));
    int n_ctx = -1;
    TRI_CHECK(get_int(r, "n_ctx", 0, &n_ctx)); // older configs' name
    TRI_CHECK(get_int(r, "n_positions", n_ctx > 0 ? n_ctx : -1, &h->max_pos));
    TRI_CHECK(get_num(r, "layer_norm_epsilon", 1e-5, &h->norm_eps));
    if (h->norm_eps != 1e-5) {
        char v[64];
        snprintf(v, sizeof v, "%g", h->norm_eps);
        return refused(r, "layer_norm_epsilon", v, "trident's GPT-2 LayerNorm eps is 1e-5");
    }
    static const char *const act[] = {"gelu_new", "gelu_pytorch_tanh", NULL};
    TRI_CHECK(want_string(r, "activation_function", act));
    TRI_CHECK(get_bool(r, "tie_word_embeddings", 1, &h->tie));
    if (!h->tie) return refused(r, "tie_word_embeddings", "false", "GPT-2's LM head is wte");
    int inner = 0; // absent or null (0 here): 4 * n_embd
    TRI_CHECK(get_int(r, "n_inner", 0, &inner));
    if (inner && (int64_t)inner != 4 * (int64_t)h->d_model) {
        char v[32];
        snprintf(v, sizeof v, "%d", inner);
        return refused(r, "n_inner", v, "trident's GPT-2 MLP is 4 * n_embd wide");
    }
    TRI_CHECK(want_unset(r, "scale_attn_by_inverse_layer_idx", "trident scales by 1/sqrt(hs)"));
    TRI_CHECK(want_unset(r, "add_cross_attention", "trident has no cross-attention"));
    int scale = 1;
    TRI_CHECK(get_bool(r, "scale_attn_weights", 1, &scale));
    if (!scale) return refused(r, "scale_attn_weights", "false", "trident scales by 1/sqrt(hs)");
    // The MLP width as the summary shows it; a d_model whose 4C passes an int is refused by
    // the config's size rules (naming model.init_from), so the width saturates until then.
    h->ffn_hidden = h->d_model <= INT_MAX / 4 ? 4 * h->d_model : INT_MAX;
    h->n_kv_head = h->n_head, h->rope_theta = 10000;
    return TRI_OK;
}

static tri_status parse_llama(const reader *r, hf_config *h) {
    TRI_CHECK(get_int(r, "num_hidden_layers", -1, &h->n_layer));
    TRI_CHECK(get_int(r, "num_attention_heads", -1, &h->n_head));
    TRI_CHECK(get_int(r, "num_key_value_heads", h->n_head, &h->n_kv_head));
    TRI_CHECK(get_int(r, "hidden_size", -1, &h->d_model));
    TRI_CHECK(get_int(r, "intermediate_size", -1, &h->ffn_hidden));
    TRI_CHECK(get_int(r, "vocab_size", -1, &h->vocab_size));
    TRI_CHECK(get_int(r, "max_position_embeddings", -1, &h->max_pos));
    TRI_CHECK(get_num(r, "rms_norm_eps", 1e-6, &h->norm_eps));
    TRI_CHECK(get_num(r, "rope_theta", 10000, &h->rope_theta));
    TRI_CHECK(get_bool(r, "tie_word_embeddings", 0, &h->tie));
    static const char *const act[] = {"silu", NULL};
    TRI_CHECK(want_string(r, "hidden_act", act));
    TRI_CHECK(want_unset(r, "rope_scaling", "trident's RoPE has no scaling"));
    TRI_CHECK(want_unset(r, "attention_bias", "trident's Llama has no biases"));
    TRI_CHECK(want_unset(r, "mlp_bias", "trident's Llama has no biases"));
    TRI_CHECK(want_unset(r, "sliding_window", "trident's attention is full causal"));
    TRI_CHECK(want_unset(r, "use_sliding_window", "trident's attention is full causal"));
    if (h->n_head % h->n_kv_head) {
        char v[32];
        snprintf(v, sizeof v, "%d", h->n_kv_head);
        return refused(r, "num_key_value_heads", v, "it must divide num_attention_heads");
    }
    const json_value *hd = json_get(r->root, "head_dim");
    uint64_t u = 0;
    if (hd && hd->type != JSON_NULL &&
        (!json_uint(hd, INT_MAX, &u) || (int64_t)u * h->n_head != h->d_model)) {
        char v[32];
        snprintf(v, sizeof v, "%llu", (unsigned long long)u);
        return refused(r, "head_dim", v,
                       "trident's head size is hidden_size / num_attention_heads");
    }
    return TRI_OK;
}

tri_status hf_config_parse(hf_config *h, const char *path, const char *text, size_t n) {
    memset(h, 0, sizeof *h);
    json_doc *doc = json_doc_new();
    char err[256];
    reader r = {.path = path, .root = json_parse(doc, text, n, 32, err, sizeof err)};
    tri_status rc = TRI_OK;
    if (!r.root || r.root->type != JSON_OBJECT) {
        LOG_ERROR("%s: not a JSON object: %s", path, r.root ? json_type_name(r.root) : err);
        LOG_HINT("config.json is damaged; write the model again (save_pretrained)");
        json_doc_free(doc);
        return TRI_ERR_CKPT;
    }
    const json_value *mt = json_get(r.root, "model_type");
    if (!mt || mt->type != JSON_STRING) {
        rc = missing(&r, "model_type", "is missing (\"gpt2\" or \"llama\")");
    } else if (!strcmp(mt->u.str.s, "gpt2")) {
        rc = parse_gpt2(&r, h);
    } else if (!strcmp(mt->u.str.s, "llama")) {
        h->llama = 1;
        rc = parse_llama(&r, h);
    } else {
        char q[160];
        snprintf(q, sizeof q, "\"%.100s\"", mt->u.str.s);
        rc = refused(&r, "model_type", q, "trident reads GPT2LMHeadModel and LlamaForCausalLM");
    }
    if (rc == TRI_OK && h->d_model % h->n_head) {
        char v[32];
        snprintf(v, sizeof v, "%d", h->n_head);
        rc = refused(&r, h->llama ? "num_attention_heads" : "n_head", v,
                     "it must divide the hidden size");
    }
    h->bos_id = token_id(&r, "bos_token_id"), h->eos_id = token_id(&r, "eos_token_id");
    json_doc_free(doc);
    return rc;
}

tri_status hf_config_read(hf_config *h, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (size_t)st.st_size > CONFIG_JSON_MAX) {
        LOG_ERROR("cannot read %s: %s", path,
                  fd < 0 ? strerror(errno) : "not a regular file of at most 1 MiB");
        LOG_HINT("model.init_from names a Hugging Face model directory (save_pretrained's)");
        if (fd >= 0) close(fd);
        return TRI_ERR_CKPT;
    }
    char *text = xmalloc((size_t)st.st_size + 1);
    ssize_t got = read(fd, text, (size_t)st.st_size);
    close(fd);
    tri_status rc;
    if (got != st.st_size) {
        LOG_ERROR("cannot read %s: %s", path, got < 0 ? strerror(errno) : "short read");
        rc = TRI_ERR_CKPT;
    } else {
        rc = hf_config_parse(h, path, text, (size_t)got);
    }
    free(text);
    return rc;
}

int hf_config_sets(const hf_config *h, char sets[][96], int max) {
    int n = 0;
#define SET(...)                                                                                   \
    do {                                                                                           \
        TRI_ASSERT(n < max);                                                                       \
        snprintf(sets[n++], 96, __VA_ARGS__);                                                      \
    } while (0)
    SET("model.arch=%s", h->llama ? "llama" : "gpt2");
    SET("model.n_layer=%d", h->n_layer);
    SET("model.n_head=%d", h->n_head);
    SET("model.d_model=%d", h->d_model);
    SET("model.vocab_size=%d", h->vocab_size);
    if (h->llama) { // the Llama keys (model_config.h); tie_embeddings is a bool key
        char num[40];
        SET("model.n_kv_head=%d", h->n_kv_head);
        SET("model.ffn_hidden=%d", h->ffn_hidden);
        SET("model.tie_embeddings=%s", h->tie ? "true" : "false");
        config_format_double(h->rope_theta, num, sizeof num);
        SET("model.rope_theta=%s", num);
        config_format_double(h->norm_eps, num, sizeof num);
        SET("model.norm_eps=%s", num);
    }
#undef SET
    return n;
}

// Whether two YAML value texts mean the same value: numbers (true/false as 1/0) by value,
// strings without their quotes.
static double as_number(const char *s, int *ok) {
    if (!strcmp(s, "true")) return *ok = 1, 1;
    if (!strcmp(s, "false")) return *ok = 1, 0;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    *ok = end != s && *end == 0 && errno == 0;
    return v;
}
static int same_value(const char *a, const char *b) {
    int oa, ob;
    const double x = as_number(a, &oa), y = as_number(b, &ob);
    if (oa && ob) return x == y;
    size_t la = strlen(a), lb = strlen(b);
    if (la >= 2 && a[0] == '"') a++, la -= 2;
    if (lb >= 2 && b[0] == '"') b++, lb -= 2;
    return la == lb && !strncmp(a, b, la);
}

tri_status hf_config_load(run_config *cfg, const char *path, int n_set, char **sets) {
    TRI_CHECK(config_load(cfg, path, n_set, sets));
    if (!cfg->model.init_from || !hf_is_model_dir(cfg->model.init_from)) return TRI_OK;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", cfg->model.init_from);
    hf_config h;
    tri_status rc = hf_config_read(&h, dir);
    char hf_sets[HF_SETS_MAX][96];
    const int n_hf = rc == TRI_OK ? hf_config_sets(&h, hf_sets, HF_SETS_MAX) : 0;
    char changed[1024] = "";
    size_t used = 0;
    int conflicts = 0;
    for (int i = 0; i < n_hf; i++) {
        char *eq = strchr(hf_sets[i], '=');
        *eq = 0;
        int given = 0;
        char *now = config_key_value(cfg, hf_sets[i], &given);
        TRI_ASSERT(now); // hf_config_sets names keys of the key table only
        if (!same_value(now, eq + 1)) {
            if (given) {
                LOG_ERROR("%s: %s is %s in the config but %s in %s/config.json", path, hf_sets[i],
                          now, eq + 1, dir);
                rc = TRI_ERR_CONFIG, conflicts++;
            } else if (used < sizeof changed - 200) {
                used += (size_t)snprintf(changed + used, sizeof changed - used, "%s%s %s -> %s",
                                         used ? ", " : "", hf_sets[i], now, eq + 1);
            }
        }
        free(now);
        *eq = '=';
    }
    if (conflicts)
        LOG_HINT("drop those model keys from the config (model.init_from's config.json sets the "
                 "architecture) or start from another model");
    if (rc == TRI_OK && cfg->model.seq_len > h.max_pos) {
        LOG_ERROR("%s: model.seq_len is %d, but %s/config.json's model has %d positions (%s)", path,
                  cfg->model.seq_len, dir, h.max_pos,
                  h.llama ? "max_position_embeddings" : "n_positions");
        LOG_HINT("set model.seq_len to at most %d", h.max_pos);
        rc = TRI_ERR_CONFIG;
    }
    if (rc != TRI_OK) {
        config_free(cfg);
        return rc;
    }
    if (used) LOG_INFO("model.init_from %s: config.json sets %s", dir, changed);
    // Load again with config.json's keys after the user's overrides: every rule of the config
    // (tp divides the heads, the size limits, ...) then sees the model that will be built.
    char **all = xcalloc((size_t)(n_set + n_hf) + 1, sizeof *all);
    for (int i = 0; i < n_set; i++) all[i] = sets[i];
    for (int i = 0; i < n_hf; i++) all[n_set + i] = hf_sets[i];
    config_free(cfg);
    config_defaults(cfg);
    rc = config_load(cfg, path, n_set + n_hf, all);
    free(all);
    if (rc != TRI_OK) { // a "--set model.KEY" above that the user did not type is config.json's
        LOG_ERROR("%s/config.json (model.init_from) gives a model trident cannot build: its values "
                  "are the --set model.* lines above",
                  dir);
        LOG_HINT("start from another model, or change that key in a copy of the directory's "
                 "config.json and weights");
    }
    return rc;
}

// Writes text to dir/name through name.tmp and a rename.
static tri_status write_text(const char *dir, const char *name, const char *text) {
    char path[4200], tmp[4210];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fputs(text, f) >= 0;
    if (f && fclose(f) != 0) ok = 0;
    if (ok && rename(tmp, path) == 0) return TRI_OK;
    LOG_ERROR("cannot write %s: %s", path, strerror(errno));
    LOG_HINT("check free space and permissions where --out points");
    unlink(tmp);
    return TRI_ERR_CKPT;
}

tri_status hf_config_write(const char *dir, const hf_config *h) {
    char text[2048], gen[256], theta[40], eps[40], ids[96] = "";
    if (h->bos_id >= 0 && h->eos_id >= 0)
        snprintf(ids, sizeof ids, "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n", h->bos_id,
                 h->eos_id);
    config_format_double(h->rope_theta, theta, sizeof theta);
    config_format_double(h->norm_eps, eps, sizeof eps);
    if (h->llama)
        snprintf(text, sizeof text,
                 "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
                 "%s  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n"
                 "  \"intermediate_size\": %d,\n  \"max_position_embeddings\": %d,\n"
                 "  \"num_attention_heads\": %d,\n  \"num_hidden_layers\": %d,\n"
                 "  \"num_key_value_heads\": %d,\n  \"rms_norm_eps\": %s,\n"
                 "  \"rope_scaling\": null,\n  \"rope_theta\": %s,\n  \"attention_bias\": false,\n"
                 "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"float32\",\n"
                 "  \"vocab_size\": %d\n}\n",
                 ids, h->d_model, h->ffn_hidden, h->max_pos, h->n_head, h->n_layer, h->n_kv_head,
                 eps, theta, h->tie ? "true" : "false", h->vocab_size);
    else
        snprintf(text, sizeof text,
                 "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                 "%s  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                 "  \"n_embd\": %d,\n  \"n_head\": %d,\n  \"n_inner\": null,\n  \"n_layer\": %d,\n"
                 "  \"n_positions\": %d,\n  \"tie_word_embeddings\": true,\n"
                 "  \"torch_dtype\": \"float32\",\n  \"vocab_size\": %d\n}\n",
                 ids, h->d_model, h->n_head, h->n_layer, h->max_pos, h->vocab_size);
    snprintf(gen, sizeof gen, "{\n%s  \"do_sample\": true\n}\n", ids);
    TRI_CHECK(write_text(dir, "config.json", text));
    return write_text(dir, "generation_config.json", gen);
}
