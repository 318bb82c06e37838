#!/usr/bin/env bash
# Objectives as a table (src/run/objective.h, docs/training.md "Objectives"): the trainer
# (src/train/trainer*.c), the figures (src/telemetry/metrics.c), the data loader
# (src/data/dataloader*.c), the device's glue (src/train/train_gpu.c) and the plan (src/plan/)
# ask the run's table and name no TSR_OBJ_ value; in all of src/ only the config (src/config/)
# and the choice of the table (src/train/objectives.c objective_of) name one, and objective_of is
# called once, by trainer_init. First a synthetic tree with each kind of finding, then the real
# tree, which must be clean.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
tap_plan 6

# scan ROOT: prints one line per finding (file:line: text); exits 1 when there is any
scan() {
    local root=$1 f users=()
    for f in "$root"/src/train/trainer*.c "$root"/src/train/trainer*.h "$root/src/telemetry/metrics.c" \
        "$root"/src/data/dataloader*.c "$root/src/train/train_gpu.c" "$root"/src/plan/*.c; do
        [[ -f $f ]] && users+=("$f")
    done
    {
        ((${#users[@]})) && grep -nH 'TSR_OBJ_' "${users[@]}"
        grep -rnE --include='*.c' --include='*.h' --include='*.cu' 'TSR_OBJ_' "$root/src" |
            grep -vE "^$root/src/config/|^$root/src/train/objectives\.c:" |
            grep -vE "^$root/src/(train/(trainer[^/]*|train_gpu\.c)|data/dataloader[^/]*\.c|telemetry/metrics\.c|plan/[^/]*\.c):"
        grep -rnE --include='*.c' 'objective_of[[:space:]]*\(' "$root/src" |
            grep -vE "^$root/src/train/objectives\.c:|^$root/src/train/trainer(_init)?\.c:"
        true # (a grep that finds nothing is not a failure of the scan: pipefail)
    } | sed "s|^$root/||" | grep . && return 1
    return 0
}

# tree DIR: the table's users as they should be
tree() {
    mkdir -p "$1/src/train" "$1/src/telemetry" "$1/src/plan" "$1/src/config" "$1/src/data"
    printf 'typedef enum { TSR_OBJ_LM = 0, TSR_OBJ_DPO, TSR_OBJ_GRPO } tsr_objective_kind;\n' \
        > "$1/src/config/config.h"
    printf 'const tsr_objective *objective_of(tsr_objective_kind k) {\n    return k == TSR_OBJ_DPO ? &objective_dpo : &objective_lm;\n}\n' \
        > "$1/src/train/objectives.c"
    printf 'void f(tsr_trainer *t) {\n    t->objective = objective_of(cfg->objective);\n    if (t->objective->pass) t->objective->pass(t, 1);\n}\n' \
        > "$1/src/train/trainer.c"
    printf 'int g(const tsr_objective *o) { return o->pairs; }\n' > "$1/src/data/dataloader.c"
    printf 'void h(tsr_trainer *t) { if (t->objective->step_figures) log(t); }\n' > "$1/src/telemetry/metrics.c"
}

tree "$TMP/clean"
scan_clean "$TMP/clean" "a tree whose users ask the table passes"

tree "$TMP/users"
printf 'void h(tsr_trainer *t) {\n    if (t->cfg.objective == TSR_OBJ_GRPO) grpo_log(t);\n}\n' > "$TMP/users/src/telemetry/metrics.c"
printf '/* a new file of the trainer */\nint k(const tsr_config *c) { return c->objective != TSR_OBJ_LM; }\n' > "$TMP/users/src/train/trainer_run.c"
scan_finds "$TMP/users" "a TSR_OBJ_ test in metrics.c or a trainer file fails"
out_has "the findings name the file and line of each test" \
    "^src/telemetry/metrics.c:2:.*TSR_OBJ_GRPO" "^src/train/trainer_run.c:2:.*TSR_OBJ_LM"

tree "$TMP/elsewhere"
printf 'int m(const tsr_config *c) { return c->objective == TSR_OBJ_DPO; }\n' > "$TMP/elsewhere/src/train/checkpointing_save.c"
scan_finds "$TMP/elsewhere" "a TSR_OBJ_ value named anywhere else in src/ but the config and objective_of fails"

tree "$TMP/choice"
printf 'void n(tsr_trainer *t) { const tsr_objective *o = objective_of(t->cfg.objective); }\n' > "$TMP/choice/src/data/dataloader.c"
scan_finds "$TMP/choice" "a second choice of the table (objective_of outside trainer_init) fails"

scan_clean "$TSR_ROOT" "the real tree: only the config and objective_of name an objective kind"
tap_done
