/* config_keys_model.h — the model.* rows of the key table, included once inside config_table.c's
 * table (not a header of declarations). Each row says what the key does to the model (role,
 * config_table.h): SHAPES, the checkpoint's model keeps it (config_model_diff), SHAPES_IF(f) when
 * f says it takes effect, RUNS, how the model trains; a derived value (.value) or a per-layer one
 * (.layer) where the field alone does not say what the model is. A new model key adds its row
 * here and, when it shapes the model, is listed by the layer kind or the decoder's frame that
 * reads it (src/model/layer_kind.h; tests/unit/test_layer_kinds.c checks both). */
    {.name = "model.n_layer", .type = CFGK_INT, FIELD(model.n_layer), .example = "12", .ilo = 1,
     INT32_ONLY, .doc = "Transformer blocks (L).",
     SHAPES},
    {.name = "model.d_model", .type = CFGK_INT, FIELD(model.d_model), .example = "768", .ilo = 1,
     INT32_ONLY, .doc = "Model width (C); a multiple of n_head.",
     SHAPES},
    {.name = "model.n_head", .type = CFGK_INT, FIELD(model.n_head), .example = "12", .ilo = 1,
     INT32_ONLY, .doc = "Attention heads (NH); head size = d_model / n_head.",
     SHAPES},
    {.name = "model.vocab_size", .type = CFGK_INT, FIELD(model.vocab_size), .example = "50257",
     .ilo = 2, .ihi = 2147483647,
     .doc = "Vocabulary size of the tokenizer (V); every token id of the data must be < V.",
     SHAPES},
    {.name = "model.vocab_multiple", .type = CFGK_INT, FIELD(model.vocab_multiple), .def = "128",
     .ilo = 1, .ihi = 65536,
     .doc = "Embedding and output rows are padded to Vp = V rounded up to a multiple of this "
            "(64 or 128 suit GPU matmuls; 1 = no padding). Padding rows are never predicted.",
     SHAPES},
    {.name = "model.max_seq_len", .type = CFGK_INT, FIELD(model.max_seq_len), .def = "0", .ilo = 0,
     .ihi = 1048576,
     .doc = "Rows of the learned position table; 0 = seq_len. With pos = learned, >= seq_len.",
     SHAPES_IF(cfgm_learned), .value = cfgm_positions},
    {.name = "model.pos", .type = CFGK_ENUM, FIELD(model.pos), .def = "learned", ENUM(pos_names),
     .doc = "Positions: `learned` absolute embeddings (GPT-2), `alibi` attention biases (MPT) or "
            "`rope` rotary embeddings of q and k (Llama, Qwen, Mistral).",
     SHAPES},
    {.name = "model.rope_theta", .type = CFGK_FLOAT, FIELD(model.rope_theta), .def = "10000",
     .lo = 0, .lo_open = 1, NO_MAX,
     .doc = "RoPE base: pair i of a head turns by position x theta^(-2i/head_dim) (Llama 3: "
            "500000, Qwen 2.5/3: 1000000).",
     SHAPES_IF(cfgm_rope)},
    {.name = "model.rope_scaling", .type = CFGK_ENUM, FIELD(model.rope_scaling), .def = "none",
     ENUM(rope_scaling_names),
     .doc = "RoPE frequency scaling: `none`, `llama3` (Llama 3.1/3.2's rope_scaling: the "
            "rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos keys), "
            "`linear` (every frequency divided by rope_factor; Gemma 3 4B-27B's full layers) or "
            "`yarn` (gpt-oss: rope_factor, rope_beta_fast, rope_beta_slow, rope_truncate, "
            "rope_original_max_pos; q and k times 0.1 ln(rope_factor) + 1). With "
            "model.rope_local_theta the sliding layers are not scaled.",
     SHAPES_IF(cfgm_rope)},
    {.name = "model.rope_factor", .type = CFGK_FLOAT, FIELD(model.rope_factor), .def = "8",
     .lo = 1, NO_MAX, .doc = "rope_scaling = llama3: low frequencies are divided by this; linear: every frequency; "
            "yarn: the interpolated ones (gpt-oss: 32).",
     SHAPES_IF(cfgm_rope_scaled)},
    {.name = "model.rope_low_freq_factor", .type = CFGK_FLOAT, FIELD(model.rope_low_freq_factor),
     .def = "1", .lo = 0, .lo_open = 1, NO_MAX,
     .doc = "rope_scaling = llama3: wavelengths above rope_original_max_pos / this are scaled.",
     SHAPES_IF(cfgm_llama3)},
    {.name = "model.rope_high_freq_factor", .type = CFGK_FLOAT,
     FIELD(model.rope_high_freq_factor), .def = "4", .lo = 0, .lo_open = 1, NO_MAX,
     .doc = "rope_scaling = llama3: wavelengths below rope_original_max_pos / this are kept; "
            "between the two bounds they are interpolated. Must exceed rope_low_freq_factor.",
     SHAPES_IF(cfgm_llama3)},
    {.name = "model.rope_original_max_pos", .type = CFGK_INT, FIELD(model.rope_original_max_pos),
     .def = "8192", .ilo = 1, INT32_ONLY,
     .doc = "rope_scaling = llama3 or yarn: the context length the model was first trained at "
            "(gpt-oss: 4096).",
     SHAPES_IF(cfgm_original_ctx)},
    {.name = "model.rope_local_theta", .type = CFGK_FLOAT, FIELD(model.rope_local_theta),
     .def = "0", .lo = 0, NO_MAX,
     .doc = "RoPE base of the sliding-window layers (model.layer_types), unscaled, Gemma 3's "
            "rope_local_base_freq (10000); the full layers keep rope_theta and rope_scaling. 0 = "
            "every layer uses rope_theta (and rope_scaling).",
     SHAPES_IF(cfgm_rope)},
    {.name = "model.rope_beta_fast", .type = CFGK_FLOAT, FIELD(model.rope_beta_fast),
     .def = "32", .lo = 0, .lo_open = 1, NO_MAX,
     .doc = "rope_scaling = yarn: rotations over rope_original_max_pos above which a frequency "
            "is kept (Hugging Face's beta_fast).",
     SHAPES_IF(cfgm_yarn)},
    {.name = "model.rope_beta_slow", .type = CFGK_FLOAT, FIELD(model.rope_beta_slow),
     .def = "1", .lo = 0, .lo_open = 1, NO_MAX,
     .doc = "rope_scaling = yarn: rotations below which a frequency is divided by rope_factor "
            "(beta_slow); between the two a linear ramp over the dimensions.",
     SHAPES_IF(cfgm_yarn)},
    {.name = "model.rope_truncate", .type = CFGK_BOOL, FIELD(model.rope_truncate), .def = "true",
     .doc = "rope_scaling = yarn: the ramp's bounds rounded out to whole dimensions (Hugging "
            "Face's truncate; gpt-oss: false).",
     SHAPES_IF(cfgm_yarn)},
    {.name = "model.partial_rotary_factor", .type = CFGK_FLOAT,
     FIELD(model.partial_rotary_factor), .def = "1", .lo = 0, .lo_open = 1, .hi = 1,
     .doc = "RoPE turns the first partial_rotary_factor x head_dim dimensions of each q and k "
            "head (rotate-half within them, frequencies over that size); the rest pass unchanged "
            "(Qwen3-Next: 0.25, GPT-NeoX). The product must be an even whole number.",
     SHAPES_IF(cfgm_rope)},
    {.name = "model.no_rope_layers", .type = CFGK_STRING, FIELD(model.no_rope_layers), .def = "",
     .doc = "Layers without RoPE (NoPE), Hugging Face SmolLM3's no_rope_layers: a comma list of "
            "1 (RoPE) and 0 (no positions), one per layer or a shorter pattern repeated over the "
            "layers (SmolLM3: \"1,1,1,0\"); \"\" = RoPE everywhere.",
     SHAPES_IF(cfgm_rope), .layer = cfgm_layer_rope},
    {.name = "model.attn_logit_softcapping", .type = CFGK_FLOAT,
     FIELD(model.attn_logit_softcapping), .def = "0", .lo = 0, NO_MAX,
     .doc = "Attention-score soft-capping (Gemma 2: 50): scores = cap tanh(scores / cap) after "
            "the scale, before the mask and softmax; 0 = off.",
     SHAPES},
    {.name = "model.final_logit_softcapping", .type = CFGK_FLOAT,
     FIELD(model.final_logit_softcapping), .def = "0", .lo = 0, NO_MAX,
     .doc = "LM-head soft-capping (Gemma 2: 30): logits = cap tanh(logits / cap) before the "
            "loss and sampling; 0 = off.",
     SHAPES},
    {.name = "model.attn_mask", .type = CFGK_ENUM, FIELD(model.attn_mask), .def = "causal",
     ENUM(mask_names),
     .doc = "`causal`: a token attends to every earlier token of its sequence. `document`: only to "
            "those of its own document: in data that records where its examples start (`tessera "
            "prep --format sft|chat --pack`), each example; else a document ends with (and "
            "includes) model.eot_token. Learned and rotary positions restart at 0 in each, so "
            "packed examples do not see each other (docs/model.md). The trainer warns when data "
            "that records them trains with `causal`.",
     RUNS},
    {.name = "model.eot_token", .type = CFGK_INT, FIELD(model.eot_token), .def = "50256", .ilo = 0,
     INT32_ONLY,
     .doc = "End-of-text token id that ends a document with attn_mask = `document` in data that "
            "does not record its examples' starts (GPT-2's `<|endoftext|>` is 50256); must be < "
            "model.vocab_size then, unused otherwise.",
     RUNS},
    {.name = "model.bias", .type = CFGK_BOOL, FIELD(model.bias), .def = "true",
     .doc = "Biases in the linear layers and LayerNorms (GPT-2: true, MPT: false).",
     SHAPES},
    {.name = "model.expansion_ratio", .type = CFGK_FLOAT, FIELD(model.expansion_ratio), .def = "4",
     .lo = 0, .lo_open = 1, NO_MAX,
     .doc = "MLP hidden width = expansion_ratio x d_model, which must be a whole number.",
     SHAPES, .via = "model.intermediate_size"},
    {.name = "model.gelu", .type = CFGK_ENUM, FIELD(model.gelu), .def = "tanh", ENUM(gelu_names),
     .doc = "GELU form: `tanh` approximation (GPT-2) or `exact` erf form (MPT).",
     SHAPES_IF(cfgm_gelu_mlp)},
    {.name = "model.norm", .type = CFGK_ENUM, FIELD(model.norm), .def = "layernorm",
     ENUM(norm_names),
     .doc = "Normalisation: `layernorm` (GPT-2, MPT; eps 1e-5) or `rmsnorm` (Llama, Qwen; eps "
            "model.norm_eps, no bias).",
     SHAPES},
    {.name = "model.norm_eps", .type = CFGK_FLOAT, FIELD(model.norm_eps), .def = "1e-5", .lo = 0,
     .lo_open = 1, .hi = 1,
     .doc = "RMSNorm's epsilon (Llama 3: 1e-5, Qwen: 1e-6); LayerNorm's is fixed at 1e-5.",
     SHAPES},
    {.name = "model.mlp", .type = CFGK_ENUM, FIELD(model.mlp), .def = "gelu", ENUM(mlp_names),
     .doc = "MLP: `gelu` (two matrices, GELU of kind model.gelu), `swiglu` (gate, up, down: "
            "silu(x Wg) * (x Wu) Wd; Llama, Qwen, Mistral) or `geglu_tanh` (gelu_tanh(x Wg) * "
            "(x Wu) Wd, the tanh-approximated GELU whatever model.gelu says; Gemma's "
            "gelu_pytorch_tanh).",
     SHAPES},
    {.name = "model.intermediate_size", .type = CFGK_INT, FIELD(model.intermediate_size),
     .def = "0", .ilo = 0, INT32_ONLY,
     .doc = "MLP hidden width F; 0 = expansion_ratio x d_model (Llama 3.2 1B: 8192).",
     SHAPES, .value = cfgm_mlp_width},
    {.name = "model.n_kv_head", .type = CFGK_INT, FIELD(model.n_kv_head), .def = "0", .ilo = 0,
     INT32_ONLY,
     .doc = "Key/value heads (grouped-query attention; 1 = multi-query); 0 = n_head. n_head must "
            "be a multiple of it.",
     SHAPES, .value = cfgm_kv_heads},
    {.name = "model.head_dim", .type = CFGK_INT, FIELD(model.head_dim), .def = "0", .ilo = 0,
     INT32_ONLY,
     .doc = "Size of one attention head; 0 = d_model / n_head (Qwen 3 sets it: 128 at any width).",
     SHAPES, .value = cfgm_head_size},
    {.name = "model.qkv_bias", .type = CFGK_BOOL, FIELD(model.qkv_bias), .def = "false",
     .doc = "A bias on the q, k and v projections even with model.bias = false (Qwen 2/2.5).",
     SHAPES},
    {.name = "model.attn_bias", .type = CFGK_BOOL, FIELD(model.attn_bias), .def = "false",
     .doc = "Biases on the attention's q, k, v and o projections even with model.bias = false, "
            "none on the MLP (Hugging Face's attention_bias without mlp_bias: Qwen 3, OLMo 2/3, "
            "Gemma 2/3, Llama and SmolLM3 with mlp_bias false).",
     SHAPES},
    {.name = "model.qk_norm", .type = CFGK_BOOL, FIELD(model.qk_norm), .def = "false",
     .doc = "RMSNorm (eps model.norm_eps, weights per head dimension) of every q and k head "
            "before RoPE (Qwen 3), or of the whole projections (model.qk_norm_scope).",
     SHAPES},
    {.name = "model.qk_norm_scope", .type = CFGK_ENUM, FIELD(model.qk_norm_scope), .def = "head",
     ENUM(qkscope_names),
     .doc = "What model.qk_norm normalises: `head` = each q and k head over head_dim, weights "
            "`qnormw`, `knormw` (n_layer, head_dim) (Qwen 3, Gemma 3); `projection` = the whole q "
            "projection (n_head * head_dim) and the whole k projection (n_kv_head * head_dim) "
            "before the head split, weights (n_layer, n_head * head_dim) and (n_layer, n_kv_head "
            "* head_dim) (OLMo 2: q_norm, k_norm).",
     SHAPES_IF(cfgm_qk_norm)},
    {.name = "model.tie_embeddings", .type = CFGK_BOOL, FIELD(model.tie_embeddings),
     .def = "true",
     .doc = "The LM head is the token embedding wte (GPT-2, Llama 3.2 1B/3B, Qwen small); false: "
            "a separate (vocab, d_model) matrix `lm_head` (Llama 3.1 8B, Qwen 7B/8B).",
     SHAPES},
    {.name = "model.moe_experts", .type = CFGK_INT, FIELD(model.moe_experts), .def = "0",
     .ilo = 0, .ihi = 4096,
     .doc = "Mixture of experts: routed experts per MoE layer (each a SwiGLU MLP); 0 = a dense "
            "model, else >= 2 (Mixtral: 8, Qwen3-30B-A3B: 128, DBRX: 16; docs/moe.md).",
     SHAPES},
    {.name = "model.moe_top_k", .type = CFGK_INT, FIELD(model.moe_top_k), .def = "2", .ilo = 1,
     .ihi = 4096,
     .doc = "Experts each token is routed to (at most model.moe_experts; Mixtral 2, DBRX 4, "
            "Qwen3-MoE 8). Dropless: every token reaches all of them.",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_intermediate_size", .type = CFGK_INT,
     FIELD(model.moe_intermediate_size), .def = "0", .ilo = 0, INT32_ONLY,
     .doc = "Hidden width of one expert; 0 = the dense MLP width (model.intermediate_size or "
            "expansion_ratio x d_model).",
     SHAPES_IF(cfgm_moe), .value = cfgm_expert_width},
    {.name = "model.moe_every", .type = CFGK_INT, FIELD(model.moe_every), .def = "1", .ilo = 1,
     INT32_ONLY,
     .doc = "Which layers are MoE: layer l (0-based) when (l + 1) is a multiple of it; 1 = every "
            "layer, 2 = every second (the others keep the dense MLP of model.mlp).",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_norm_topk", .type = CFGK_BOOL, FIELD(model.moe_norm_topk),
     .def = "true",
     .doc = "Divide the top-k router probabilities by their sum (Mixtral, DBRX, Qwen3-MoE); "
            "false: use them as they are (Qwen2-MoE, Switch).",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_shared_size", .type = CFGK_INT, FIELD(model.moe_shared_size),
     .def = "0", .ilo = 0, INT32_ONLY,
     .doc = "Hidden width of a shared SwiGLU expert every token passes through besides its "
            "routed ones (DeepSeek style, ungated); 0 = none.",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_shared_gate", .type = CFGK_BOOL, FIELD(model.moe_shared_gate),
     .def = "false",
     .doc = "Gate the shared expert per token: its output times sigmoid(x . w), w = `shgatew` "
            "(n_moe_layers, 1, d_model), weight-decayed (Qwen2-MoE, Qwen3-Next's "
            "shared_expert_gate). Needs model.moe_shared_size > 0.",
     SHAPES_IF(cfgm_moe_shared)},
    {.name = "model.moe_aux_loss_coef", .type = CFGK_FLOAT, FIELD(model.moe_aux_loss_coef),
     .def = "0.01", .lo = 0, NO_MAX,
     .doc = "Weight of the load-balancing loss E * sum_e f_e P_e per MoE layer (1 at perfect "
            "balance; Hugging Face's Mixtral form is top_k times it: docs/moe.md).",
     RUNS},
    {.name = "model.moe_z_loss_coef", .type = CFGK_FLOAT, FIELD(model.moe_z_loss_coef),
     .def = "0", .lo = 0, NO_MAX,
     .doc = "Weight of the router z-loss, the mean squared logsumexp of the router logits per "
            "MoE layer (ST-MoE; 1e-3 is usual); 0 = off.",
     RUNS},
    {.name = "model.moe_router_bias", .type = CFGK_BOOL, FIELD(model.moe_router_bias),
     .def = "false",
     .doc = "A bias on the router's logits, tensor `routerb` (n_moe_layers, moe_experts), not "
            "weight-decayed (gpt-oss; docs/moe.md \"gpt-oss's experts\").",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_expert_bias", .type = CFGK_BOOL, FIELD(model.moe_expert_bias),
     .def = "false",
     .doc = "Biases on every expert's [gate | up] projection, `expb1` (n_moe_layers, "
            "moe_experts, 2 x moe_intermediate_size), and down projection, `expb2` "
            "(n_moe_layers, moe_experts, d_model), not weight-decayed (gpt-oss).",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_act", .type = CFGK_ENUM, FIELD(model.moe_act), .def = "swiglu",
     ENUM(moe_act_names),
     .doc = "The routed experts' unit: `swiglu` = silu(gate) * up; `gptoss` = gpt-oss's "
            "(g = min(gate, L), u = clamp(up, -L, L), (u + 1) * g * sigmoid(1.702 g), L = "
            "model.swiglu_limit).",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.swiglu_limit", .type = CFGK_FLOAT, FIELD(model.swiglu_limit), .def = "7",
     .lo = 0, .lo_open = 1, NO_MAX,
     .doc = "The clamp L of model.moe_act = \"gptoss\" (Hugging Face's `swiglu_limit`; gpt-oss: "
            "7); unused with `swiglu`.",
     SHAPES_IF(cfgm_gptoss)},
    {.name = "model.init_std", .type = CFGK_FLOAT, FIELD(model.init_std), .def = "0.02", .lo = 0,
     .lo_open = 1, NO_MAX, .doc = "Standard deviation of the normal weight initialization.",
     RUNS},
    {.name = "model.activation_checkpointing", .type = CFGK_ENUM,
     FIELD(model.activation_checkpointing), .def = "none", ENUM(actckpt_names),
     .doc = "Activations a checkpointed layer does not keep for backward, recomputed from what it "
            "keeps just before its backward: `none`; `block` all but the layer's input residual; "
            "`attention` qkv, attention probabilities and output; `mlp` the MLP hidden layer. "
            "Gradients are bit-identical to `none` (docs/model.md).",
     RUNS},
    {.name = "model.activation_checkpointing_layers", .type = CFGK_INT,
     FIELD(model.activation_checkpointing_layers), .def = "-1", .ilo = -1, INT32_ONLY,
     .doc = "With activation_checkpointing other than `none`: the first this many layers are "
            "checkpointed; -1 = all, else 1 .. model.n_layer. One layer saves nothing (the "
            "recomputation needs one layer of buffers).",
     RUNS},
    {.name = "model.activation_checkpointing_range", .type = CFGK_STRING,
     FIELD(model.activation_checkpointing_range), .def = "",
     .doc = "With activation_checkpointing other than `none`: `\"A-B\"` checkpoints layers A to B "
            "(0-based, inclusive) instead of the first N, e.g. the middle of a deep model; `\"\"` "
            "= use activation_checkpointing_layers.",
     RUNS},
    {.name = "model.layer_types", .type = CFGK_STRING, FIELD(model.layer_types), .def = "",
     .doc = "Attention type of each layer, Hugging Face's `layer_types`: a comma list of "
            "`sliding_attention` (a window of model.sliding_window tokens), `full_attention` and "
            "`linear_attention` (Qwen3-Next's Gated DeltaNet, model.linear_*; what it does not run "
            "with on CUDA: docs/limits.md), "
            "one per layer, or a shorter pattern repeated over the layers (Gemma 3: five "
            "sliding, one full); `\"\"` = every layer full, or sliding when model.sliding_window "
            "is set (docs/models.md).",
     SHAPES, .layer = cfgm_layer_kind},
    {.name = "model.hf_model_type", .type = CFGK_STRING, FIELD(model.hf_model_type), .def = "",
     .doc = "The Hugging Face `model_type` that `tessera ckpt export --format hf` writes when "
            "`--arch` is not given: `\"\"` = the class the model's features choose (docs/hf.md); "
            "an import sets it to the directory's (`qwen3_5`, `qwen3_5_text`, `qwen3_5_moe`, "
            "`qwen3_5_moe_text`: Qwen 3.5's layouts of Qwen3-Next's layers). No effect on "
            "training.",
     RUNS},
    {.name = "model.sliding_window", .type = CFGK_INT, FIELD(model.sliding_window), .def = "0",
     .ilo = 0, INT32_ONLY,
     .doc = "Window W of the sliding-attention layers: position i sees positions j with "
            "i - W < j <= i (Hugging Face's convention), within its document under the document "
            "mask; 0 = none.",
     SHAPES_IF(cfgm_sliding)},
    {.name = "model.linear_num_key_heads", .type = CFGK_INT, FIELD(model.linear_num_key_heads),
     .def = "16", .ilo = 1, .ihi = 4096,
     .doc = "Query/key heads of the `linear_attention` layers' Gated DeltaNet (Hugging Face "
            "Qwen3-Next's name; docs/deltanet.md).",
     SHAPES_IF(cfgm_linear)},
    {.name = "model.linear_num_value_heads", .type = CFGK_INT,
     FIELD(model.linear_num_value_heads), .def = "32", .ilo = 1, .ihi = 4096,
     .doc = "Value heads of the `linear_attention` layers, a multiple of "
            "model.linear_num_key_heads (value head h reads query/key head h / (HV / HK)).",
     SHAPES_IF(cfgm_linear)},
    {.name = "model.linear_key_head_dim", .type = CFGK_INT, FIELD(model.linear_key_head_dim),
     .def = "128", .ilo = 1, .ihi = 4096,
     .doc = "Query/key head size d_k of the `linear_attention` layers.",
     SHAPES_IF(cfgm_linear)},
    {.name = "model.linear_value_head_dim", .type = CFGK_INT,
     FIELD(model.linear_value_head_dim), .def = "128", .ilo = 1, .ihi = 4096,
     .doc = "Value head size d_v of the `linear_attention` layers (the state is d_k x d_v a "
            "head).",
     SHAPES_IF(cfgm_linear)},
    {.name = "model.linear_conv_kernel_dim", .type = CFGK_INT,
     FIELD(model.linear_conv_kernel_dim), .def = "4", .ilo = 1, .ihi = 16,
     .doc = "Kernel of the `linear_attention` layers' causal depthwise convolution (over q, k, "
            "v before the SiLU).",
     SHAPES_IF(cfgm_linear)},
    {.name = "model.attn_output_gate", .type = CFGK_BOOL, FIELD(model.attn_output_gate),
     .def = "false",
     .doc = "Qwen3-Next's gated attention (Hugging Face's name): each attention layer's output "
            "times sigmoid(gate) per head before o_proj, gate = ln1 @ attngatew^T (HF's q_proj "
            "rows [query | gate] of each head, split).",
     SHAPES},
    {.name = "model.attn_sinks", .type = CFGK_BOOL, FIELD(model.attn_sinks), .def = "false",
     .doc = "Attention sinks (gpt-oss): a learned logit per head and layer (tensor `sinks`, "
            "(n_layer, n_head)) that joins every row's softmax denominator.",
     SHAPES},
    {.name = "model.query_pre_attn_scalar", .type = CFGK_FLOAT,
     FIELD(model.query_pre_attn_scalar), .def = "0", .lo = 0, NO_MAX,
     .doc = "Attention scores are q.k / sqrt(this) (Gemma's `query_pre_attn_scalar`: 256 in "
            "Gemma 3 1B-12B, 168 in 27B); 0 = the head size (the usual 1 / sqrt(head_dim)).",
     SHAPES, .value = cfgm_score_scale},
    {.name = "model.norm_placement", .type = CFGK_ENUM, FIELD(model.norm_placement),
     .def = "pre", ENUM(nplace_names),
     .doc = "Where a block's norms sit: `pre` = x + f(norm(x)) (GPT-2, Llama, Qwen); `sandwich` = "
            "x + norm'(f(norm(x))) around both the attention and the MLP (Gemma 2/3: tensors "
            "`postattnw` and `postmlpw`, (n_layer, d_model), Hugging Face's "
            "post_attention_layernorm and post_feedforward_layernorm; ln2w is its "
            "pre_feedforward_layernorm); `post` = x + norm'(f(x)), no norm before the attention "
            "or the MLP (OLMo 2: the same `postattnw`, `postmlpw`, no ln1w or ln2w). `sandwich` "
            "and `post` need model.norm = rmsnorm (docs/models.md).",
     SHAPES},
    {.name = "model.embed_scale", .type = CFGK_ENUM, FIELD(model.embed_scale), .def = "none",
     ENUM(embscale_names),
     .doc = "The token embedding's multiplier before the first layer: `none`, or `sqrt_d_model` "
            "(Gemma 1-3: wte[token] * sqrt(d_model), in fp32 here; Hugging Face rounds the factor "
            "to the weights' dtype, bf16 in bf16 checkpoints: docs/models.md). Not with "
            "model.pos = learned.",
     SHAPES},
    {.name = "model.activation_compression", .type = CFGK_ENUM,
     FIELD(model.activation_compression), .def = "none", ENUM(actcomp_names),
     .doc = "How a decoder layer keeps its linear layers' inputs (ln1, the attention output, ln2, "
            "the MLP's hidden layer after GELU / SwiGLU) and the hidden layer before it for the "
            "backward: `none` as "
            "computed; `fp8` in E4M3 with a per-tensor fp32 scale, dequantised to bf16 for the "
            "backward (the backward's GEMMs stay bf16). Needs device = `cuda`; the MoE experts' "
            "activations stay bf16. `--plan` shows the bytes a layer keeps with and without "
            "(docs/cuda.md \"Compressed activations\").",
     RUNS},
    {.name = "model.kv_lora_rank", .type = CFGK_INT, FIELD(model.kv_lora_rank), .def = "0",
     .ilo = 0, .ihi = 65536,
     .doc = "Multi-head latent attention (DeepSeek-V2/V3, Kimi K2; docs/models.md \"DeepSeek\"): "
            "the size of the latent every head's key and value are expanded from (V3: 512); > 0 "
            "makes every layer that is not a linear_attention one an MLA layer, 0 = none. Needs "
            "model.pos = \"rope\" and model.norm = \"rmsnorm\".",
     SHAPES},
    {.name = "model.q_lora_rank", .type = CFGK_INT, FIELD(model.q_lora_rank), .def = "0",
     .ilo = 0, .ihi = 65536,
     .doc = "MLA: the queries' low-rank path (q_a_proj, its RMSNorm, q_b_proj; V3: 1536); 0 = one "
            "projection q_proj (DeepSeek-V2-Lite).",
     SHAPES_IF(cfgm_mla)},
    {.name = "model.qk_nope_head_dim", .type = CFGK_INT, FIELD(model.qk_nope_head_dim),
     .def = "128", .ilo = 1, .ihi = 4096,
     .doc = "MLA: the part of each query and key head without positions, expanded from the "
            "latent (V3: 128).",
     SHAPES_IF(cfgm_mla)},
    {.name = "model.qk_rope_head_dim", .type = CFGK_INT, FIELD(model.qk_rope_head_dim),
     .def = "64", .ilo = 2, .ihi = 4096,
     .doc = "MLA: the RoPE part of each query head, and of the one RoPE key every head shares "
            "(V3: 64); even. A head's query and key are [nope | rope], qk_nope_head_dim + this.",
     SHAPES_IF(cfgm_mla)},
    {.name = "model.v_head_dim", .type = CFGK_INT, FIELD(model.v_head_dim), .def = "128",
     .ilo = 1, .ihi = 4096,
     .doc = "MLA: the size of each value head (V3: 128), which may differ from the query/key "
            "head's.",
     SHAPES_IF(cfgm_mla)},
    {.name = "model.rope_interleave", .type = CFGK_BOOL, FIELD(model.rope_interleave),
     .def = "false",
     .doc = "MLA: RoPE turns the pairs of dimensions (2i, 2i + 1) of the rope part (Hugging "
            "Face's rope_interleave, DeepSeek's checkpoints) instead of (i, i + d/2).",
     SHAPES_IF(cfgm_mla)},
    {.name = "model.rope_mscale", .type = CFGK_FLOAT, FIELD(model.rope_mscale), .def = "0",
     .lo = 0, NO_MAX,
     .doc = "rope_scaling = yarn: Hugging Face's mscale. With rope_mscale_all_dim, cos and sin "
            "are times m(mscale) / m(mscale_all_dim), m(s) = 0.1 s ln(rope_factor) + 1, instead of "
            "m(1); 0 = not given.",
     SHAPES_IF(cfgm_yarn)},
    {.name = "model.rope_mscale_all_dim", .type = CFGK_FLOAT, FIELD(model.rope_mscale_all_dim),
     .def = "0", .lo = 0, NO_MAX,
     .doc = "rope_scaling = yarn: Hugging Face's mscale_all_dim; with MLA the attention scores "
            "are also times m(mscale_all_dim)^2 (DeepSeek's softmax scale); 0 = not given.",
     SHAPES_IF(cfgm_yarn)},
    /* multi-token prediction (docs/models.md "Multi-token prediction"; src/model/mtp.c) */
    {.name = "model.num_nextn_predict_layers", .type = CFGK_INT,
     FIELD(model.num_nextn_predict_layers), .def = "0", .ilo = 0, .ihi = 16,
     .doc = "Multi-token prediction (DeepSeek-V3; Hugging Face's num_nextn_predict_layers): D "
            "extra modules after the last layer, module k (1..D) predicting token i + k + 1 from "
            "module k - 1's output (the last layer's for k = 1) and the embedding of token i + k, "
            "through a decoder layer of its own and the shared head; trained beside the model "
            "(model.mtp_loss_weight), skipped at generation and in evaluations. 0 = none.",
     SHAPES},
    {.name = "model.mtp_loss_weight", .type = CFGK_FLOAT, FIELD(model.mtp_loss_weight),
     .def = "0.3", .lo = 0, NO_MAX,
     .doc = "Multi-token prediction: the objective is the loss plus this times the mean of the "
            "MTP depths' losses (DeepSeek-V3: 0.3 for its first 10T tokens, then 0.1).",
     RUNS},
    {.name = "model.moe_scoring", .type = CFGK_ENUM, FIELD(model.moe_scoring), .def = "softmax",
     ENUM(moe_scoring_names),
     .doc = "The router's scores of the experts: `softmax` over the logits (Mixtral, Qwen, "
            "DeepSeek-V2) or `sigmoid` of each logit (DeepSeek-V3, Kimi K2: Hugging Face's "
            "scoring_func; docs/moe.md \"DeepSeek's router\"). A token's weights are its chosen "
            "experts' scores (normalised with model.moe_norm_topk).",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_topk_method", .type = CFGK_ENUM, FIELD(model.moe_topk_method),
     .def = "greedy", ENUM(moe_topk_names),
     .doc = "How the experts are chosen (DeepSeek's topk_method): `greedy` the top_k scores; "
            "`group_limited_greedy` (V2) the top_k among the model.moe_topk_group groups of the "
            "model.moe_n_group with the highest best score; `noaux_tc` (V3) with a per-expert bias "
            "(tensor `routercorr`, Hugging Face's e_score_correction_bias) added to the scores "
            "for the choice only, the groups ranked by the sum of their two highest, the bias "
            "moved after each step towards balance (model.moe_bias_update_rate).",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_n_group", .type = CFGK_INT, FIELD(model.moe_n_group), .def = "1",
     .ilo = 1, .ihi = 4096,
     .doc = "Expert groups of group-limited routing (DeepSeek's n_group; V3: 8), dividing "
            "model.moe_experts; 1 = none.",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_topk_group", .type = CFGK_INT, FIELD(model.moe_topk_group), .def = "1",
     .ilo = 1, .ihi = 4096,
     .doc = "The groups a token's experts come from (DeepSeek's topk_group; V3: 4), at most "
            "model.moe_n_group.",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_routed_scaling", .type = CFGK_FLOAT, FIELD(model.moe_routed_scaling),
     .def = "1", .lo = 0, .lo_open = 1, NO_MAX,
     .doc = "The routed experts' weights times this (DeepSeek's routed_scaling_factor; V3: 2.5); "
            "the shared expert's output is not scaled.",
     SHAPES_IF(cfgm_moe)},
    {.name = "model.moe_bias_update_rate", .type = CFGK_FLOAT,
     FIELD(model.moe_bias_update_rate), .def = "0.001", .lo = 0, NO_MAX,
     .doc = "Auxiliary-loss-free balancing (model.moe_topk_method = \"noaux_tc\"): after each "
            "applied step every expert's correction bias moves by this towards balance, up when "
            "it got fewer tokens than the layer's mean, down when more (DeepSeek-V3: 0.001); 0 = "
            "frozen. Not a Hugging Face key; equal on every rank.",
     RUNS},
    {.name = "model.moe_dense_layers", .type = CFGK_INT, FIELD(model.moe_dense_layers),
     .def = "0", .ilo = 0, INT32_ONLY,
     .doc = "The first this many layers keep the dense MLP of model.mlp (DeepSeek's "
            "first_k_dense_replace; V3: 3); the others are MoE as model.moe_every says.",
     SHAPES_IF(cfgm_moe)},
