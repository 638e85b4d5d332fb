-- Checkpoint age at any time: one row per training attempt per UTC hour it ran in, measured at the hour's
-- end (or the attempt's end, or the data's end while it runs): the time since its last ok checkpoint at or
-- before then, else since its start. Within an hour the age grows with the clock and restarts at each
-- checkpoint; the latest row of a running attempt is its age now.
with attempts as (
  select * from {{ ref('fct_attempt_checkpoints') }}
  where template = 'training'
),

hours as (
  select
    *,
    unnest(range(date_trunc('hour', started_at), observed_until_at, interval 1 hour)) as hour_at
  from attempts
),

measured as (
  select
    *,
    least(hour_at + interval 1 hour, observed_until_at) as measured_at
  from hours
),

aged as (
  select
    *,
    list_max(list_filter(ok_checkpoint_times, lambda t: t <= measured_at)) as last_ok_checkpoint_by_then_at
  from measured
),

final as (
  select
    hour_at,
    source,
    job_id,
    attempt,
    tenant,
    queue,
    gpu_model,
    gpus,
    checkpoint_policy,
    checkpoint_interval_s,
    is_running,
    measured_at,
    last_ok_checkpoint_by_then_at as last_ok_checkpoint_at,
    epoch(measured_at - coalesce(last_ok_checkpoint_by_then_at, started_at)) as checkpoint_age_s,
    last_ok_checkpoint_by_then_at is not null as has_checkpoint,
    coalesce(epoch(measured_at - coalesce(last_ok_checkpoint_by_then_at, started_at)) > max_allowed_gap_s, false)
      as is_checkpoint_overdue
  from aged
)

select * from final
