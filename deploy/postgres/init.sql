-- Run once, when the PostgreSQL volume is new: Dagster's storage gets its own database beside the
-- release catalog's (POSTGRES_DB=gpupool), so neither sees the other's tables.
create database dagster owner gpupool;
