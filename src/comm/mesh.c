// mesh.c: rank <-> (tp, dp, pp) coordinates, the group colors and the mesh table.
#include "comm/mesh.h"

mesh_coord mesh_coord_of(const mesh *m, int rank) {
    const int TP = m->tp, DP = m->dp;
    return (mesh_coord){.tp = rank % TP, .dp = (rank / TP) % DP, .pp = rank / (TP * DP)};
}

int mesh_rank_of(const mesh *m, mesh_coord c) { return c.tp + m->tp * (c.dp + m->dp * c.pp); }

int mesh_group_color(const mesh *m, comm_group_id g, int rank) {
    const int TP = m->tp, DP = m->dp, PP = m->pp;
    const mesh_coord me = mesh_coord_of(m, rank);
    switch (g) {
    case COMM_GROUP_TP: return me.dp + DP * me.pp;
    case COMM_GROUP_DP: return me.tp + TP * me.pp;
    case COMM_GROUP_PP: return me.tp + TP * me.dp;
    case COMM_GROUP_EMBED: return me.pp == 0 || me.pp == PP - 1 ? me.tp + TP * me.dp : -1;
    case COMM_GROUP_MP: return me.dp;
    case COMM_GROUP_WORLD: return 0;
    case COMM_GROUP_COUNT: break;
    }
    return -1;
}

void mesh_print(const mesh *m, int n_layer, int virtual_stages, int vplace, FILE *f) {
    const int TP = m->tp, DP = m->dp, PP = m->pp;
    const int v = virtual_stages, Lc = n_layer / (PP * v);
    fprintf(f, "mesh: world %d = tp %d x dp %d x pp %d (rank = tp + %d * (dp + %d * pp))\n",
            TP * DP * PP, TP, DP, PP, TP, DP);
    fprintf(f, "  %-5s %-5s %-24s %s\n", "pp", "dp", "ranks (tp group)", "layers");
    for (int pp = 0; pp < PP; pp++) {
        for (int dp = 0; dp < DP; dp++) {
            char ranks[256] = "", layers[256] = "";
            size_t n = 0;
            for (int tp = 0; tp < TP && n < sizeof ranks - 16; tp++)
                n += (size_t)snprintf(ranks + n, sizeof ranks - n, "%s%d", tp ? "," : "",
                                      mesh_rank_of(m, (mesh_coord){tp, dp, pp}));
            n = 0;
            for (int c = 0; c < v && n < sizeof layers - 32; c++) {
                const int stage = vplace && c == 1 ? 2 * PP - 1 - pp : c * PP + pp;
                const int first = stage * Lc;
                n += (size_t)snprintf(layers + n, sizeof layers - n, "%s%d-%d", c ? " " : "", first,
                                      first + Lc - 1);
            }
            const int head = vplace ? pp == 0 : pp == PP - 1;
            const char *extra = pp == 0 && head ? " +emb +head"
                                : pp == 0       ? " +emb"
                                : head          ? " +head"
                                                : "";
            fprintf(f, "  %-5d %-5d %-24s %s%s\n", pp, dp, ranks, layers, extra);
        }
    }
}
