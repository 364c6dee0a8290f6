// hf_export.c: `trident export SOURCE --format hf --out DIR` (export.h): a Hugging Face model
// directory that from_pretrained loads as it is. The tensors are written in the table's
// order, each entry read once (one entry held at a time, as every export) and cut into its HF
// tensors (hf_import.h's mapping: Llama's q|k|v and gate|up blocks are separate tensors;
// GPT-2's Conv1D weights are written transposed, a column at a time); shards are cut at
// tensor boundaries when the model passes max_shard_bytes, with model.safetensors.index.json.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/export.h"
#include "io/hf_import.h"
#include "io/run_record.h"

typedef struct {
    char name[96];
    int entry;
    int64_t row0, rows; // the entry's global rows this tensor holds
    int transpose;
    st_out_tensor out; // name, shape as HF stores it
    int shard;
} piece;

// The HF model of a source: a Hugging Face directory's own config.json (its positions and
// token ids kept), else its config's resolved model keys (model.tie_embeddings is 0 or 1).
static tri_status model_hf_config(const export_source *s, hf_config *h) {
    const model_config *mc = &s->cfg.model;
    if (s->hf) {
        *h = s->hf_cfg;
        return TRI_OK;
    }
    memset(h, 0, sizeof *h);
    h->n_layer = mc->n_layer, h->n_head = mc->n_head, h->d_model = mc->d_model;
    h->max_pos = mc->seq_len, h->vocab_size = mc->vocab_size;
    h->n_kv_head = mc->n_head, h->ffn_hidden = 4 * mc->d_model, h->tie = 1;
    h->rope_theta = 10000, h->norm_eps = 1e-5, h->bos_id = h->eos_id = -1;
    if (!strcmp(mc->arch, "gpt2")) return TRI_OK;
    TRI_ASSERT(model_arch_is_llama(mc));
    h->llama = 1, h->n_kv_head = mc->n_kv_head, h->ffn_hidden = mc->ffn_hidden;
    h->tie = mc->tie_embeddings, h->rope_theta = mc->rope_theta, h->norm_eps = mc->norm_eps;
    return TRI_OK;
}

// The HF tensors of the table, in order: an entry splits where its rows change tensor.
static piece *plan_pieces(const param_table *pt, const hf_config *h, int *n_out) {
    const int cap = pt->n_entries * 3 + 1; // an entry is at most 3 HF tensors (q|k|v)
    int n = 0;
    piece *p = xcalloc((size_t)cap, sizeof *p);
    for (int i = 0; i < pt->n_entries; i++) {
        const param_entry *e = &pt->entries[i];
        for (int64_t row = 0; row < e->global_rows;) {
            hf_src s;
            TRI_ASSERT(hf_map_row(h, e, row, &s) == 0);
            if (s.zero) break; // padded vocabulary rows are not exported
            TRI_ASSERT(n < cap);
            piece *q = &p[n++];
            snprintf(q->name, sizeof q->name, "%s", s.name);
            q->entry = i, q->row0 = row, q->rows = s.count, q->transpose = s.transpose;
            q->out.name = q->name;
            const int64_t cols = e->ndim == 2 ? e->global_cols : 0;
            q->out.shape[0] = s.transpose ? cols : s.count;
            q->out.shape[1] = s.transpose ? s.count : cols;
            row += s.count;
        }
    }
    *n_out = n;
    return p;
}

