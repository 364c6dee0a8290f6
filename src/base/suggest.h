// suggest.h: "did you mean": the name closest to what a user typed, for config keys and
// sections, enum values, subcommands and command-line options.
#pragma once

// Optimal string alignment distance (Levenshtein plus adjacent transpositions), so that the
// usual typo "n_haed" is one edit from "n_head". Strings of 64 bytes or more are 64 apart.
int suggest_distance(const char *a, const char *b);
// How close `typed` is to `cand`: their distance when `typed` is a plausible typo of
// `cand` (at most 2 edits and fewer than typed's length, or one a prefix of the other,
// ignoring case), else -1.
int suggest_closeness(const char *typed, const char *cand);
// The name of `names` (NULL-terminated) closest to `typed` (equal ignoring case counts as
// closest), or NULL when none is close or two are equally close: a tie would be a guess.
const char *suggest_closest(const char *typed, const char *const *names);
