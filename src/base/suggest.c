// suggest.c: "did you mean" by edit distance (suggest.h).
#include "base/suggest.h"

#include <string.h>
#include <strings.h>

int suggest_distance(const char *a, const char *b) {
    enum { MAXLEN = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la >= MAXLEN || lb >= MAXLEN) return MAXLEN;
    int d[MAXLEN + 1][MAXLEN + 1];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

int suggest_closeness(const char *typed, const char *cand) {
    int dist = suggest_distance(typed, cand);
    if (dist <= 2 && dist < (int)strlen(typed)) return dist; // "lr" is not a typo of "tp"
    size_t lt = strlen(typed), lc = strlen(cand);
    if (lt >= 2 && (!strncasecmp(typed, cand, lt) || !strncasecmp(cand, typed, lc))) return dist;
    return -1;
}

const char *suggest_closest(const char *typed, const char *const *names) {
    const char *best = NULL;
    int best_d = 0, tied = 0;
    for (int i = 0; names[i]; i++) {
        int d = strcasecmp(typed, names[i]) ? suggest_closeness(typed, names[i]) : 0;
        if (d < 0 || (best && d > best_d)) continue;
        tied = best && d == best_d;
        if (!tied) best = names[i], best_d = d;
    }
    // A tie ("fp16": fp32 or bf16?) would be a guess; the caller lists the choices instead.
    return tied ? NULL : best;
}
