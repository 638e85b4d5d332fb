-- jobs still waiting at each day's end (PRODUCT.md "Waiting work": "now" = the day's end, the
-- data's end on the last day): submitted before it, neither started nor ended by it
--
-- rebuilt from the day before the window's start to the data's end (macros/build_window.sql): a changed
-- event is at or after the window's start, so a day that ended before it keeps its waiting jobs; the days
-- after it change with every job still waiting (the last day's end is the data's end), and the day before
-- it may be the previous build's last day, which a new day makes no longer the month's last
{{ config(materialized='incremental', incremental_strategy='replace_window',
          window='from_day_before_window', window_key='day') }}
-- the month's last day of data (dim_days: the whole month, whether or not a job waits that day)
with month_ends as (
  select
    day,
    month,
    day_end_at,
    day_end_at = max(day_end_at) over (partition by month) as is_month_end
  from {{ ref('dim_days') }}
),

days as (
  select * from month_ends
  where {{ from_day_before_window() }}
),

jobs as (
  select * from {{ ref('dim_jobs') }}
  {%- if is_incremental() %}
  where pending_ended_at is null or pending_ended_at > {{ window_start_at() }} - interval 1 day
  {%- endif %}
),

final as (
  select
    d.day,
    d.month,
    d.day_end_at as as_of_at,
    d.is_month_end,
    j.job_id,
    j.queue,
    j.tenant,
    epoch(d.day_end_at - j.submitted_at) as pending_age_s
  from jobs j
  join days d
    on j.submitted_at < d.day_end_at
    and (j.pending_ended_at is null or j.pending_ended_at > d.day_end_at)
)

select * from final