static tri_status write_index(const char *dir, const piece *p, int n, int shards, uint64_t total) {
    char path[4200], tmp[4210];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    int ok = f != NULL;
    if (ok) {
        fprintf(f, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
                (unsigned long long)total);
        for (int i = 0; i < n; i++)
            fprintf(f, "%s\n    \"%s\": \"model-%05d-of-%05d.safetensors\"", i ? "," : "",
                    p[i].name, p[i].shard + 1, shards);
        fprintf(f, "\n  }\n}\n");
        ok = !ferror(f);
        if (fclose(f) != 0) ok = 0;
    }
    if (ok && rename(tmp, path) == 0) return TRI_OK;
    LOG_ERROR("cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
    return TRI_ERR_CKPT;
}

// Copies the run's tokenizer.json (data.tokenizer, or the one its run record names) into dir,
// with a tokenizer_config.json that AutoTokenizer reads it through. Absent: nothing, said.
static tri_status copy_tokenizer(const export_source *s, const char *source, const char *dir) {
    char from[4096] = "";
    if (s->cfg.data.tokenizer) snprintf(from, sizeof from, "%s", s->cfg.data.tokenizer);
    else if (!run_record_config_string(source, "data", "tokenizer", from, sizeof from)) from[0] = 0;
    if (!from[0]) {
        printf("no tokenizer recorded with %s (data.tokenizer): %s has the model only\n", source,
               dir);
        return TRI_OK;
    }
    char to[4200], conf[4200];
    snprintf(to, sizeof to, "%s/tokenizer.json", dir);
    snprintf(conf, sizeof conf, "%s/tokenizer_config.json", dir);
    FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
    int ok = in && out;
    char buf[65536];
    size_t got;
    while (ok && (got = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, got, out) == got;
    if (in && ferror(in)) ok = 0;
    if (in) fclose(in);
    if (out && fclose(out) != 0) ok = 0;
    FILE *c = ok ? fopen(conf, "w") : NULL;
    if (c) {
        fprintf(c,
                "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n"
                "  \"model_max_length\": %d\n}\n",
                s->cfg.model.seq_len);
        ok = fclose(c) == 0;
    } else {
        ok = 0;
    }
    if (ok) return TRI_OK;
    LOG_ERROR("cannot copy the run's tokenizer %s to %s: %s", from, dir, strerror(errno));
    LOG_HINT("data.tokenizer names the tokenizer.json the run's shards were made with; check it "
             "is still there (or export without it after unsetting it)");
    return TRI_ERR_CKPT;
}

tri_status export_hf(export_source *s, const char *source, const char *dir,
                     uint64_t max_shard_bytes) {
    hf_config h;
    TRI_CHECK(model_hf_config(s, &h));
    char parent[4096]; // DIR and the directories above it, as mkdir -p
    snprintf(parent, sizeof parent, "%s", dir);
    for (char *slash = strchr(parent + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = 0;
        mkdir(parent, 0755); // an existing one is fine; a failure shows at DIR itself
        *slash = '/';
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        LOG_ERROR("cannot create %s: %s", dir, strerror(errno));
        LOG_HINT("--out names the directory to write the model into");
        return TRI_ERR_CKPT;
    }
    const param_table *pt = &s->full;
    int n = 0, shards = 1;
    piece *p = plan_pieces(pt, &h, &n);
    uint64_t in_shard = 0, total = 0;
    for (int i = 0; i < n; i++) { // greedy, as transformers' shard_checkpoint
        const uint64_t b = st_out_bytes(&p[i].out);
        if (in_shard && in_shard + b > max_shard_bytes) shards++, in_shard = 0;
        p[i].shard = shards - 1;
        in_shard += b, total += b;
    }
    // The form not written must not be left from an earlier export: from_pretrained (and
    // model.init_from) prefer model.safetensors to the index.
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir,
             shards == 1 ? "model.safetensors.index.json" : "model.safetensors");
    unlink(path);
    int64_t most = 1;
    for (int i = 0; i < pt->n_entries; i++)
        most = pt->entries[i].local_numel > most ? pt->entries[i].local_numel : most;
    float *buf = xmalloc((size_t)most * sizeof(float)), *col = NULL;
    int held = -1;
    tri_status rc = TRI_OK;
    for (int k = 0, first = 0; k < shards && rc == TRI_OK; k++) {
        int last = first;
        while (last < n && p[last].shard == k) last++;
        st_out_tensor *ts = xcalloc((size_t)(last - first) + 1, sizeof *ts);
        for (int i = first; i < last; i++) ts[i - first] = p[i].out;
        if (shards == 1) snprintf(path, sizeof path, "%s/model.safetensors", dir);
        else snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, k + 1, shards);
        st_writer w;
        rc = st_writer_open(&w, path, ts, last - first);
        free(ts);
        for (int i = first; i < last && rc == TRI_OK; i++) {
            const piece *q = &p[i];
            const param_entry *e = &pt->entries[q->entry];
            if (held != q->entry) rc = export_read_entry(s, q->entry, buf);
            held = rc == TRI_OK ? q->entry : -1;
            const int64_t gc = e->global_cols;
            if (rc == TRI_OK && !q->transpose) {
                rc = st_writer_put(&w, buf + q->row0 * gc, (size_t)(q->rows * gc));
            } else if (rc == TRI_OK) { // (out, in) -> (in, out): a column of ours per HF row
                if (!col) col = xmalloc((size_t)(most / gc + 1) * sizeof(float));
                for (int64_t c = 0; c < gc && rc == TRI_OK; c++) {
                    for (int64_t r = 0; r < q->rows; r++) col[r] = buf[(q->row0 + r) * gc + c];
                    rc = st_writer_put(&w, col, (size_t)q->rows);
                }
            }
        }
        if (w.fd >= 0 || rc == TRI_OK) {
            tri_status closed = st_writer_close(&w, rc == TRI_OK);
            rc = rc != TRI_OK ? rc : closed;
        }
        first = last;
    }
    if (rc == TRI_OK && shards > 1) rc = write_index(dir, p, n, shards, total);
    if (rc == TRI_OK) rc = hf_config_write(dir, &h);
    if (rc == TRI_OK) rc = copy_tokenizer(s, source, dir);
    if (rc == TRI_OK)
        printf("wrote %s: %d tensors, %.1f MB in %d file%s\n", dir, n, (double)total / 1e6, shards,
               shards > 1 ? "s" : "");
    free(col);
    free(buf);
    free(p);
    return rc;
}
