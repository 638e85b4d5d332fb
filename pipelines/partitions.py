"""Every partitions definition, once."""
import dagster as dg

# UTC days; the landing zone has one folder per day and each ingest replaces one day.
daily_partitions = dg.DailyPartitionsDefinition(start_date="2024-01-01", timezone="UTC", end_offset=1)

# Calendar months (UTC) for the capacity recommendations and the monthly review pack; a month's
# partition is ready once it has ended.
monthly_partitions = dg.MonthlyPartitionsDefinition(start_date="2024-01-01", timezone="UTC")
