"""Great Expectations suites for the raw tables (suites.py) and the validation API (validate.py)."""
