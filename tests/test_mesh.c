// test_mesh.c: the rank layout of DESIGN.md (rank = tp + TP * (dp + DP * pp)) and the
// group membership of the comm backends, for every shape with tp, dp, pp in {1, 2, 3, 4}.
//
// The expected groups are enumerated here straight from the formula, by nested loops over
// the coordinates, not through mesh_coord_of; the code under test is mesh_coord_of,
// mesh_rank_of and mesh_group_color (the colors both comm backends split their groups by).
#include "comm/mesh.h"
#include "testlib.h"

#define MAX_WORLD 64

typedef struct {
    int fails;
    char why[256];
} check_state;

static void note_fail(check_state *st, int TP, int DP, int PP, const char *fmt, int a, int b) {
    if (st->fails++ == 0) {
        int n = snprintf(st->why, sizeof st->why, "tp %d dp %d pp %d: ", TP, DP, PP);
        snprintf(st->why + n, sizeof st->why - (size_t)n, fmt, a, b);
    }
}

static int formula(int TP, int DP, int tp, int dp, int pp) { return tp + TP * (dp + DP * pp); }

// One expected group: `ranks` (n of them) must be exactly the ranks of one color of kind g,
// in this order (the split orders by world rank, so a group rank is a position here), and
// `want_pos[i]` is the group rank the mesh coordinates give ranks[i].
static void check_group(check_state *st, const mesh *m, comm_group_id g, const int *ranks,
                        const int *want_pos, int n) {
    const int TP = m->tp, DP = m->dp, PP = m->pp;
    const int world = TP * DP * PP;
    int color = mesh_group_color(m, g, ranks[0]);
    if (color < 0) {
        note_fail(st, TP, DP, PP, "rank %d is in no group of this kind (color %d)", ranks[0],
                  color);
        return;
    }
    for (int i = 0; i < n; i++) {
        if (mesh_group_color(m, g, ranks[i]) != color)
            note_fail(st, TP, DP, PP, "rank %d is not grouped with rank %d", ranks[i], ranks[0]);
        if (i > 0 && ranks[i] <= ranks[i - 1])
            note_fail(st, TP, DP, PP, "group order: rank %d after rank %d", ranks[i], ranks[i - 1]);
        if (want_pos[i] != i)
            note_fail(st, TP, DP, PP, "rank %d has group rank %d by world order", ranks[i], i);
    }
    int same = 0;
    for (int r = 0; r < world; r++) same += mesh_group_color(m, g, r) == color;
    if (same != n) note_fail(st, TP, DP, PP, "group of %d ranks has color shared by %d", n, same);
}

// Round trip, and a bijection between ranks and coordinates.
static void check_round_trip(check_state *st, const mesh *m) {
    const int TP = m->tp, DP = m->dp, PP = m->pp;
    const int world = TP * DP * PP;
    int seen[MAX_WORLD] = {0};
    for (int pp = 0; pp < PP; pp++)
        for (int dp = 0; dp < DP; dp++)
            for (int tp = 0; tp < TP; tp++) {
                int r = formula(TP, DP, tp, dp, pp);
                if (r < 0 || r >= world) {
                    note_fail(st, TP, DP, PP, "rank %d outside world %d", r, world);
                    continue;
                }
                seen[r]++;
                mesh_coord c = mesh_coord_of(m, r);
                if (c.tp != tp || c.dp != dp || c.pp != pp)
                    note_fail(st, TP, DP, PP, "mesh_coord_of(%d) wrong (tp %d)", r, c.tp);
                int back = mesh_rank_of(m, (mesh_coord){tp, dp, pp});
                if (back != r) note_fail(st, TP, DP, PP, "mesh_rank_of gives %d, want %d", back, r);
            }
    for (int r = 0; r < world; r++) {
        if (seen[r] != 1) note_fail(st, TP, DP, PP, "rank %d has %d coordinates", r, seen[r]);
        int back = mesh_rank_of(m, mesh_coord_of(m, r));
        if (back != r) note_fail(st, TP, DP, PP, "rank %d -> coord -> %d", r, back);
    }
}

