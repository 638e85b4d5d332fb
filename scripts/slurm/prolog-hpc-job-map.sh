#!/bin/bash
# Slurm Prolog: record the job against each of its GPUs for dcgm-exporter's HPC job mapping
# (dcgm-exporter --hpc-job-mapping-dir DIR, or DCGM_HPC_JOB_MAPPING_DIR): one file per GPU
# index, one job id a line. dcgm-exporter then labels that GPU's samples hpc_job="<id>", which
# is what gpupool's telemetry join checks a Slurm allocation against.
# slurmd sets SLURM_JOB_GPUS (the node's GPU indices of the job) for Prolog and Epilog.
# A failing prolog drains the node, so this never fails: problems go to slurmd's log.
MAPDIR=${DCGM_HPC_JOB_MAPPING_DIR:-/run/dcgm-job-map}
[ -n "${SLURM_JOB_GPUS:-}" ] && [ -n "${SLURM_JOB_ID:-}" ] || exit 0
mkdir -p "$MAPDIR" && chmod 755 "$MAPDIR" || { echo "prolog: cannot create $MAPDIR" >&2; exit 0; }
(
  flock 9
  for gpu in ${SLURM_JOB_GPUS//,/ }; do
    grep -qx "$SLURM_JOB_ID" "$MAPDIR/$gpu" 2>/dev/null || echo "$SLURM_JOB_ID" >> "$MAPDIR/$gpu"
  done
) 9>"$MAPDIR/.lock" || echo "prolog: could not update $MAPDIR for job $SLURM_JOB_ID" >&2
exit 0
