// test_hf_map: the Hugging Face name mapping (io/hf_import.h) and the safetensors reader
// (io/safetensors.h) without transformers:
//   - Llama's fused entries (qkvw rows q | k | v, fcw rows gate | up) and the embedding, as
//     the real table (params_build) places them on each rank of tp 1, 2 and 4, map to the HF
//     row ranges worked out by hand from the contract below (q_proj, k_proj, v_proj,
//     gate_proj, up_proj; the padded vocabulary rows to zeros); every entry of the whole
//     table maps, to each of LlamaForCausalLM's tensors once (tied and untied); GPT-2's
//     Conv1D weights are transposed, its biases not;
//   - a file written by st_writer reads back by st_read_block for every block shape through
//     stagings of 1, 3 and 64 values (the three read paths), and BF16/F16 values widen exactly.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/bf16.h"
#include "io/hf_import.h"
#include "io/safetensors.h"
#include "testlib.h"

// Rank (tp, r)'s pieces of entry `name` of the real Llama table (params_build): for each run
// of its local rows that are consecutive global rows of one HF tensor, as hf_read_entry
// reads them, "name:hf_row0+rows@local_row0" (the tensor's name without its layer prefix).
static void pieces(const hf_config *h, const model_config *mc, const char *name, int tp, int r,
                   char *out, size_t cap) {
    param_table pt;
    const model_shard sh = {.tp = tp, .tp_rank = r, .pp = 1, .pp_rank = 0, .virtual_stages = 1};
    params_build(&pt, mc, &sh);
    const int i = params_find(&pt, name);
    snprintf(out, cap, "no entry");
    if (i < 0) return params_free(&pt);
    const param_entry *e = &pt.entries[i];
    size_t used = 0;
    out[0] = 0;
    for (int64_t lr = 0; lr < e->local_rows;) {
        hf_src s;
        const int64_t g = params_global_index(&pt, e, lr, 0) / e->global_cols;
        if (hf_map_row(h, e, g, &s) != 0) {
            snprintf(out, cap, "unmapped");
            break;
        }
        int64_t m = 1;
        while (lr + m < e->local_rows && m < s.count &&
               params_global_index(&pt, e, lr + m, 0) / e->global_cols == g + m)
            m++;
        const char *hf = strncmp(s.name, "model.layers.", 13) ? s.name
                                                              : strchr(s.name + 13, '.') + 1;
        used += (size_t)snprintf(out + used, cap - used, "%s%s:%lld+%lld@%lld%s", used ? " " : "",
                                 hf, (long long)s.row, (long long)m, (long long)lr,
                                 s.zero ? "(zero)" : "");
        lr += m;
    }
    params_free(&pt);
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
    // The same model as trident builds it: HS = 2, so q 16 rows, k 8, v 8; vocab_pad_to 4
    // pads V 10 to Vp 12 on tp 1 and to 16 on tp 2 and 4 (rows past 10 read as zeros).
    model_config mc = {.arch = "llama",
                       .n_layer = 2,
                       .n_head = 8,
                       .d_model = 16,
                       .seq_len = 8,
                       .vocab_size = 10,
                       .vocab_pad_to = 4,
                       .n_kv_head = 4,
                       .ffn_hidden = 8,
                       .ffn_multiple_of = 256,
                       .tie_embeddings = 0,
                       .rope_theta = 10000,
                       .norm_eps = 1e-5};
    char got[512];
    // Worked out by hand from the Llama contract: rank r of tp holds q heads [r*NH/tp, ...),
    // kv heads [r*NKV/tp, ...), gate and up rows [r*F/tp, ...), vocabulary rows [r*Vp/tp, ...).
    static const struct {
        int tp, r;
        const char *qkv, *fc, *wte;
    } cases[] = {
        {1, 0,
         "self_attn.q_proj.weight:0+16@0 self_attn.k_proj.weight:0+8@16 self_attn.v_proj.weight:0+8@24",
         "mlp.gate_proj.weight:0+8@0 mlp.up_proj.weight:0+8@8",
         "model.embed_tokens.weight:0+10@0 model.embed_tokens.weight:10+2@10(zero)"},
        {2, 1,
         "self_attn.q_proj.weight:8+8@0 self_attn.k_proj.weight:4+4@8 self_attn.v_proj.weight:4+4@12",
         "mlp.gate_proj.weight:4+4@0 mlp.up_proj.weight:4+4@4",
         "model.embed_tokens.weight:8+2@0 model.embed_tokens.weight:10+6@2(zero)"},
        {2, 0,
         "self_attn.q_proj.weight:0+8@0 self_attn.k_proj.weight:0+4@8 self_attn.v_proj.weight:0+4@12",
         "mlp.gate_proj.weight:0+4@0 mlp.up_proj.weight:0+4@4", "model.embed_tokens.weight:0+8@0"},
        {4, 2,
         "self_attn.q_proj.weight:8+4@0 self_attn.k_proj.weight:4+2@4 self_attn.v_proj.weight:4+2@6",
         "mlp.gate_proj.weight:4+2@0 mlp.up_proj.weight:4+2@2",
         "model.embed_tokens.weight:8+2@0 model.embed_tokens.weight:10+2@2(zero)"},
        {4, 3,
         "self_attn.q_proj.weight:12+4@0 self_attn.k_proj.weight:6+2@4 self_attn.v_proj.weight:6+2@6",
         "mlp.gate_proj.weight:6+2@0 mlp.up_proj.weight:6+2@2",
         "model.embed_tokens.weight:12+4@0(zero)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        const int tp = cases[i].tp, r = cases[i].r;
        pieces(&h, &mc, "h1.qkvw", tp, r, got, sizeof got);
        snprintf(name, sizeof name, "hf_map_llama_qkv_tp%d_rank%d", tp, r);
        TEST_CHECK(!strcmp(got, cases[i].qkv), name, "got %s, want %s", got, cases[i].qkv);
        pieces(&h, &mc, "h0.fcw", tp, r, got, sizeof got);
        snprintf(name, sizeof name, "hf_map_llama_gate_up_tp%d_rank%d", tp, r);
        TEST_CHECK(!strcmp(got, cases[i].fc), name, "got %s, want %s", got, cases[i].fc);
        pieces(&h, &mc, "wte", tp, r, got, sizeof got);
        snprintf(name, sizeof name, "hf_map_llama_embed_tp%d_rank%d", tp, r);
        TEST_CHECK(!strcmp(got, cases[i].wte), name, "got %s, want %s", got, cases[i].wte);
    }
    // Every entry of the real table (untied and tied) maps, and the HF tensors it names are
    // LlamaForCausalLM's, each once: 9 per layer, the embedding, the final norm, the head.
    for (int tie = 0; tie <= 1; tie++) {
        param_table pt;
        mc.tie_embeddings = h.tie = tie;
        params_build_full(&pt, &mc, 1);
        char names[32][96];
        int n = 0, bad = 0;
        for (int i = 0; i < pt.n_entries; i++) {
            const param_entry *e = &pt.entries[i];
            for (int64_t row = 0; row < e->global_rows;) {
                hf_src s;
                if (hf_map_row(&h, e, row, &s) != 0) {
                    bad++;
                    break;
                }
                if (!s.zero) {
                    for (int k = 0; k < n; k++) bad += !strcmp(names[k], s.name);
                    if (n < 32) snprintf(names[n++], 96, "%s", s.name);
                }
                row += s.count;
            }
        }
        params_free(&pt);
        const int want = 9 * 2 + 2 + !tie;
        TEST_CHECK(!bad && n == want, tie ? "hf_map_llama_table_tied" : "hf_map_llama_table",
                   "%d HF tensors (want %d), %d unmapped or repeated", n, want, bad);
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
