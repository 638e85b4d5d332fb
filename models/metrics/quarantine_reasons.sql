with rejected as (
  select * from {{ source('ops', 'quarantine') }}
),

final as (
  select
    partition_date as day,
    ingest_source,
    source,
    stage,
    reason,
    count(*) as quarantined_rows,
    count(distinct source_file) as files,
    min(source_file) as example_file,
    arg_min(line_number, source_file || ':' || lpad(cast(coalesce(line_number, 0) as varchar), 12, '0'))
      as example_line,
    arg_min(left(raw, 300), source_file || ':' || lpad(cast(coalesce(line_number, 0) as varchar), 12, '0'))
      as example_raw,
    max(ingested_at) as ingested_at
  from rejected
  group by partition_date, ingest_source, source, stage, reason
)

select * from final
