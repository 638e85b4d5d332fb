"""dbt's `modules` context variable (the Python modules its Jinja may use), for sqlfluff's Jinja
templater (models/.sqlfluff, library_path): macros/build_window.sql checks a --vars date with
modules.datetime, and the templater, which has no dbt, would otherwise fail on every incremental mart."""
import datetime  # noqa: F401  (read as modules.datetime)
