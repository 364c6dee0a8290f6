// config_derived_internal.h: quantities derived from several keys, written once for the rules
// that check them (config_rules.c) and for config.h's config_micro_batches and
// config_padded_vocab (config_derived.c). Private to src/config: other modules use config.h.
#pragma once
#include "config/config.h"

// vocab_size rounded up to a multiple of vocab_pad_to * tp, in long long: the product and
// the rounded size can pass INT_MAX for valid int keys.
long long config_padded_vocab_ll(int vocab_size, int vocab_pad_to, int tp);
