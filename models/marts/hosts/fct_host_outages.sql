-- A host going down (PRODUCT.md "Hardware fault"): one row per outage of a host, from the DCGM telemetry of
-- its GPUs (fct_gpu_activity). A host is down while none of its GPUs reports for more than max_gap_minutes
-- (a scrape missed or two is not an outage) while another host's telemetry spans the gap (a collector that
-- stopped for the whole pool is no host going down: fct_gpu_series_daily, by day), and back at its next
-- minute of telemetry; a host still silent at the data's end is not counted until it reports again. Every
-- GPU of the host has a hardware fault (signal host_down) in each minute it is down: metrics.gpu_faults,
-- marts.fct_attempt_outcomes.
--
-- Incremental (replace_window, in_window_from on back_at): a build replaces the outages that ended from the
-- window's start on, reading the minutes from there and each host's last minute before it
-- (fct_gpu_series_daily); an outage that ended before the window keeps its row.
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='in_window_from', window_key='back_at') }}
{%- set max_gap_minutes = 5 %}
with minutes as (
  select distinct host, minute_at
  from {{ ref('fct_gpu_activity') }}
  where {{ in_window_from('minute_at') }}
),

series as (
  select host, first_minute_at, last_minute_at from {{ ref('fct_gpu_series_daily') }}
),

-- each host's last minute before the window (its outage may have begun there)
carried as (
  {%- if is_incremental() %}
  select host, max(last_minute_at) as minute_at
  from {{ ref('fct_gpu_series_daily') }}
  where day < {{ window_start_day() }}
  group by host
  {%- else %}
  select host, minute_at from minutes where false
  {%- endif %}
),

params as (
  select {{ max_gap_minutes }} as max_gap_minutes
),

host_minutes as (
  select host, minute_at from minutes
  union
  select host, minute_at from carried
),

gaps as (
  select
    host,
    lag(minute_at) over (partition by host order by minute_at) as last_seen_at,
    minute_at as back_at
  from host_minutes
),

gpus as (
  select host, count(distinct gpu) as gpus from {{ ref('dim_gpus') }} group by host
),

final as (
  select
    g.host,
    g.last_seen_at + interval 1 minute as down_from_at,
    g.back_at,
    cast(epoch(g.back_at - g.last_seen_at) / 60 - 1 as integer) as down_minutes,
    coalesce(n.gpus, 0) as gpus
  from gaps g
  cross join params p
  left join gpus n using (host)
  where g.back_at - g.last_seen_at > to_minutes(p.max_gap_minutes + 1)
    and exists (
      select 1 from series s
      where s.host <> g.host and s.first_minute_at < g.back_at and s.last_minute_at > g.last_seen_at
    )
    {%- if is_incremental() %}
    and g.back_at >= {{ window_start_at() }}
    {%- endif %}
)

select * from final
