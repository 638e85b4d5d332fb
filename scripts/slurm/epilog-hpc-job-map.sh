#!/bin/bash
# Slurm Epilog: remove the job from dcgm-exporter's HPC job mapping files (see the prolog).
MAPDIR=${DCGM_HPC_JOB_MAPPING_DIR:-/run/dcgm-job-map}
[ -n "${SLURM_JOB_GPUS:-}" ] && [ -n "${SLURM_JOB_ID:-}" ] && [ -d "$MAPDIR" ] || exit 0
(
  flock 9
  for gpu in ${SLURM_JOB_GPUS//,/ }; do
    file="$MAPDIR/$gpu"
    [ -f "$file" ] || continue
    grep -vx "$SLURM_JOB_ID" "$file" > "$file.tmp" || true
    if [ -s "$file.tmp" ]; then mv "$file.tmp" "$file"; else rm -f "$file" "$file.tmp"; fi
  done
) 9>"$MAPDIR/.lock" || echo "epilog: could not update $MAPDIR for job $SLURM_JOB_ID" >&2
exit 0
