-- Why each ended job attempt ended: one cause per attempt, with the evidence that decided it.
-- The first rule that applies wins:
--  completed      end state COMPLETED
--  reclaimed      a reclaim or preemption in the reclaim ledger freed this attempt (governance or an
--                 operator), or the allocator's end reason 'reclaimed: ...'
--  capped         ended TIMEOUT/DEADLINE after an applied enforcement.cap_runtime on the job during the attempt
--  cancelled      end state CANCELLED (not reclaimed)
--  preempted      ended by a preempt event or state PREEMPTED (the scheduler's own preemption)
--  hardware       the node went down (NODE_FAIL, BOOT_FAIL), or a hardware fault (fct_gpu_health_events
--                 .is_hardware_fault: a non-application XID classed hardware/driver, ECC DBE, row-remap
--                 failure) on one of its GPUs from the start minute to the end (the end's telemetry
--                 minute included; its node going down is one: fct_host_outages, signal host_down), or
--                 in the minute of the GPU's first scrape after the end when that
--                 scrape came within one scrape interval plus a minute of the end: a fault reaches
--                 telemetry only at the next scrape. The scrape interval is the GPU's gap between its
--                 last two health scrapes at or before the end (within next_scrape_lookback_minutes of
--                 it), else between its first two after the end, at most next_scrape_max_interval_minutes
--                 (macros/build_window.sql). A fault seen later than that is not its cause
--  time_limit     TIMEOUT or DEADLINE (its own or the queue's run-time limit)
--  out_of_memory  OUT_OF_MEMORY, exit code 137 (SIGKILL, the OOM killer's signal), or device memory used
--                 >= oom_memory_pct of the GPU's in the oom_window_minutes before the end
--  user_code      any other non-zero exit code (no hardware evidence)
--  unknown        nothing above (e.g. FAILED without an exit code)
--
-- merged by attempt (macros/build_window.sql): a build re-decides the attempts that ended at or after the
-- window's start less next_scrape_max_interval_minutes + 1 (ended_attempts_from_at: a scrape in the window
-- is evidence for an attempt that ended just before it) and those on a host whose outage ended in the window,
-- reading their allocations' last minutes only (from their first end - oom_window_minutes) and the health
-- scrapes from there - next_scrape_lookback_minutes
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_ended_attempts', window_key='source, job_id, attempt') }}
{%- set oom_window_minutes = 5 %}
{%- set next_scrape_lookback_minutes = 30 %}
{#- the earliest end of the attempts re-decided: a constant bound for the reads of scrapes and minutes #}
{%- set first_end_at = window_floor_at(
      'select min(ended_at) from ' ~ ref('fct_job_attempts') ~ ' where ended_at is not null and ' ~ in_window_ended_attempts()) %}
with attempts as (
  select * from {{ ref('fct_job_attempts') }}
  where is_started and ended_at is not null
    and {{ in_window_ended_attempts() }}
),

jobs as (
  select * from {{ ref('dim_jobs') }}
  where (source, job_id) in (select source, job_id from attempts)
),

allocations as (
  select * from {{ ref('fct_allocations') }}
  where (source, job_id, attempt) in (select source, job_id, attempt from attempts)
),

-- each attempt's GPUs, once however many allocations it held on one
attempt_placements as (
  select distinct source, job_id, attempt, host, gpu from allocations
),

health_faults as (
  select * from {{ ref('fct_gpu_health_events') }}
  where is_hardware_fault
    and (host, gpu) in (select host, gpu from allocations)
),

ledger as (
  select * from {{ ref('fct_reclaim_ledger') }}
  where action_kind in ('reclaim', 'preempt')
),

caps as (
  select object_name as job_id, occurred_at
  from {{ ref('fct_audit_events') }}
  where action = 'enforcement.cap_runtime' and decision = 'applied'
),

params as (
  select
    98.0 as oom_memory_pct,
    {{ oom_window_minutes }} as oom_window_minutes,
    {{ next_scrape_max_interval_minutes() }} as next_scrape_max_interval_minutes,
    {{ next_scrape_lookback_minutes }} as next_scrape_lookback_minutes
),

-- each GPU's health scrapes (the times its health series were sampled), with the two before and the one after
gpu_scrapes as (
  select
    host,
    gpu,
    sampled_at,
    lag(sampled_at) over w as previous_at,
    lag(sampled_at, 2) over w as second_previous_at,
    lead(sampled_at) over w as next_at
  from (
    select distinct host, gpu, sampled_at
    from {{ ref('stg_dcgm__health') }}
    where (host, gpu) in (select host, gpu from allocations)
    {%- if is_incremental() %}
      -- every attempt here ended at or after first_end_at: a constant bound prunes the samples
      and sampled_at >= {{ first_end_at }} - to_minutes({{ next_scrape_lookback_minutes }})
    {%- endif %}
  ) scrapes
  window w as (partition by host, gpu order by sampled_at)
),

-- each attempt's GPUs' first scrape after its end, and whether it came within one scrape interval plus a
-- minute of the end (the interval: the gap between the last two scrapes at or before the end, read within
-- next_scrape_lookback_minutes of it, else between the first two after the end; at most
-- next_scrape_max_interval_minutes)
next_scrapes as (
  select
    t.source,
    t.job_id,
    t.attempt,
    al.host,
    al.gpu,
    s.sampled_at as next_scrape_at,
    s.sampled_at <= t.ended_at + to_minutes(1) + least(
      coalesce(
        case when s.second_previous_at >= t.ended_at - to_minutes(p.next_scrape_lookback_minutes)
          then s.previous_at - s.second_previous_at end,
        s.next_at - s.sampled_at
      ),
      to_minutes(p.next_scrape_max_interval_minutes)
    ) as is_evidence
  from attempts t
  cross join params p
  join attempt_placements al using (source, job_id, attempt)
  asof join gpu_scrapes s
    on s.host = al.host
    and s.gpu = al.gpu
    and s.sampled_at > t.ended_at
),

-- the last minute whose faults are evidence for an attempt's GPU: that of its first scrape after the end when
-- it counts, else the end
evidence_ends as (
  select
    t.source,
    t.job_id,
    t.attempt,
    al.host,
    al.gpu,
    greatest(t.ended_at, case when n.is_evidence then date_trunc('minute', n.next_scrape_at) end) as evidence_end_at,
    case when n.is_evidence then n.next_scrape_at end as next_scrape_at
  from attempts t
  join attempt_placements al using (source, job_id, attempt)
  left join next_scrapes n using (source, job_id, attempt, host, gpu)
),

attempt_gpus as (
  select
    source,
    job_id,
    attempt,
    sum(fraction) as gpus,
    sum(allocated_gpu_hours) as gpu_hours,
    min(gpu_model) as gpu_model
  from allocations
  group by source, job_id, attempt
),

-- its node went down while the attempt ran (up to the end's evidence minute): a hardware fault of every GPU of
-- the node (marts.fct_host_outages, signal host_down), at the outage's first minute within the attempt
host_down_evidence as (
  select
    e.source,
    e.job_id,
    e.attempt,
    e.host,
    e.gpu,
    greatest(o.down_from_at, date_trunc('minute', t.started_at)) as minute_at
  from attempts t
  join evidence_ends e using (source, job_id, attempt)
  join {{ ref('fct_host_outages') }} o
    on o.host = e.host
    and o.down_from_at <= e.evidence_end_at
    and o.back_at > t.started_at
),

hardware_evidence as (
  select
    f.source,
    f.job_id,
    f.attempt,
    list(
      struct_pack(host := f.host, gpu := f.gpu, minute_at := f.minute_at, signal := f.signal, xid := f.xid)
      order by f.minute_at, f.host, f.gpu, f.signal
    ) as faults
  from (
    select t.source, t.job_id, t.attempt, f.host, f.gpu, f.minute_at, f.signal, f.xid
    from attempts t
    join evidence_ends e using (source, job_id, attempt)
    join health_faults f
      on f.host = e.host
      and f.gpu = e.gpu
      and f.minute_at >= date_trunc('minute', t.started_at)
      and f.minute_at <= e.evidence_end_at
    union all
    select source, job_id, attempt, host, gpu, minute_at, 'host_down', cast(null as integer)
    from host_down_evidence
  ) f
  group by f.source, f.job_id, f.attempt
),

-- the first scrapes after the end that counted as evidence (their faults are in hardware_faults)
next_scrape_evidence as (
  select source, job_id, attempt, min(next_scrape_at) as next_scrape_at
  from evidence_ends
  where next_scrape_at is not null
  group by source, job_id, attempt
),

memory_evidence as (
  select
    t.source,
    t.job_id,
    t.attempt,
    max(100.0 * a.fb_used_mib / nullif(u.memory_mib, 0)) as peak_fb_used_pct_before_end
  from attempts t
  cross join params p
  join allocations using (source, job_id, attempt)
  join {{ ref('fct_allocation_usage') }} u using (allocation_id)
  join {{ ref('fct_allocation_activity') }} a using (allocation_id)
  where a.minute_at >= t.ended_at - to_minutes(p.oom_window_minutes)
    {%- if is_incremental() %}
    -- every attempt here ended at or after first_end_at: a constant bound prunes the minutes
    and a.minute_at >= {{ first_end_at }} - to_minutes({{ oom_window_minutes }})
    {%- endif %}
    and a.minute_at <= t.ended_at
  group by t.source, t.job_id, t.attempt
),

reclaims as (
  select
    engine as source,
    job_id,
    attempt,
    arg_min(ledger_id, acted_at) as ledger_id,
    arg_min(action_kind, acted_at) as ledger_action,
    arg_min(policy, acted_at) as ledger_policy
  from ledger
  where attempt is not null
  group by engine, job_id, attempt
),

attempt_caps as (
  select t.source, t.job_id, t.attempt, min(c.occurred_at) as cap_applied_at
  from attempts t
  join caps c
    on c.job_id = t.job_id
    and c.occurred_at >= t.started_at
    and c.occurred_at <= t.ended_at
  group by t.source, t.job_id, t.attempt
),

joined as (
  select
    t.source,
    t.job_id,
    t.attempt,
    j.tenant,
    j.queue,
    j.template,
    coalesce(g.gpu_model, j.gpu_model, 'unknown') as gpu_model,
    t.started_at,
    t.ended_at,
    t.end_event_type,
    t.end_state,
    t.end_reason,
    t.exit_code,
    coalesce(g.gpus, 0) as gpus,
    coalesce(g.gpu_hours, 0) as gpu_hours,
    h.faults as hardware_faults,
    ns.next_scrape_at,
    m.peak_fb_used_pct_before_end,
    r.ledger_id,
    r.ledger_action,
    r.ledger_policy,
    c.cap_applied_at,
    p.oom_memory_pct
  from attempts t
  cross join params p
  left join jobs j using (source, job_id)
  left join attempt_gpus g using (source, job_id, attempt)
  left join hardware_evidence h using (source, job_id, attempt)
  left join next_scrape_evidence ns using (source, job_id, attempt)
  left join memory_evidence m using (source, job_id, attempt)
  left join reclaims r using (source, job_id, attempt)
  left join attempt_caps c using (source, job_id, attempt)
),

decided as (
  select
    *,
    case
      when end_state = 'COMPLETED' then 'completed'
      when ledger_id is not null or coalesce(end_reason, '') like 'reclaimed%' then 'reclaimed'
      when end_state in ('TIMEOUT', 'DEADLINE') and cap_applied_at is not null then 'capped'
      when end_state = 'CANCELLED' then 'cancelled'
      when end_event_type = 'preempt' or end_state = 'PREEMPTED' then 'preempted'
      when end_state in ('NODE_FAIL', 'BOOT_FAIL') or hardware_faults is not null then 'hardware'
      when end_state in ('TIMEOUT', 'DEADLINE') then 'time_limit'
      when end_state = 'OUT_OF_MEMORY' or exit_code = 137 or peak_fb_used_pct_before_end >= oom_memory_pct
        then 'out_of_memory'
      when exit_code <> 0 then 'user_code'
      else 'unknown'
    end as cause
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
    end_state,
    exit_code,
    gpus,
    gpu_hours,
    cause,
    cause not in ('completed', 'cancelled') as is_failure,
    cause in ('user_code', 'out_of_memory') as is_user_fault,
    case when cause not in ('completed', 'cancelled') then gpu_hours else 0 end as gpu_hours_lost,
    cast(json_object(
      'cause', cause,
      'end_event_type', end_event_type,
      'end_state', end_state,
      'end_reason', end_reason,
      'exit_code', exit_code,
      'hardware_faults', hardware_faults,
      'next_scrape_at', case when hardware_faults is not null then next_scrape_at end,
      'reclaim_ledger_id', ledger_id,
      'reclaim_action', ledger_action,
      'reclaim_policy', ledger_policy,
      'cap_applied_at', cap_applied_at,
      'peak_fb_used_pct_before_end', peak_fb_used_pct_before_end
    ) as varchar) as cause_evidence
  from decided
)

select * from final
