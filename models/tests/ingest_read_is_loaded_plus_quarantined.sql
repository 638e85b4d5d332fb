-- Every record an ingest run read was either loaded or quarantined: per run (ops.ingest_log) and per day.
-- Dagster shows it as an asset check of ingest_daily (it reads more than one relation).
{{ config(meta={'dagster': {'ref': {'name': 'ingest_daily'}}}) }}
select 'ingest_log' as relation, run_id as ref, records_read, records_loaded, records_quarantined
from {{ source('ops', 'ingest_log') }}
where records_read <> records_loaded + records_quarantined
union all
select 'ingest_daily', ingest_source || ' ' || day, records_read, records_loaded, records_quarantined
from {{ ref('ingest_daily') }}
where records_read <> records_loaded + records_quarantined
