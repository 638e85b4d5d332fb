"""gpupool's governance dashboards (Streamlit): `gpupool dashboard`, docs/dashboards.md."""
