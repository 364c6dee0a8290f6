// test_hf_map: the Hugging Face name mapping (io/hf_import.h) and the safetensors reader
// (io/safetensors.h) without transformers:
//   - Llama's fused entries (the contract's qkvw rows q | k | v, fcw rows gate | up) split
//     over tp 1, 2 and 4 as the contract places them map to the HF row ranges worked out by
//     hand below (q_proj, k_proj, v_proj, gate_proj, up_proj); the embedding's padded rows
//     map to zeros; GPT-2's Conv1D weights are transposed, its biases not;
//   - a file written by st_writer reads back by st_read_block for every block shape through
//     stagings of 1, 3 and 64 values (the three read paths), and BF16/F16 values widen exactly.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bf16.h"
#include "io/hf_import.h"
#include "io/safetensors.h"
#include "testlib.h"

// The contract's tp placement of a fused entry whose row blocks are `rows[0..n)` (each split
// over tp by rows): local row `lr` of rank `r` -> the global row.
static int64_t contract_global_row(const int64_t *rows, int n, int tp, int r, int64_t lr) {
    int64_t first = 0;
    for (int k = 0; k < n; k++) {
        const int64_t per = rows[k] / tp;
        if (lr < per) return first + r * per + lr;
        lr -= per, first += rows[k];
    }
    return -1;
}

// Rank r's pieces: "name:hf_row0+rows@local_row0 ..." of entry e (n blocks `rows`).
static void pieces(const hf_config *h, const param_entry *e, const int64_t *rows, int n, int tp,
                   int r, char *out, size_t cap) {
    int64_t local = 0;
    for (int k = 0; k < n; k++) local += rows[k] / tp;
    size_t used = 0;
    out[0] = 0;
    for (int64_t lr = 0; lr < local;) {
        hf_src s;
        const int64_t g = contract_global_row(rows, n, tp, r, lr);
        if (hf_map_row(h, e, g, &s) != 0) {
            snprintf(out, cap, "unmapped");
            return;
        }
        int64_t m = 1;
        while (lr + m < local && m < s.count &&
               contract_global_row(rows, n, tp, r, lr + m) == g + m)
            m++;
        used += (size_t)snprintf(out + used, cap - used, "%s%s:%lld+%lld@%lld", used ? " " : "",
                                 s.name + strlen("model.layers.0."), (long long)s.row, (long long)m,
                                 (long long)lr);
        lr += m;
    }
}

static param_entry entry(const char *name, int64_t rows, int64_t cols) {
    param_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.name, sizeof e.name, "%s", name);
    e.ndim = cols > 1 ? 2 : 1;
    e.global_rows = rows, e.global_cols = cols;
    return e;
}

