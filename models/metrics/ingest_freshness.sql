with days as (
  select * from {{ ref('ingest_daily') }}
),

final as (
  select
    ingest_source,
    min(day) as first_day,
    max(day) as last_day,
    count(*) as days_loaded,
    sum(runs) as runs,
    sum(records_read) as records_read,
    sum(records_loaded) as records_loaded,
    sum(records_quarantined) as records_quarantined,
    100.0 * sum(records_quarantined) / nullif(sum(records_read), 0) as quarantined_pct,
    max(ingested_at) as last_ingested_at,
    date_diff('second', max(ingested_at), now() at time zone 'UTC') / 3600.0 as hours_since_last_ingest
  from days
  group by ingest_source
)

select * from final
