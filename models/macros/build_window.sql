{#- The build's window: [window_start, window_end), the days whose rows a build may change
    (pipelines/build_window.py), passed as --vars by pipelines/build.py and pipelines/assets/marts.py.
    An incremental model (is_incremental()) rebuilds only the rows its window reaches: the days in it,
    the jobs and allocations alive in it (window_jobs, window_allocations). Without the vars (a plain
    `dbt build`) the window is all time and an incremental model rebuilds every row. -#}

{% macro window_start_at() -%}
  {{ return("timestamp '" ~ _window_day('window_start', '1970-01-01') ~ "'") }}
{%- endmacro %}

{% macro window_end_at() -%}
  {{ return("timestamp '" ~ _window_day('window_end', '2100-01-01') ~ "'") }}
{%- endmacro %}

{% macro window_start_day() -%}
  {{ return("date '" ~ _window_day('window_start', '1970-01-01') ~ "'") }}
{%- endmacro %}

{% macro window_end_day() -%}
  {{ return("date '" ~ _window_day('window_end', '2100-01-01') ~ "'") }}
{%- endmacro %}

{#- a var is spliced into SQL: only a calendar date gets through -#}
{% macro _window_day(name, default) -%}
  {%- set value = var(name, default) | string -%}
  {%- do return(modules.datetime.date.fromisoformat(value).isoformat()) -%}
{%- endmacro %}

{#- The jobs whose rows the build may change, as (source, job_id): an attempt that ended at or after
    the window's start or has not ended (its rows run to the data's end), or a job event or placement at
    or after it. A job that ended before the window keeps its rows: nothing it reads can have changed
    (the window opens at the earliest changed row's time: pipelines/build_window.py). -#}
{% macro window_jobs() -%}
  select source, job_id
  from {{ ref('fct_job_attempts') }}
  where ended_at is null or ended_at >= {{ window_start_at() }}
  union
  {{ window_jobs_from_events() }}
{%- endmacro %}

{#- The jobs with a scheduler event or a placement at or after the window's start. -#}
{% macro window_jobs_from_events() -%}
  select source, job_id from {{ ref('stg_scheduler__job_events') }} where occurred_at >= {{ window_start_at() }}
  union
  select source, job_id from {{ ref('stg_scheduler__job_gpus') }} where assigned_at >= {{ window_start_at() }}
{%- endmacro %}

{#- The allocations whose rows the build may change: those of window_jobs, and any other alive in the
    window (its effective end at or after the window's start). -#}
{% macro window_allocations() -%}
  select allocation_id
  from {{ ref('fct_allocations') }}
  where effective_ended_at >= {{ window_start_at() }}
    or (source, job_id) in ({{ window_jobs() }})
{%- endmacro %}

{#- Conditions for an incremental model's reads: true on a full refresh (or the model's first build),
    else the rows the window reaches. The subquery is rendered either way so that dbt sees its refs
    when it parses the model (a ref only inside is_incremental() is missed). -#}
{% macro in_window_jobs(keys='source, job_id') -%}
  {%- set jobs = window_jobs() -%}
  {{- return('(' ~ keys ~ ') in (' ~ jobs ~ ')' if is_incremental() else 'true') -}}
{%- endmacro %}

{% macro in_window_jobs_from_events(keys='source, job_id') -%}
  {%- set jobs = window_jobs_from_events() -%}
  {{- return('(' ~ keys ~ ') in (' ~ jobs ~ ')' if is_incremental() else 'true') -}}
{%- endmacro %}

{% macro in_window_allocations(key='allocation_id') -%}
  {%- set allocations = window_allocations() -%}
  {{- return(key ~ ' in (' ~ allocations ~ ')' if is_incremental() else 'true') -}}
{%- endmacro %}

{#- a day column (or a date expression) in the window -#}
{% macro in_window_days(day='day') -%}
  {{- return(day ~ ' >= ' ~ window_start_day() ~ ' and ' ~ day ~ ' < ' ~ window_end_day() if is_incremental() else 'true') -}}
{%- endmacro %}

{#- fct_job_attempts' own jobs: those with an event or placement in the window, and those whose attempt
    the last build left open or ended in the window (their rows change with the data's end, or lose
    an end a correction removed) -#}
{% macro in_window_attempt_jobs(keys='source, job_id') -%}
  {%- set jobs = window_jobs_from_events() -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('(' ~ keys ~ ') in (' ~ jobs ~ ' union select source, job_id from ' ~ this
             ~ ' where ended_at is null or ended_at >= ' ~ window_start_at() ~ ')') -}}
{%- endmacro %}

{#- The incremental strategy 'replace_window': delete the rows the window reaches, then insert the
    model's new rows. Unlike delete+insert, a key the window reaches that has no row any more (an
    allocation a correction removed, a day without rows) loses its old rows too. The model's config
    names the condition, one of the in_window_* macros above (`window`), and its argument
    (`window_key`); the model reads its inputs under the same condition. -#}
{% macro get_incremental_replace_window_sql(arg_dict) -%}
  {%- set condition = context[config.require('window')](config.require('window_key')) -%}
  {%- set columns = get_quoted_csv(arg_dict['dest_columns'] | map(attribute='name')) -%}
  delete from {{ arg_dict['target_relation'] }} where {{ condition }};
  insert into {{ arg_dict['target_relation'] }} ({{ columns }})
  select {{ columns }} from {{ arg_dict['temp_relation'] }}
{%- endmacro %}

{#- Allocation marts (fct_allocations and the marts that read it). -#}

{#- fct_allocations' own jobs: window_jobs(), and the jobs of which the last build left an allocation
    running (its hours run to the data's end, also one whose attempt has no end event) or ending in the
    window (an allocation a correction removed loses its row) -#}
{% macro in_window_allocation_jobs(keys='source, job_id') -%}
  {%- set jobs = window_jobs() -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('(' ~ keys ~ ') in (' ~ jobs ~ ' union select source, job_id from ' ~ this
             ~ ' where ended_at is null or ended_at >= ' ~ window_start_at() ~ ')') -}}
{%- endmacro %}

{#- The rows a job-keyed mart deletes: those of window_jobs(), and those of jobs with no attempt any
    more (a correction removed every event of the job). It reads its inputs under in_window_jobs(): a
    job without attempts has no inputs left. -#}
{% macro in_window_jobs_or_gone(keys='source, job_id') -%}
  {%- set jobs = window_jobs() -%}
  {%- set attempts = ref('fct_job_attempts') -%}
  {{- return('((' ~ keys ~ ') in (' ~ jobs ~ ') or (' ~ keys ~ ') not in (select source, job_id from '
             ~ attempts ~ '))' if is_incremental() else 'true') -}}
{%- endmacro %}

{#- The rows an allocation-keyed mart deletes: those of window_allocations(), and those of allocations
    no longer in fct_allocations (a correction removed them). It reads its inputs under
    in_window_allocations(): a removed allocation has no inputs left. -#}
{% macro in_window_allocations_or_gone(key='allocation_id') -%}
  {%- set allocations = window_allocations() -%}
  {%- set all_allocations = ref('fct_allocations') -%}
  {{- return('(' ~ key ~ ' in (' ~ allocations ~ ') or ' ~ key ~ ' not in (select allocation_id from '
             ~ all_allocations ~ '))' if is_incremental() else 'true') -}}
{%- endmacro %}

{#- a timestamp column from the window's start on (no end: a time series rebuilt from there to the
    data's end) -#}
{% macro in_window_from(at) -%}
  {{- return(at ~ ' >= ' ~ window_start_at() if is_incremental() else 'true') -}}
{%- endmacro %}

{#- a timestamp column in the window: a constant range, which prunes a big table by its zonemaps -#}
{% macro in_window_times(at='minute_at') -%}
  {{- return(at ~ ' >= ' ~ window_start_at() ~ ' and ' ~ at ~ ' < ' ~ window_end_at() if is_incremental() else 'true') -}}
{%- endmacro %}

{#- fct_telemetry_reconciliation: findings of an allocation (allocation_id set) by allocation, the others
    (GPU minutes nobody held) by day -#}
{% macro in_window_findings(columns='day, allocation_id') -%}
  {%- set parts = columns.split(',') -%}
  {%- set day = parts[0].strip() -%}
  {%- set key = parts[1].strip() -%}
  {{- return('((' ~ key ~ ' is null and ' ~ in_window_days(day) ~ ') or (' ~ key ~ ' is not null and '
             ~ in_window_allocations_or_gone(key) ~ '))' if is_incremental() else 'true') -}}
{%- endmacro %}

{#- ==== attempts, waits and pool state (fct_attempt_*, fct_job_artifacts, fct_wait_*, fct_waiting_jobs,
    fct_pool_free_segments). A changed row's time is at or after the window's start
    (pipelines/build_window.py), so a unit whose inputs all lie before it keeps its rows. Each condition
    also names the model's own rows that reach the window (`this`): a unit a correction removed loses them. -#}

{#- rows from the window's start to the data's end (no upper bound): a running state or a wait that runs on
    to the data's end changes on every later day when an earlier one changes -#}
{% macro from_window_start(day='day') -%}
  {{- return(day ~ ' >= ' ~ window_start_day() if is_incremental() else 'true') -}}
{%- endmacro %}

{#- a timestamp literal: the value of `query` (one timestamp, e.g. the earliest start of the units the model
    rebuilds), run when the model is built incrementally, so that a range filter on a per-minute mart prunes
    its row groups by zonemaps (a subquery's value does not); 'infinity' when the query finds none (no unit
    to rebuild); '-infinity' on a full refresh (and when dbt parses the model) -#}
{% macro window_floor_at(query) -%}
  {%- if execute and is_incremental() -%}
    {%- set value = run_query(query).columns[0].values()[0] -%}
    {{- return("timestamp '" ~ (value.strftime('%Y-%m-%d %H:%M:%S.%f') if value is not none else 'infinity') ~ "'") -}}
  {%- endif -%}
  {{- return("timestamp '-infinity'") -}}
{%- endmacro %}

{#- fct_attempt_outcomes: the longest scrape interval the first scrape after an attempt's end may follow it by
    and still be evidence of its cause (the GPU's scrape interval, capped here, plus a minute): one rule for the
    model and its window -#}
{% macro next_scrape_max_interval_minutes() -%}15{%- endmacro %}

{#- the earliest end of an attempt a build re-decides: the window's start less the first scrape after an end
    that may still count (a scrape in the window is evidence for an attempt that ended just before it) -#}
{% macro ended_attempts_from_at() -%}
  {{- return(window_start_at() ~ ' - to_minutes(' ~ next_scrape_max_interval_minutes() ~ ' + 1)') -}}
{%- endmacro %}

{#- fct_attempt_outcomes: the ended attempts whose end is at or after ended_attempts_from_at() (an end before it
    was decided by rows before the window: the attempt's faults and its first scrape after the end, caps,
    ledger entries and last minutes), and those on a host whose outage ended in the window (fct_host_outages:
    an outage is known once the host reports again) and began before their end's evidence could -#}
{% macro in_window_ended_attempts(keys='source, job_id, attempt') -%}
  {%- set attempts = 'select source, job_id, attempt from ' ~ ref('fct_job_attempts')
                     ~ ' where ended_at >= ' ~ ended_attempts_from_at()
                     ~ ' union select t.source, t.job_id, t.attempt from ' ~ ref('fct_job_attempts') ~ ' t'
                     ~ ' join ' ~ ref('fct_allocations') ~ ' a using (source, job_id, attempt)'
                     ~ ' join ' ~ ref('fct_host_outages') ~ ' o on o.host = a.host'
                     ~ ' where o.back_at >= ' ~ window_start_at() ~ ' and t.started_at < o.back_at'
                     ~ ' and t.ended_at >= o.down_from_at - to_minutes(' ~ next_scrape_max_interval_minutes() ~ ' + 1)' -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('(' ~ keys ~ ') in (' ~ attempts ~ ' union select source, job_id, attempt from ' ~ this
             ~ ' where ended_at >= ' ~ ended_attempts_from_at() ~ ')') -}}
{%- endmacro %}

{#- fct_attempt_checkpoints: the started attempts running or ended at or after the window's start (a running
    one is judged up to the data's end), and every attempt of a job with a checkpoint record at or after it
    or delivered in it (an allocator checkpoint written in a preemption's grace, after the end) -#}
{% macro in_window_checkpoint_attempts(keys='source, job_id, attempt') -%}
  {%- set attempts = 'select source, job_id, attempt from ' ~ ref('fct_job_attempts')
                     ~ ' where is_started and (ended_at is null or ended_at >= ' ~ window_start_at() ~ ')' -%}
  {%- set recorded = 'select job_id from ' ~ ref('stg_scheduler__artifacts') ~ " where kind = 'checkpoint' and"
                     ~ ' (occurred_at >= ' ~ window_start_at() ~ ' or partition_date >= ' ~ window_start_day() ~ ')' -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('((' ~ keys ~ ') in (' ~ attempts ~ ' union select source, job_id, attempt from ' ~ this
             ~ ' where ended_at is null or ended_at >= ' ~ window_start_at() ~ ') or job_id in (' ~ recorded ~ '))') -}}
{%- endmacro %}

{#- fct_attempt_host_share: the attempts with an allocation alive at or after the window's start (its
    effective end there: running ones reach the data's end) -#}
{% macro in_window_allocated_attempts(keys='source, job_id, attempt') -%}
  {%- set attempts = 'select source, job_id, attempt from ' ~ ref('fct_allocations')
                     ~ ' where effective_ended_at >= ' ~ window_start_at() -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('(' ~ keys ~ ') in (' ~ attempts ~ ' union select source, job_id, attempt from ' ~ this
             ~ ' where ended_at >= ' ~ window_start_at() ~ ')') -}}
{%- endmacro %}

{#- fct_job_artifacts: the jobs with a scheduler event or placement at or after the window's start (a finish,
    a state), and those with an artifact record at or after it or delivered in it (a model registered long
    after the run) -#}
{% macro in_window_artifact_jobs(keys='source, job_id') -%}
  {%- set jobs = window_jobs_from_events() -%}
  {%- set recorded = 'select job_id from ' ~ ref('stg_scheduler__artifacts')
                     ~ ' where occurred_at >= ' ~ window_start_at() ~ ' or partition_date >= ' ~ window_start_day() -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('((' ~ keys ~ ') in (' ~ jobs ~ ' union select source, job_id from ' ~ this ~ ' where finished_at >= '
             ~ window_start_at() ~ ') or job_id in (' ~ recorded ~ '))') -}}
{%- endmacro %}

{#- fct_wait_intervals: the attempts whose wait is not over before the window's start (neither started nor
    ended before it): a wait that ended before it was decided by events before it -#}
{% macro in_window_waiting_attempts(keys='source, job_id, attempt') -%}
  {%- set attempts = 'select source, job_id, attempt from ' ~ ref('fct_job_attempts')
                     ~ " where coalesce(started_at, ended_at, timestamp 'infinity') >= " ~ window_start_at() -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('(' ~ keys ~ ') in (' ~ attempts ~ ' union select source, job_id, attempt from ' ~ this
             ~ ' where pending_to_at >= ' ~ window_start_at() ~ ')') -}}
{%- endmacro %}

{#- fct_waiting_jobs: from the day before the window's start (the previous build's last day of data, whose
    is_month_end a new day turns off) to the data's end -#}
{% macro from_day_before_window(day='day') -%}
  {{- return(day ~ ' >= ' ~ window_start_day() ~ ' - 1' if is_incremental() else 'true') -}}
{%- endmacro %}

{#- fct_wait_causes: the waits that reach the window's start, now (fct_wait_intervals) or as the last build
    had them (its rows from there on): a wait's pieces depend on the pool's state over it, and a wait can
    appear that began before the window (an attempt first seen by its start in the window) -#}
{% macro in_window_waits(keys='source, job_id, attempt') -%}
  {%- set waits = 'select source, job_id, attempt from ' ~ ref('fct_wait_intervals')
                  ~ ' where pending_to_at >= ' ~ window_start_at() -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('(' ~ keys ~ ') in (' ~ waits ~ ' union select source, job_id, attempt from ' ~ this
             ~ ' where day >= ' ~ window_start_day() ~ ')') -}}
{%- endmacro %}

{#- ---- The governance marts: fct_audit_events, fct_reclaim_ledger, fct_enforcement_actions,
    fct_governance_actions. An audit record or a decision-log line lies in the partition of its own
    time's day (pipelines/ingest.py), so the records a change can touch are those with a raw row in
    the window's partitions; a record a re-ingest removed is found by the row the last build made of it
    (its day in the window). ---- -#}

{#- the audit records (source, audit_id) with a raw row (any stage, any delivery) in the window's days -#}
{% macro window_audit_records() -%}
  select source, audit_id from {{ source('raw', 'audit_events') }}
  where partition_date >= {{ window_start_day() }} and partition_date < {{ window_end_day() }}
{%- endmacro %}

{#- fct_audit_events' own records: those above, and its rows of the window's days (a removed record) -#}
{% macro in_window_audit_records(keys='source, audit_id') -%}
  {%- set records = window_audit_records() -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return('(' ~ keys ~ ') in (' ~ records ~ ' union select source, audit_id from ' ~ this
             ~ ' where ' ~ in_window_days('day') ~ ')') -}}
{%- endmacro %}

{#- The job ids whose governance rows a change can touch: jobs alive or with an event in the window
    (window_jobs), the object of an enforcement audit record in the window's days (a reclaim, a reminder,
    a run-time cap, another job-ending action), and every job of a finding with a decision-log line in
    the window's days (a later step dates the earlier one's reminder). By job id alone: the ledger
    matches run-time caps and job-ending actions to a job by its id, whatever the engine. -#}
{% macro window_governance_jobs() -%}
  select job_id from ({{ window_jobs() }})
  union
  select object_name from {{ source('raw', 'audit_events') }}
  where partition_date >= {{ window_start_day() }} and partition_date < {{ window_end_day() }}
    and action like 'enforcement.%' and object_name is not null
  union
  select job_id from {{ source('raw', 'governance_actions') }}
  where finding_id in (
    select finding_id from {{ source('raw', 'governance_actions') }}
    where partition_date >= {{ window_start_day() }} and partition_date < {{ window_end_day() }}
  )
{%- endmacro %}

{#- fct_reclaim_ledger's own jobs: those above, and the jobs of its rows whose inputs reach past the
    window's start: a recovered window (to would_end_at) that other allocations on the GPU can still
    fill, the resubmission hour after the action, an action in the window's days (one a re-ingest
    removed), or a queue run-time cap that dim_queues (the latest quota snapshot) now states otherwise -#}
{% macro ledger_window_jobs() -%}
  {{ window_governance_jobs() }}
  {%- if is_incremental() %}
  union
  select l.job_id from {{ this }} l
  where l.would_end_at >= {{ window_start_at() }}
    or l.acted_at >= {{ window_start_at() }} - interval 1 hour
    or (l.allocations_freed is not null and l.queue_max_runtime_s is distinct from
        (select min(q.max_runtime_s) from {{ ref('dim_queues') }} q where q.queue = l.queue))
  {%- endif %}
{%- endmacro %}

{% macro in_window_ledger_jobs(keys='job_id') -%}
  {%- set jobs = ledger_window_jobs() -%}
  {{- return(keys ~ ' in (' ~ jobs ~ ')' if is_incremental() else 'true') -}}
{%- endmacro %}

{#- fct_enforcement_actions' own actions (audit_id): an enforcement record in the window's days, its
    rows of those days (a removed record), and the rows whose ledger columns the ledger now states
    otherwise (the ledger rebuilds by job: compared, a read of the two small tables) -#}
{% macro in_window_enforcement_actions(keys='audit_id') -%}
  {%- set ledger = ref('fct_reclaim_ledger') -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {{- return(keys ~ ' in (select audit_id from (' ~ window_audit_records() ~ ')'
             ~ ' union select audit_id from ' ~ this ~ ' where ' ~ in_window_days('day')
             ~ ' union select e.audit_id from ' ~ this ~ ' e left join ' ~ ledger
             ~ " l on l.ledger_id = e.audit_id and l.record_source = 'audit'"
             ~ ' where (e.policy, e.policy_version, e.ended_attempt, e.allocations_ended, e.gpus_released,'
             ~ ' e.would_end_at, e.would_end_basis, e.recovered_gpu_hours, e.reused_gpu_hours, e.is_false_positive)'
             ~ ' is distinct from (l.policy, l.policy_version,'
             ~ " case when l.action_kind in ('reclaim', 'preempt') then l.attempt end, l.allocations_freed,"
             ~ ' l.gpus_freed, l.would_end_at, l.would_end_basis, l.recovered_gpu_hours, l.reused_gpu_hours,'
             ~ ' l.is_false_positive))') -}}
{%- endmacro %}

{#- fct_governance_actions' own steps (idempotency_key): a decision-log line or an enforcement audit
    record of the key in the window's days; a row whose lines span a day of the window (a removed line)
    or whose job is in the window (its attempt's end, the job's final state); a row whose count of audit
    records differs now (a removed record) or whose ledger columns the ledger now states otherwise
    (compared, a read of the small tables) -#}
{% macro in_window_governance_steps(keys='idempotency_key') -%}
  {%- set ledger = ref('fct_reclaim_ledger') -%}
  {%- set audit = ref('fct_audit_events') -%}
  {%- set jobs = window_jobs() -%}
  {%- if not is_incremental() -%}{{ return('true') }}{%- endif -%}
  {%- set sql -%}
  {{ keys }} in (
    select idempotency_key from {{ source('raw', 'governance_actions') }}
    where partition_date >= {{ window_start_day() }} and partition_date < {{ window_end_day() }}
    union
    select idempotency_key from {{ source('raw', 'audit_events') }}
    where partition_date >= {{ window_start_day() }} and partition_date < {{ window_end_day() }}
      and action like 'enforcement.%' and idempotency_key is not null
    union
    select idempotency_key from {{ this }}
    where (decided_at < {{ window_end_at() }} and status_at >= {{ window_start_at() }})
      or (engine, job_id) in ({{ jobs }})
    union
    select g.idempotency_key from {{ this }} g
    left join (
      select idempotency_key, count(*) as audit_records from {{ audit }}
      where action like 'enforcement.%' and idempotency_key is not null
      group by idempotency_key
    ) a using (idempotency_key)
    where g.audit_records <> coalesce(a.audit_records, 0)
    union
    select g.idempotency_key from {{ this }} g
    left join (
      select * from {{ ledger }} where idempotency_key is not null
      qualify row_number() over (partition by idempotency_key order by acted_at) = 1
    ) l using (idempotency_key)
    where (g.ledger_id, g.recovered_gpu_hours, g.reused_gpu_hours, g.is_false_positive, g.reminder_due_at,
           g.is_released_after_reminder)
      is distinct from (l.ledger_id, l.recovered_gpu_hours, l.reused_gpu_hours, l.is_false_positive,
                        l.reminder_due_at, l.is_released_after_reminder)
  )
  {%- endset -%}
  {{- return(sql) -}}
{%- endmacro %}

{#- `column` in a model's own CTE `cte` of window keys when incremental, else true -#}
{% macro in_cte(column, cte) -%}
  {{- return(column ~ ' in (select * from ' ~ cte ~ ')' if is_incremental() else 'true') -}}
{%- endmacro %}

{#- ===== dims, capacity/quota, pool hours and GPU health (helper wt-pool) ===== -#}


{#- The first day a per-day model that reads the data's end (dim_days) and the inventory and quota snapshots in
    effect (dim_snapshots_in_effect) rebuilds; it rebuilds every day from there to the data's end, since a
    snapshot stays in effect until the next one. The earliest of: the window's start; the model's own last day
    (the previous data's end: that day was cut there, and days after it are new); the day of a snapshot loaded
    into a partition in the window (a snapshot taken late on the day before its partition). When that start is
    on or before a source's first snapshot, every day: days before a source's first snapshot use the first,
    which may have changed. -#}
{% macro snapshot_days_start() -%}
  (select case
     when start_day <= first_day then date '1970-01-01' else start_day end
   from (
     select
       least(
         {{ window_start_day() }},
         coalesce((select max(day) from {{ this }}), {{ window_start_day() }}),
         coalesce((select cast(min(snapshot_at) as date) from (
           select snapshot_at from {{ source('raw', 'gpu_inventory') }} where partition_date >= {{ window_start_day() }}
           union all
           select snapshot_at from {{ source('raw', 'queue_quotas') }} where partition_date >= {{ window_start_day() }})),
           {{ window_start_day() }})
       ) as start_day,
       (select max(first_day) from (
         select cast(min(snapshot_at) as date) as first_day from {{ source('raw', 'gpu_inventory') }} group by source
         union all
         select cast(min(snapshot_at) as date) from {{ source('raw', 'queue_quotas') }} group by source)
       ) as first_day
   ))
{%- endmacro %}

{#- days from snapshot_days_start() on (true when not incremental): fct_capacity_daily, fct_quota_daily -#}
{% macro in_window_snapshot_days(day='day') -%}
  {%- set start = snapshot_days_start() -%}
  {{- return(day ~ ' >= ' ~ start if is_incremental() else 'true') -}}
{%- endmacro %}

{#- fct_gpu_health_events: the GPU's model as the events carry it (one rule for the model and its window) -#}
{% macro health_gpu_models() -%}
  select host, gpu, min(gpu_model) as gpu_model
  from {{ ref('dim_gpus') }}
  where gpu_model <> 'unknown'
  group by host, gpu
{%- endmacro %}

{#- fct_gpu_health_events' GPUs rebuilt over all their history: those whose model changed (dim_gpus, from a
    newer inventory snapshot), and those whose first windowed XID gauge sample lies in the window (a GPU
    with the gauge ignores its DCGM_FI_DEV_XID_ERRORS on every day). -#}
{% macro health_rebuild_gpus() -%}
  select distinct e.host, e.gpu
  from {{ this }} e
  left join ({{ health_gpu_models() }}) m using (host, gpu)
  where e.gpu_model <> coalesce(m.gpu_model, 'unknown')
  union
  select host, gpu
  from {{ ref('fct_gpu_health_series_daily') }}
  -- of a GPU with samples before the window (a new GPU has no rows to rebuild)
  group by host, gpu
  having min(day) filter (where metric = 'DCGM_EXP_XID_ERRORS_COUNT') >= {{ window_start_day() }}
    and min(day) < {{ window_start_day() }}
{%- endmacro %}

{#- fct_gpu_health_events' rows a build replaces: every minute from the window's start on (a change
    reaches a series' next sample, however late it comes) and every row of the GPUs above -#}
{% macro in_window_health_gpus(keys='host, gpu') -%}
  {%- set gpus = health_rebuild_gpus() -%}
  {{- return('(minute_at >= ' ~ window_start_at() ~ ' or (' ~ keys ~ ') in (' ~ gpus ~ '))'
             if is_incremental() else 'true') -}}
{%- endmacro %}

{#- fct_pool_hourly's trailing weeks, aligned on the data's end (week 0 = the last 7 x 24 h) -#}
{% macro pool_weeks_before_end(hour_at, as_of_at) -%}
  cast(ceil(epoch({{ as_of_at }} - {{ hour_at }}) / 604800.0) as integer) - 1
{%- endmacro %}

{#- fct_pool_hours' series: every queue x GPU model with a quota, an allocation or a pending attempt on
    some day, and every GPU model (level_scope pool), with the columns that depend on all days (the queue's
    owner; whether it holds quota). One rule for the model and its window. -#}
{% macro pool_series() -%}
  with quotas as (
    select day, queue, gpu_model, tenant, quota_gpus from {{ ref('fct_quota_daily') }}
  ),
  -- queues holding quota on some model some day; the others (backfill) only ever borrow
  quota_queues as (
    select queue from quotas group by queue having max(quota_gpus) > 0
  ),
  -- a queue's owner is the tenant its quota names; a queue without a quota row takes its jobs' tenant
  queue_owners as (
    select queue, min(tenant) as tenant from quotas group by queue
    union all
    select queue, min(tenant) from {{ ref('dim_jobs') }} where queue not in (select queue from quotas) group by queue
  ),
  keys as (
    select 'queue' as level_scope, queue, gpu_model from quotas
    union
    -- a level yields an hour when it ends after the start of its first hour
    select level_scope, queue, gpu_model from {{ ref('fct_allocation_steps') }}
    where level_scope in ('queue', 'pool') and level_end_at > date_trunc('hour', level_start_at)
    union
    select 'queue', queue, gpu_model from {{ ref('fct_wait_causes') }}
    union
    select 'pool', null, gpu_model from {{ ref('fct_wait_causes') }}
    union
    select 'pool', null, gpu_model from {{ ref('fct_capacity_daily') }}
    union
    select 'pool', null, gpu_model from quotas
  )
  select
    k.level_scope,
    k.queue,
    k.gpu_model,
    o.tenant,
    k.level_scope = 'queue' and k.queue in (select queue from quota_queues) as is_quota_queue
  from keys k
  left join queue_owners o on o.queue = k.queue
{%- endmacro %}

{#- fct_pool_hours' series rebuilt over all their hours: new, gone, or with a new owner or quota status -#}
{% macro pool_changed_series() -%}
  select level_scope, gpu_model, coalesce(queue, '') as queue_key from (
    (({{ pool_series() }}) except (select distinct level_scope, queue, gpu_model, tenant, is_quota_queue from {{ this }}))
    union all
    ((select distinct level_scope, queue, gpu_model, tenant, is_quota_queue from {{ this }}) except ({{ pool_series() }}))
  )
{%- endmacro %}

{#- fct_pool_hours' first rebuilt day: snapshot_days_start(), or the first hour waited by a job the window
    reaches (a job's wait that began before the window changes when its end does: fct_wait_causes) -#}
{% macro pool_hours_start() -%}
  (select least({{ snapshot_days_start() }}, coalesce(cast(min(hour_at) as date), date '2100-01-01'))
   from {{ ref('fct_wait_causes') }} where (source, job_id) in ({{ window_jobs() }}))
{%- endmacro %}

{#- fct_pool_hours' rows a build replaces: the hours of the days from pool_hours_start() on (quota,
    capacity, waits and the data's end reach later days) and every hour of a changed series -#}
{% macro in_window_pool_hours(keys='level_scope, gpu_model, queue') -%}
  {%- set start = pool_hours_start() -%}
  {%- set changed = pool_changed_series() -%}
  {{- return('(day >= ' ~ start ~ ' or (level_scope, gpu_model, coalesce(queue, \'\')) in (' ~ changed ~ '))'
             if is_incremental() else 'true') -}}
{%- endmacro %}

{#- pool_hours_start() as a date literal, read when the model runs: a constant lets a range filter on a
    big input prune by zonemaps (a subquery does not) -#}
{% macro pool_hours_start_literal() -%}
  {%- set start = pool_hours_start() -%}  {#- rendered always: dbt sees its refs when it parses the model -#}
  {%- if not is_incremental() -%}
    {{- return("date '1970-01-01'") -}}
  {%- elif execute -%}
    {%- set day = run_query('select ' ~ start).columns[0].values()[0] -%}
    {{- return("date '" ~ day ~ "'") -}}
  {%- endif -%}
  {{- return(start) -}}
{%- endmacro %}