static void test_llama(void) {
    hf_config h = {.llama = 1,
                   .n_layer = 2,
                   .n_head = 8,
                   .n_kv_head = 4,
                   .d_model = 16,
                   .ffn_hidden = 8,
                   .vocab_size = 10};
    // HS = 2: q 16 rows, k 8, v 8.
    const int64_t qkv[] = {16, 8, 8}, fc[] = {8, 8};
    param_entry e = entry("h0.qkvw", 32, 16), f = entry("h0.fcw", 16, 16);
    char got[512];
    static const struct {
        int tp, r;
        const char *qkv, *fc;
    } cases[] = {
        {1, 0,
         "self_attn.q_proj.weight:0+16@0 self_attn.k_proj.weight:0+8@16 self_attn.v_proj.weight:0+8@24",
         "mlp.gate_proj.weight:0+8@0 mlp.up_proj.weight:0+8@8"},
        {2, 1,
         "self_attn.q_proj.weight:8+8@0 self_attn.k_proj.weight:4+4@8 self_attn.v_proj.weight:4+4@12",
         "mlp.gate_proj.weight:4+4@0 mlp.up_proj.weight:4+4@4"},
        {2, 0,
         "self_attn.q_proj.weight:0+8@0 self_attn.k_proj.weight:0+4@8 self_attn.v_proj.weight:0+4@12",
         "mlp.gate_proj.weight:0+4@0 mlp.up_proj.weight:0+4@4"},
        {4, 2,
         "self_attn.q_proj.weight:8+4@0 self_attn.k_proj.weight:4+2@4 self_attn.v_proj.weight:4+2@6",
         "mlp.gate_proj.weight:4+2@0 mlp.up_proj.weight:4+2@2"},
        {4, 3,
         "self_attn.q_proj.weight:12+4@0 self_attn.k_proj.weight:6+2@4 self_attn.v_proj.weight:6+2@6",
         "mlp.gate_proj.weight:6+2@0 mlp.up_proj.weight:6+2@2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        pieces(&h, &e, qkv, 3, cases[i].tp, cases[i].r, got, sizeof got);
        snprintf(name, sizeof name, "hf_map_llama_qkv_tp%d_rank%d", cases[i].tp, cases[i].r);
        TEST_CHECK(!strcmp(got, cases[i].qkv), name, "got %s, want %s", got, cases[i].qkv);
        pieces(&h, &f, fc, 2, cases[i].tp, cases[i].r, got, sizeof got);
        snprintf(name, sizeof name, "hf_map_llama_gate_up_tp%d_rank%d", cases[i].tp, cases[i].r);
        TEST_CHECK(!strcmp(got, cases[i].fc), name, "got %s, want %s", got, cases[i].fc);
    }
    hf_src s;
    param_entry wte = entry("wte", 16, 16), head = entry("lm_head", 16, 16);
    int ok = hf_map_row(&h, &wte, 3, &s) == 0 && !strcmp(s.name, "model.embed_tokens.weight") &&
             s.row == 3 && s.count == 7 && !s.zero && !s.transpose;
    ok = ok && hf_map_row(&h, &head, 12, &s) == 0 && !strcmp(s.name, "lm_head.weight") && s.zero;
    param_entry o = entry("h1.attprojw", 16, 16), d = entry("h1.fcprojw", 16, 8);
    ok = ok && hf_map_row(&h, &o, 5, &s) == 0 &&
         !strcmp(s.name, "model.layers.1.self_attn.o_proj.weight") && s.row == 5 && !s.transpose;
    ok = ok && hf_map_row(&h, &d, 0, &s) == 0 &&
         !strcmp(s.name, "model.layers.1.mlp.down_proj.weight");
    param_entry n1 = entry("h1.ln2w", 16, 1), nf = entry("lnfw", 16, 1),
                b = entry("h0.qkvb", 48, 1);
    ok = ok && hf_map_row(&h, &n1, 0, &s) == 0 &&
         !strcmp(s.name, "model.layers.1.post_attention_layernorm.weight");
    ok = ok && hf_map_row(&h, &nf, 0, &s) == 0 && !strcmp(s.name, "model.norm.weight");
    ok = ok && hf_map_row(&h, &b, 0, &s) == -1; // Llama has no biases
    TEST_CHECK(ok, "hf_map_llama_single_tensors", "embedding, head, o_proj, down_proj, norms");
}

static void test_gpt2(void) {
    hf_config h = {.n_layer = 2, .n_head = 2, .n_kv_head = 2, .d_model = 4, .vocab_size = 5};
    hf_src s;
    param_entry qkv = entry("h1.qkvw", 12, 4), qb = entry("h1.qkvb", 12, 1),
                wte = entry("wte", 8, 4), wpe = entry("wpe", 6, 4);
    int ok = hf_map_row(&h, &qkv, 7, &s) == 0 &&
             !strcmp(s.name, "transformer.h.1.attn.c_attn.weight") && s.transpose && s.row == 7 &&
             s.count == 5 && s.hf_rows == 12;
    ok = ok && hf_map_row(&h, &qb, 7, &s) == 0 &&
         !strcmp(s.name, "transformer.h.1.attn.c_attn.bias") && !s.transpose;
    ok = ok && hf_map_row(&h, &wte, 4, &s) == 0 && !s.zero && s.count == 1;
    ok = ok && hf_map_row(&h, &wte, 5, &s) == 0 && s.zero;
    ok = ok && hf_map_row(&h, &wpe, 0, &s) == 0 && s.hf_rows == -1; // n_positions >= seq_len
    ok = ok && !strcmp(hf_unprefixed("transformer.h.0.ln_1.weight"), "h.0.ln_1.weight");
    TEST_CHECK(ok, "hf_map_gpt2", "Conv1D transposed, biases not, padded vocabulary rows zero");
}

static void test_reader(void) {
    char path[] = "/tmp/test_hf_map_XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    float a[7 * 5], v[3];
    for (int i = 0; i < 35; i++) a[i] = (float)i * 0.5f - 3;
    for (int i = 0; i < 3; i++) v[i] = 100 + i;
    st_out_tensor ts[] = {{"a", {7, 5}}, {"v", {3, 0}}};
    st_writer w;
    int ok = st_writer_open(&w, path, ts, 2) == TRI_OK && st_writer_put(&w, a, 35) == TRI_OK &&
             st_writer_put(&w, v, 3) == TRI_OK && st_writer_close(&w, 1) == TRI_OK;
    st_file f;
    ok = ok && st_open(&f, path) == TRI_OK;
    TEST_CHECK(ok && f.n == 2, "st_writer_reads_back", "write or open failed");
    if (!ok) return;
    const st_tensor *t = st_find(&f, "a");
    int bad = 0, cases = 0;
    char stage[256];
    static const size_t stages[] = {4, 12, 256};
    for (int si = 0; si < 3; si++)
        for (int r0 = 0; r0 < 7; r0++)
            for (int nr = 1; r0 + nr <= 7; nr++)
                for (int c0 = 0; c0 < 5; c0++)
                    for (int nc = 1; c0 + nc <= 5; nc++) {
                        float out[35];
                        cases++;
                        if (st_read_block(&f, t, r0, nr, c0, nc, out, stage, stages[si])) {
                            bad++;
                            continue;
                        }
                        for (int i = 0; i < nr; i++)
                            for (int j = 0; j < nc; j++)
                                bad += out[i * nc + j] != a[(r0 + i) * 5 + c0 + j];
                    }
    TEST_CHECK(bad == 0, "st_read_block_every_block", "%d wrong of %d blocks", bad, cases);
    st_close(&f);
    // BF16 and F16 widen exactly (hand-made header).
    FILE *out = fopen(path, "wb");
    const char *hdr = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4]},"
                      "\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[4,10]}}";
    uint64_t n = strlen(hdr);
    uint16_t vals[5] = {bf16_from_f32(1.5f), bf16_from_f32(-2.25f), 0x3c00, 0xc100, 0x0001};
    fwrite(&n, 8, 1, out), fwrite(hdr, 1, n, out), fwrite(vals, 2, 5, out);
    fclose(out);
    float got[3] = {0};
    ok = st_open(&f, path) == TRI_OK;
    ok = ok && st_read_block(&f, st_find(&f, "b"), 0, 2, 0, 1, got, stage, 8) == TRI_OK &&
         got[0] == 1.5f && got[1] == -2.25f;
    ok = ok && st_read_block(&f, st_find(&f, "h"), 0, 3, 0, 1, got, stage, 8) == TRI_OK &&
         got[0] == 1.0f && got[1] == -2.5f && got[2] == ldexpf(1, -24);
    if (ok) st_close(&f);
    TEST_CHECK(ok, "st_read_bf16_f16", "got %g %g %g", got[0], got[1], got[2]);
    unlink(path);
}

int main(void) {
    log_init();
    test_llama();
    test_gpt2();
    test_reader();
    TEST_EXIT();
}
