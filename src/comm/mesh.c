// mesh.c: rank <-> (tp, dp, pp) coordinates and the mesh table.
#include "comm/mesh.h"

mesh_coord mesh_coord_of(const run_config *cfg, int rank) {
    const int TP = cfg->parallel.tp, DP = cfg->parallel.dp;
    return (mesh_coord){.tp = rank % TP, .dp = (rank / TP) % DP, .pp = rank / (TP * DP)};
}

int mesh_rank_of(const run_config *cfg, mesh_coord c) {
    return c.tp + cfg->parallel.tp * (c.dp + cfg->parallel.dp * c.pp);
}

void mesh_print(const run_config *cfg, FILE *f) {
    const int TP = cfg->parallel.tp, DP = cfg->parallel.dp, PP = cfg->parallel.pp;
    const int v = cfg->parallel.virtual_stages, L = cfg->model.n_layer;
    const int Lc = L / (PP * v);
    fprintf(f, "mesh: world %d = tp %d x dp %d x pp %d (rank = tp + %d * (dp + %d * pp))\n",
            TP * DP * PP, TP, DP, PP, TP, DP);
    fprintf(f, "  %-5s %-5s %-24s %s\n", "pp", "dp", "ranks (tp group)", "layers");
    for (int pp = 0; pp < PP; pp++) {
        for (int dp = 0; dp < DP; dp++) {
            char ranks[256] = "", layers[256] = "";
            size_t n = 0;
            for (int tp = 0; tp < TP && n < sizeof ranks - 16; tp++)
                n += (size_t)snprintf(ranks + n, sizeof ranks - n, "%s%d", tp ? "," : "",
                                      mesh_rank_of(cfg, (mesh_coord){tp, dp, pp}));
            n = 0;
            for (int c = 0; c < v && n < sizeof layers - 32; c++) {
                int first = (c * PP + pp) * Lc;
                n += (size_t)snprintf(layers + n, sizeof layers - n, "%s%d-%d", c ? " " : "",
                                      first, first + Lc - 1);
            }
            const char *extra = pp == 0 && pp == PP - 1 ? " +emb +head"
                                : pp == 0               ? " +emb"
                                : pp == PP - 1          ? " +head"
                                                        : "";
            fprintf(f, "  %-5d %-5d %-24s %s%s\n", pp, dp, ranks, layers, extra);
        }
    }
}