// Every group of every kind, enumerated from the formula.
static void check_groups(check_state *groups, const mesh *m) {
    const int TP = m->tp, DP = m->dp, PP = m->pp;
    int ranks[MAX_WORLD], pos[MAX_WORLD], n;
    // tp: adjacent ranks, one group per (dp, pp), group rank = tp.
    for (int pp = 0; pp < PP; pp++)
        for (int dp = 0; dp < DP; dp++) {
            for (n = 0; n < TP; n++) pos[n] = n, ranks[n] = formula(TP, DP, n, dp, pp);
            check_group(&groups[COMM_GROUP_TP], m, COMM_GROUP_TP, ranks, pos, n);
        }
    // dp: stride TP, one group per (tp, pp), group rank = dp.
    for (int pp = 0; pp < PP; pp++)
        for (int tp = 0; tp < TP; tp++) {
            for (n = 0; n < DP; n++) pos[n] = n, ranks[n] = formula(TP, DP, tp, n, pp);
            check_group(&groups[COMM_GROUP_DP], m, COMM_GROUP_DP, ranks, pos, n);
        }
    // pp: stride TP * DP, one group per (tp, dp), group rank = pp.
    for (int dp = 0; dp < DP; dp++)
        for (int tp = 0; tp < TP; tp++) {
            for (n = 0; n < PP; n++) pos[n] = n, ranks[n] = formula(TP, DP, tp, dp, n);
            check_group(&groups[COMM_GROUP_PP], m, COMM_GROUP_PP, ranks, pos, n);
        }
    // embed: first and last stage of each pipeline (one rank when pp == 1); middle stages
    // are in none.
    check_state *embed = &groups[COMM_GROUP_EMBED];
    for (int dp = 0; dp < DP; dp++)
        for (int tp = 0; tp < TP; tp++) {
            n = 0;
            pos[n] = 0, ranks[n++] = formula(TP, DP, tp, dp, 0);
            if (PP > 1) pos[n] = 1, ranks[n++] = formula(TP, DP, tp, dp, PP - 1);
            check_group(embed, m, COMM_GROUP_EMBED, ranks, pos, n);
            for (int pp = 1; pp < PP - 1; pp++) {
                int r = formula(TP, DP, tp, dp, pp);
                int color = mesh_group_color(m, COMM_GROUP_EMBED, r);
                if (color != -1)
                    note_fail(embed, TP, DP, PP, "middle-stage rank %d has embed color %d", r,
                              color);
            }
        }
    // mp (tp x pp): one group per dp, group rank = tp + TP * pp.
    for (int dp = 0; dp < DP; dp++) {
        n = 0;
        for (int pp = 0; pp < PP; pp++)
            for (int tp = 0; tp < TP; tp++)
                pos[n] = tp + TP * pp, ranks[n++] = formula(TP, DP, tp, dp, pp);
        check_group(&groups[COMM_GROUP_MP], m, COMM_GROUP_MP, ranks, pos, n);
    }
    // world.
    for (n = 0; n < TP * DP * PP; n++) pos[n] = n, ranks[n] = n;
    check_group(&groups[COMM_GROUP_WORLD], m, COMM_GROUP_WORLD, ranks, pos, n);
}

int main(void) {
    check_state round_trip = {0}, groups[COMM_GROUP_COUNT] = {{0}};
    int shapes = 0;
    for (int TP = 1; TP <= 4; TP++)
        for (int DP = 1; DP <= 4; DP++)
            for (int PP = 1; PP <= 4; PP++) {
                if (TP * DP * PP > MAX_WORLD) continue;
                shapes++;
                const mesh m = {.tp = TP, .dp = DP, .pp = PP};
                check_round_trip(&round_trip, &m);
                check_groups(groups, &m);
            }

    TEST_CHECK(!round_trip.fails, "mesh_round_trip", "%d failures; first: %s", round_trip.fails,
               round_trip.why);
    for (int g = 0; g < COMM_GROUP_COUNT; g++) {
        char name[64];
        snprintf(name, sizeof name, "mesh_group_%s", comm_group_name((comm_group_id)g));
        TEST_CHECK(!groups[g].fails, name, "%d failures; first: %s", groups[g].fails,
                   groups[g].why);
    }
    TEST_CHECK(shapes == 64, "mesh_shapes", "%d shapes, expected 64", shapes);
    TEST_EXIT();
}
