/* test_model_keys.c — the key table's model rows (config_keys_model.h, config_model.c): every
 * model.* key says what it does to the model, and the comparison a resume makes of two configs'
 * models (config_model_diff) is read from those rows: derived sizes compared resolved, dependent
 * keys only where they apply, per-layer keys layer by layer, the keys of how a model trains not at
 * all, enums and booleans as the config writes them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "tap.h"

/* a tiny model's keys, then the test's own (--set syntax), NULL-terminated */
static int load(tsr_config *c, ...) {
    const char *sets[64] = {"max_duration=1ba", "global_batch=2", "micro_batch=1", "seq_len=16",
                            "optim.lr=1e-3", "data.train=/nonexistent", "model.n_layer=4",
                            "model.d_model=64", "model.n_head=4", "model.vocab_size=256"};
    int n = 10;
    va_list ap;
    va_start(ap, c);
    for (const char *s; (s = va_arg(ap, const char *)) != NULL && n < 64;) sets[n++] = s;
    va_end(ap);
    return config_load(c, NULL, sets, n);
}

/* the diff of a against b, a and b loaded from the NULL-separated set lists */
static char diff[2048];
static const char *diff_of(const char *a1, const char *a2, const char *a3, const char *b1,
                           const char *b2, const char *b3) {
    static tsr_config a, b;
    if (load(&a, a1, a2, a3, NULL) || load(&b, b1, b2, b3, NULL)) return "(a config did not load)";
    config_model_diff(&a, &b, diff, sizeof diff);
    return diff;
}

static int is(const char *got, const char *want, const char *what) {
    return tap_ok(strcmp(got, want) == 0, "%s: \"%s\" (want \"%s\")", what, got, want);
}

static void test_roles(void) {
    int ok = 1, shapes = 0, runs = 0;
    tsr_key_role role;
    const char *k;
    for (int i = 0; (k = config_key_at(i, &role)) != NULL; i++) {
        const int model = strncmp(k, "model.", 6) == 0;
        if (model && role == TSR_KEY_OTHER) ok = 0, tap_diag("%s: no role", k);
        if (!model && role != TSR_KEY_OTHER && strncmp(k, "lora.", 5) != 0)
            ok = 0, tap_diag("%s: a role outside the model", k);
        shapes += role == TSR_KEY_SHAPES, runs += role == TSR_KEY_RUNS;
    }
    tap_ok(ok && shapes > 50 && runs >= 8, "every model.* key says what it does (%d shape the "
           "model, %d say how it trains; no other key but the adapters')", shapes, runs);
    tap_ok(config_key_role("model.rope_factor") == TSR_KEY_SHAPES &&
               config_key_role("model.activation_checkpointing") == TSR_KEY_RUNS &&
               config_key_role("lora.targets") == TSR_KEY_SHAPES &&
               config_key_role("optim.lr") == TSR_KEY_OTHER &&
               config_key_role("model.nonsense") == TSR_KEY_OTHER,
           "config_key_role: rope_factor shapes, activation_checkpointing runs, lora.targets "
           "shapes, optim.lr and an unknown name neither");
}

static void test_diff(void) {
    is(diff_of("model.n_layer=3", NULL, NULL, "model.n_layer=2", NULL, NULL), "n_layer 3 vs 2",
       "another n_layer");
    is(diff_of("model.n_layer=3", "model.d_model=32", NULL, "model.n_layer=2", NULL, NULL),
       "n_layer 3 vs 2, d_model 32 vs 64, intermediate_size 128 vs 256, head_dim 8 vs 16",
       "two keys, in table order, config first; the sizes d_model derives resolved");
    is(diff_of("model.n_kv_head=0", "model.expansion_ratio=4", NULL, "model.n_kv_head=4",
               "model.intermediate_size=256", "model.head_dim=16"),
       "", "n_kv_head 0 = n_head, expansion_ratio 4 x 64 = intermediate_size 256, head_dim 16 = "
           "64 / 4: the same model");
    is(diff_of("model.expansion_ratio=2", NULL, NULL, NULL, NULL, NULL),
       "intermediate_size 128 vs 256", "another expansion_ratio: the MLP width named once");
    is(diff_of("model.rope_factor=2", NULL, NULL, NULL, NULL, NULL), "",
       "rope_factor without RoPE: not compared");
    is(diff_of("model.pos=rope", "model.rope_scaling=llama3", "model.rope_factor=4", "model.pos=rope",
               "model.rope_scaling=llama3", "model.rope_factor=8"),
       "rope_factor 4 vs 8", "rope_factor under llama3 scaling");
    is(diff_of("model.pos=rope", "model.rope_scaling=linear", "model.rope_factor=4", "model.pos=rope",
               NULL, NULL),
       "rope_scaling \"linear\" vs \"none\", rope_factor 4 vs (unused)",
       "an enum by its name, a dependent key unused on one side");
    is(diff_of("model.norm=rmsnorm", "model.norm_placement=sandwich", "model.attn_sinks=true",
               "model.norm=rmsnorm", NULL, NULL),
       "attn_sinks true vs false, norm_placement \"sandwich\" vs \"pre\"",
       "a boolean and an enum as the config writes them");
    is(diff_of("model.activation_checkpointing=block", "model.init_std=0.01",
               "model.moe_aux_loss_coef=0.1", NULL, NULL, NULL),
       "", "the keys of how a model trains (checkpointing, init, the auxiliary loss) are not "
           "compared");
    is(diff_of("model.layer_types=linear_attention,full_attention", NULL, NULL,
               "model.layer_types=full_attention,linear_attention", NULL, NULL),
       "layer_types at layer 0: \"linear_attention\" vs \"full_attention\"",
       "layer kinds reordered: the first layer that differs");
    is(diff_of("model.layer_types=full_attention", NULL, NULL, NULL, NULL, NULL), "",
       "layer_types \"full_attention\" repeated = \"\": the same layers");
    is(diff_of("model.layer_types=sliding_attention,full_attention", "model.sliding_window=4",
               NULL, "model.layer_types=sliding_attention,full_attention", "model.sliding_window=5",
               NULL),
       "sliding_window 4 vs 5", "another window");
    is(diff_of("model.pos=rope", "model.no_rope_layers=1,1,0,1", NULL, "model.pos=rope", NULL,
               NULL),
       "no_rope_layers at layer 2: 0 vs 1", "a NoPE layer where the checkpoint turns q and k");
    is(diff_of("model.moe_experts=4", "model.moe_act=gptoss", "model.swiglu_limit=5",
               "model.moe_experts=4", NULL, NULL),
       "moe_act \"gptoss\" vs \"swiglu\", swiglu_limit 5 vs (unused)", "gpt-oss's unit");
    is(diff_of("lora.rank=4", "lora.targets=all-linear", NULL, "lora.rank=4", "lora.targets=q,v",
               NULL),
       "lora.targets \"q,k,v,o,down\" vs \"q,v\"", "LoRA's targets resolved");
}

int main(void) {
    tap_plan(17);
    test_roles();
    test_diff();
    return tap_done();
}
