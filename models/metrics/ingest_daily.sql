with runs as (
  select * from {{ source('ops', 'ingest_log') }}
),

ranked as (
  select
    *,
    row_number() over (
      partition by ingest_source, partition_date order by finished_at desc, started_at desc
    ) as run_rank,
    count(*) over (partition by ingest_source, partition_date) as run_count
  from runs
),

final as (
  select
    partition_date as day,
    ingest_source,
    run_count as runs,
    files_read,
    records_read,
    records_loaded,
    records_quarantined,
    case when records_read > 0 then 100.0 * records_quarantined / records_read end as quarantined_pct,
    rows_by_table,
    started_at,
    finished_at as ingested_at,
    date_diff('millisecond', started_at, finished_at) / 1000.0 as duration_s
  from ranked
  where run_rank = 1
)

select * from final
