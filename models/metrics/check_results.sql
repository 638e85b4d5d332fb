with results as (
  select * from {{ source('ops', 'check_results') }}
),

final as (
  select
    check_name,
    asset,
    partition_date as day,
    passed,
    not passed as is_failed,
    severity,
    unexpected_count,
    metadata_json,
    checked_at
  from results
)

select * from final
