with gaps as (
  select * from {{ source('ops', 'scrape_gaps') }}
),

final as (
  select
    cast(round_at as date) as day,
    target,
    error_kind,
    count(*) as gaps,
    count(distinct round_id) as rounds,
    sum(attempts) as attempts,
    avg(duration_s) as mean_duration_s,
    min(round_at) as first_at,
    max(round_at) as last_at,
    arg_max(error, round_at) as last_error
  from gaps
  group by cast(round_at as date), target, error_kind
)

select * from final
