-- One row per GPU per health signal per minute in which it fired, from the DCGM health series.
-- Device-level fields are repeated on every MIG instance's series: each GPU counts once (the
-- largest of its series). How each kind of series becomes a count of errors in a minute:
-- * counters (ECC totals, remapped rows, row-remap failure flag, NVLink, PCIe replay): the increase
--   between consecutive samples of a series; a drop is a reset (driver reload, GPU reset) and
--   counts the new value, as Prometheus' increase() does, never a negative. A series' first sample
--   is its baseline, not an event: what happened before the telemetry starts is not known; except
--   where the first sample is itself evidence of a fault (first_sample_faults): a standing failure
--   gauge (DCGM_FI_DEV_ROW_REMAP_FAILURE 1) is a fault from the first scrape that shows it, and the
--   volatile double-bit total (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, reset with the driver) non-zero on a
--   new series counts its value. The aggregate totals' first values stay a baseline (a GPU's lifetime).
-- * DCGM_EXP_XID_ERRORS_COUNT{xid} is a windowed gauge (errors of that code seen in the exporter's
--   last xid_window_minutes): max over each minute, and the minute's errors are the rise over the
--   previous minute's max, where that minute is within the window (older errors have aged out, so
--   the previous level is 0 then). An error still shown by later scrapes inside the window counts
--   once. A lower bound: a new error arriving as an older one of the same code ages out is missed.
-- * DCGM_FI_DEV_XID_ERRORS (the last code) is read only for GPUs without the windowed gauge: a
--   change to another non-zero code is one error (a repeat of the same code is not visible).
-- * clock-event reasons: bitmask per sample (DCGM_CLOCKS_EVENT_REASON_*, NVML's
--   nvmlClocksEventReasons): thermal = SW thermal 0x20 | HW thermal 0x40, power = SW power cap
--   0x04 | HW power brake 0x80; the count is the samples of the minute with such a bit set.
--
-- Incremental (macros/build_window.sql, in_window_health_gpus): a build replaces every minute from the
-- window's start on, reading the samples from xid_window_minutes before it and, per series, the last
-- sample before that (fct_gpu_health_series_daily: a counter's previous value, the last XID code); a GPU
-- whose model changed or whose XID gauge first appears in the window is rebuilt over all its history.
{% set xid_window_minutes = 5 %}
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_health_gpus', window_key='host, gpu') }}
{%- set rebuild_gpus = [] -%}
{%- if execute and is_incremental() -%}
  {%- set rebuild_gpus = run_query(health_rebuild_gpus()).rows -%}
{%- endif %}
{%- set read_from_at = window_start_at() ~ ' - to_minutes(' ~ xid_window_minutes ~ ')' %}
with health_read as (
  select * from {{ ref('stg_dcgm__health') }}
  where metric <> 'DCGM_FI_DEV_GPU_TEMP'
  {%- if is_incremental() %}
    and sampled_at >= {{ read_from_at }}
  {%- endif %}
  {%- if rebuild_gpus | length > 0 %}
  union all
  select * from {{ ref('stg_dcgm__health') }}
  where metric <> 'DCGM_FI_DEV_GPU_TEMP'
    and sampled_at < {{ read_from_at }}
    and (host, gpu) in (
      {%- for g in rebuild_gpus %}({{ "'" ~ (g[0] | replace("'", "''")) ~ "'" }}, {{ g[1] }}){{ ", " if not loop.last }}{% endfor -%}
    )
  {%- endif %}
),

rebuild_gpus as (
  {%- if is_incremental() %}
  {{ health_rebuild_gpus() }}
  {%- else %}
  select cast(null as varchar) as host, cast(null as integer) as gpu where false
  {%- endif %}
),

-- each series' last sample before what is read (counters and the last XID code need their previous one)
carried as (
  {%- if is_incremental() %}
  select
    max(last_sampled_at) as sampled_at,
    host,
    gpu,
    gpu_instance_id,
    metric,
    xid,
    arg_max(last_value, last_sampled_at) as value,
    arg_max(last_source, last_sampled_at) as source
  from {{ ref('fct_gpu_health_series_daily') }}
  where day < {{ window_start_day() }}
    and metric <> 'DCGM_EXP_XID_ERRORS_COUNT'
    and (host, gpu) not in (select host, gpu from rebuild_gpus)
  group by host, gpu, gpu_instance_id, metric, xid
  having max(last_sampled_at) < {{ read_from_at }}
  {%- else %}
  select sampled_at, host, gpu, gpu_instance_id, metric, xid, value, source
  from {{ ref('stg_dcgm__health') }}
  where false
  {%- endif %}
),

health as (
  select sampled_at, host, gpu, gpu_instance_id, metric, xid, value, source from health_read
  union all
  select sampled_at, host, gpu, gpu_instance_id, metric, xid, value, source from carried
),

xid_codes as (
  select * from {{ ref('xid_codes') }}
),

gpu_models as (
  {{ health_gpu_models() }}
),

params as (
  -- dcgm-exporter's --xid-count-window-size default: 300000 ms
  select {{ xid_window_minutes }} as xid_window_minutes
),

counter_signals as (
  select * from (values
    ('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL', 'ecc_sbe'),
    ('DCGM_FI_DEV_ECC_SBE_AGG_TOTAL', 'ecc_sbe'),
    ('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL', 'ecc_dbe'),
    ('DCGM_FI_DEV_ECC_DBE_AGG_TOTAL', 'ecc_dbe'),
    ('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS', 'remapped_rows'),
    ('DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS', 'remapped_rows'),
    ('DCGM_FI_DEV_ROW_REMAP_FAILURE', 'row_remap_failure'),
    ('DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL', 'nvlink_error'),
    ('DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL', 'nvlink_error'),
    ('DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL', 'nvlink_error'),
    ('DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL', 'nvlink_error'),
    ('DCGM_FI_DEV_PCIE_REPLAY_COUNTER', 'pcie_replay')
  -- the alias only names the values' columns
  ) t (metric, signal)  -- noqa: AL05
),

-- fields whose first sample on a new series is a fault when non-zero (above): its value counts
first_sample_faults as (
  select * from (values
    ('DCGM_FI_DEV_ROW_REMAP_FAILURE'),
    ('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL')
  -- the alias only names the values' column
  ) t (metric)  -- noqa: AL05
),

counter_steps as (
  select
    h.host,
    h.gpu,
    h.gpu_instance_id,
    h.metric,
    c.signal,
    date_trunc('minute', h.sampled_at) as minute_at,
    h.value,
    lag(h.value) over (partition by h.host, h.gpu, h.gpu_instance_id, h.metric order by h.sampled_at) as previous_value,
    h.source
  from health h
  join counter_signals c using (metric)
),

counter_series_minutes as (
  select
    host, gpu, gpu_instance_id, metric, signal, minute_at,
    sum(
      case
        when previous_value is null then
          case when metric in (select metric from first_sample_faults) then greatest(value, 0) else 0 end
        when value >= previous_value then value - previous_value
        else value
      end
    ) as increase,
    any_value(source) as source
  from counter_steps
  group by all
),

-- one GPU once: the largest of its instances' series of a field
counter_metric_minutes as (
  select host, gpu, metric, signal, minute_at, max(increase) as increase, any_value(source) as source
  from counter_series_minutes
  group by all
),

-- volatile and aggregate ECC totals count the same errors: the larger; the other fields of a
-- signal count different errors (links, row kinds): their sum
counter_events as (
  select
    host,
    gpu,
    minute_at,
    signal,
    cast(null as integer) as xid,
    case when signal in ('ecc_sbe', 'ecc_dbe') then max(increase) else sum(increase) end as event_count,
    any_value(source) as source
  from counter_metric_minutes
  group by host, gpu, minute_at, signal
),

throttle_series_minutes as (
  select
    host,
    gpu,
    gpu_instance_id,
    metric,
    date_trunc('minute', sampled_at) as minute_at,
    count(*) filter (where (cast(value as bigint) & 96) <> 0) as thermal_samples,  -- 0x20 | 0x40
    count(*) filter (where (cast(value as bigint) & 132) <> 0) as power_samples,   -- 0x04 | 0x80
    any_value(source) as source
  from health
  where metric in ('DCGM_FI_DEV_CLOCK_THROTTLE_REASONS', 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS')
  group by all
),

throttle_events as (
  select host, gpu, minute_at, 'thermal_throttle' as signal, cast(null as integer) as xid,
    cast(max(thermal_samples) as double) as event_count, any_value(source) as source
  from throttle_series_minutes
  group by host, gpu, minute_at
  union all
  select host, gpu, minute_at, 'power_throttle' as signal, cast(null as integer) as xid,
    cast(max(power_samples) as double) as event_count, any_value(source) as source
  from throttle_series_minutes
  group by host, gpu, minute_at
),

xid_gauge_minutes as (
  select
    host,
    gpu,
    xid,
    date_trunc('minute', sampled_at) as minute_at,
    max(value) as errors_in_window,
    any_value(source) as source
  from health
  where metric = 'DCGM_EXP_XID_ERRORS_COUNT' and xid is not null
  group by all
),

xid_gauge_steps as (
  select
    *,
    lag(minute_at) over w as previous_minute_at,
    lag(errors_in_window) over w as previous_errors_in_window
  from xid_gauge_minutes
  window w as (partition by host, gpu, xid order by minute_at)
),

xid_gauge_events as (
  select
    s.host,
    s.gpu,
    s.minute_at,
    'xid' as signal,
    s.xid,
    greatest(
      s.errors_in_window
      - case
          when s.previous_minute_at >= s.minute_at - to_minutes(p.xid_window_minutes) then s.previous_errors_in_window
          else 0
        end,
      0
    ) as event_count,
    s.source
  from xid_gauge_steps s
  cross join params p
),

-- every day's, not only the days read
gpus_with_xid_gauge as (
  select distinct host, gpu from {{ ref('fct_gpu_health_series_daily') }} where metric = 'DCGM_EXP_XID_ERRORS_COUNT'
),

last_xid_minutes as (
  select
    h.host,
    h.gpu,
    date_trunc('minute', h.sampled_at) as minute_at,
    cast(arg_max(h.value, h.sampled_at) as integer) as last_xid,
    any_value(h.source) as source
  from health h
  anti join gpus_with_xid_gauge using (host, gpu)
  where h.metric = 'DCGM_FI_DEV_XID_ERRORS'
  group by all
),

last_xid_events as (
  select host, gpu, minute_at, 'xid' as signal, last_xid as xid, 1.0 as event_count, source
  from (
    select *, lag(last_xid) over (partition by host, gpu order by minute_at) as previous_xid
    from last_xid_minutes
  ) with_previous
  where last_xid <> 0 and previous_xid is not null and last_xid <> previous_xid
),

events as (
  select * from counter_events
  union all
  select * from throttle_events
  union all
  select * from xid_gauge_events
  union all
  select * from last_xid_events
),

final as (
  select
    e.host,
    e.gpu,
    coalesce(m.gpu_model, 'unknown') as gpu_model,
    e.minute_at,
    e.signal,
    e.xid,
    cast(e.event_count as double) as event_count,
    case
      when x.class = 'application' then 'application'
      when e.signal in ('ecc_dbe', 'row_remap_failure') or (e.signal = 'xid' and coalesce(x.is_hardware_fault, true))
        then 'fault'
      else 'warning'
    end as severity,
    -- an XID the seed does not list is a non-application XID: a hardware fault (the issue's rule)
    e.signal in ('ecc_dbe', 'row_remap_failure') or (e.signal = 'xid' and coalesce(x.is_hardware_fault, true))
      as is_hardware_fault,
    e.source
  from events e
  left join xid_codes x on e.signal = 'xid' and x.xid = e.xid
  left join gpu_models m on m.host = e.host and m.gpu = e.gpu
  where e.event_count > 0
  {%- if is_incremental() %}
    -- what was read before the window only gives the previous samples
    and (e.minute_at >= {{ window_start_at() }} or (e.host, e.gpu) in (select host, gpu from rebuild_gpus))
  {%- endif %}
)

select * from final
