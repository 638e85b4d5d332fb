"""Dagster assets, by domain."""
import warnings

import dagster as dg

# Every partitioned asset lands or builds a range of days in one run (BackfillPolicy.single_run), a
# parameter Dagster 1.13 marks beta: its notice, printed by every process that loads these modules (each
# `gpupool` command, each ingest worker), says nothing a user of gpupool can act on.
warnings.filterwarnings("ignore", message="Parameter `backfill_policy` of function", category=dg.BetaWarning)
