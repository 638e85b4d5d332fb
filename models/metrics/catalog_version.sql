{{ config(materialized='table') }}
select
  any_value(catalog_version) as catalog_version,
  cast(count(*) as integer) as metrics,
  cast(current_timestamp as timestamp) as built_at
from {{ ref('catalog') }}
