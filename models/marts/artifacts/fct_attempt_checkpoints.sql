-- Checkpoints of every started job attempt, its declared policy against the gaps observed, and the work an
-- interruption lost. Only ok checkpoints count: a failed write saves nothing.
--  - the allocator names the attempt; an MLflow record has none, so it belongs to the job's attempt whose
--    [start, end] (a running one: to the data's end) holds its time (the latest started, if two do)
--  - max_gap_s: the longest stretch without an ok checkpoint from the start to the last ok checkpoint
--    (start -> first, then between consecutive ones); end_gap_s: from the last ok checkpoint (or the
--    start) to the end, or to the data's end while running = the checkpoint's age then
--  - policy interval (spec checkpoint_policy): hourly = 1 h, every N s/min/hours = N of them; every N steps
--    and each/every epoch have no time interval and are not judged; none/never/false/no is none
--  - is_policy_breach: a training attempt with a time interval that ran longer than interval + grace_s and
--    wrote no ok checkpoint, or went longer than interval x gap_tolerance without one (max_gap_s or end_gap_s)
--  - work lost: an attempt ended by a failure cause of fct_attempt_outcomes (preempted, reclaimed, capped,
--    hardware, time_limit, out_of_memory, user_code, unknown) lost its GPUs' time since its last ok checkpoint,
--    else since its start; a checkpoint written after the end (a preemption's grace) saved everything
--
-- merged by attempt (macros/build_window.sql): a build re-reads the attempts running or ended at or after the
-- window's start (a running one is judged to the data's end) and those of jobs with a checkpoint record in it
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_checkpoint_attempts', window_key='source, job_id, attempt') }}
with rebuilt as (
  select source, job_id, attempt from {{ ref('fct_job_attempts') }}
  where is_started
    and {{ in_window_checkpoint_attempts() }}
),

-- every started attempt of those jobs: an MLflow record goes to the latest started whose span holds it
attempts as (
  select *, (source, job_id, attempt) in (select source, job_id, attempt from rebuilt) as is_rebuilt
  from {{ ref('fct_job_attempts') }}
  where is_started
    and (source, job_id) in (select source, job_id from rebuilt)
),

jobs as (
  select * from {{ ref('dim_jobs') }}
  where (source, job_id) in (select source, job_id from attempts)
),

outcomes as (
  select * from {{ ref('fct_attempt_outcomes') }}
  where (source, job_id, attempt) in (select source, job_id, attempt from attempts)
),

checkpoint_events as (
  select * from {{ ref('stg_scheduler__artifacts') }}
  where kind = 'checkpoint'
    and job_id in (select job_id from attempts)
),

as_of as (
  select max(as_of_at) as as_of_at from {{ ref('dim_days') }}
),

params as (
  select 600 as grace_s, 1.5 as gap_tolerance
),

attempt_gpus as (
  select source, job_id, attempt, sum(fraction) as gpus
  from {{ ref('fct_allocations') }}
  where (source, job_id, attempt) in (select source, job_id, attempt from attempts)
  group by source, job_id, attempt
),

spans as (
  select
    t.source,
    t.job_id,
    t.attempt,
    t.started_at,
    t.ended_at,
    coalesce(t.ended_at, a.as_of_at) as observed_until_at,
    t.is_rebuilt
  from attempts t
  cross join as_of a
),

-- the source named the attempt
numbered as (
  select s.source, s.job_id, s.attempt, e.occurred_at, e.status
  from checkpoint_events e
  join spans s
    on s.job_id = e.job_id
    and s.attempt = e.attempt
    and (e.job_source is null or s.source = e.job_source)
  where e.attempt is not null
),

-- MLflow: the attempt running when the checkpoint was written
timed as (
  select s.source, s.job_id, s.attempt, e.occurred_at, e.status
  from checkpoint_events e
  join spans s
    on s.job_id = e.job_id
    and (e.job_source is null or s.source = e.job_source)
    and e.occurred_at >= s.started_at
    and e.occurred_at <= s.observed_until_at
  where e.attempt is null
  qualify row_number() over (partition by e.source, e.event_id, s.source order by s.started_at desc) = 1
),

checkpoints as (
  select * from numbered
  union all
  select * from timed
),

ok_gaps as (
  select
    c.source,
    c.job_id,
    c.attempt,
    c.occurred_at,
    greatest(epoch(c.occurred_at - coalesce(
      lag(c.occurred_at) over (partition by c.source, c.job_id, c.attempt order by c.occurred_at),
      s.started_at
    )), 0) as gap_s
  from checkpoints c
  join spans s using (source, job_id, attempt)
  where c.status = 'ok'
),

per_attempt as (
  select
    c.source,
    c.job_id,
    c.attempt,
    count(*) filter (where c.status = 'ok') as checkpoints_ok,
    count(*) filter (where c.status <> 'ok') as checkpoints_failed
  from checkpoints c
  group by c.source, c.job_id, c.attempt
),

ok_per_attempt as (
  select
    source,
    job_id,
    attempt,
    min(occurred_at) as first_ok_checkpoint_at,
    max(occurred_at) as last_ok_checkpoint_at,
    max(gap_s) as max_gap_s,
    list(occurred_at order by occurred_at) as ok_checkpoint_times
  from ok_gaps
  group by source, job_id, attempt
),

policies as (
  select
    source,
    job_id,
    checkpoint_policy,
    lower(trim(coalesce(checkpoint_policy, ''))) as policy,
    regexp_extract(
      lower(trim(coalesce(checkpoint_policy, ''))),
      '^every\s*([0-9]+(?:\.[0-9]+)?)?\s*(s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)$', ['n', 'unit']
    ) as every_time
  from jobs
),

intervals as (
  select
    source,
    job_id,
    checkpoint_policy,
    case
      when policy in ('', 'none', 'never', 'false', 'no') then 'none'
      when policy = 'hourly' or every_time.unit <> '' then 'time'
      when regexp_matches(policy, '^every\s*[0-9]*\s*(steps?|iterations?|iters?)$') then 'steps'
      when regexp_matches(policy, '^(each|every)\s*[0-9]*\s*epochs?$') then 'epochs'
      else 'other'
    end as checkpoint_policy_kind,
    case
      when policy = 'hourly' then 3600.0
      when every_time.unit <> '' then coalesce(try_cast(nullif(every_time.n, '') as double), 1.0) * case
        when every_time.unit like 'h%' then 3600
        when every_time.unit like 'm%' then 60
        else 1
      end
    end as checkpoint_interval_s
  from policies
),

joined as (
  select
    s.source,
    s.job_id,
    s.attempt,
    j.tenant,
    j.queue,
    j.template,
    j.gpu_model,
    s.started_at,
    s.ended_at,
    s.ended_at is null as is_running,
    s.observed_until_at,
    o.cause,
    o.is_failure,
    coalesce(g.gpus, 0) as gpus,
    i.checkpoint_policy,
    coalesce(i.checkpoint_policy_kind, 'none') as checkpoint_policy_kind,
    i.checkpoint_interval_s,
    coalesce(pa.checkpoints_ok, 0) as checkpoints_ok,
    coalesce(pa.checkpoints_failed, 0) as checkpoints_failed,
    ok.first_ok_checkpoint_at,
    ok.last_ok_checkpoint_at,
    ok.max_gap_s,
    ok.ok_checkpoint_times,
    greatest(epoch(s.observed_until_at - coalesce(ok.last_ok_checkpoint_at, s.started_at)), 0) as end_gap_s,
    epoch(s.observed_until_at - s.started_at) as observed_run_s,
    i.checkpoint_interval_s * p.gap_tolerance as max_allowed_gap_s,
    p.grace_s
  from spans s
  cross join params p
  left join jobs j using (source, job_id)
  left join intervals i using (source, job_id)
  left join outcomes o using (source, job_id, attempt)
  left join attempt_gpus g using (source, job_id, attempt)
  left join per_attempt pa using (source, job_id, attempt)
  left join ok_per_attempt ok using (source, job_id, attempt)
  where s.is_rebuilt
),

judged as (
  select
    *,
    case
      when coalesce(template, '') <> 'training' or checkpoint_interval_s is null
        or observed_run_s <= checkpoint_interval_s + grace_s then null
      when checkpoints_ok = 0 then 'no_checkpoint'
      when greatest(max_gap_s, end_gap_s) > max_allowed_gap_s then 'gap'
    end as policy_breach_kind,
    case
      when is_failure then greatest(epoch(ended_at - coalesce(last_ok_checkpoint_at, started_at)), 0)
      else 0
    end as work_lost_s
  from joined
),

final as (
  select
    source,
    job_id,
    attempt,
    tenant,
    queue,
    template,
    gpu_model,
    started_at,
    ended_at,
    is_running,
    observed_until_at,
    cause,
    coalesce(is_failure, false) as is_failure,
    gpus,
    checkpoint_policy,
    checkpoint_policy_kind,
    checkpoint_interval_s,
    max_allowed_gap_s,
    checkpoints_ok,
    checkpoints_failed,
    checkpoints_ok > 0 as has_checkpoint,
    first_ok_checkpoint_at,
    last_ok_checkpoint_at,
    ok_checkpoint_times,
    max_gap_s,
    end_gap_s,
    policy_breach_kind is not null as is_policy_breach,
    policy_breach_kind,
    work_lost_s,
    gpus * work_lost_s / 3600.0 as work_lost_gpu_hours
  from judged
)

select * from final
