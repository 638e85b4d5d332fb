-- jobs still waiting at each day's end (PRODUCT.md "Waiting work": "now" = the day's end, the
-- data's end on the last day): submitted before it, neither started nor ended by it
with days as (
  select day, month, day_end_at from {{ ref('dim_days') }}
),

jobs as (
  select * from {{ ref('dim_jobs') }}
),

final as (
  select
    d.day,
    d.month,
    d.day_end_at as as_of_at,
    d.day_end_at = max(d.day_end_at) over (partition by d.month) as is_month_end,
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
