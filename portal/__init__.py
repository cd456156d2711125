"""Streamlit results portal. Reads only through `results` (pandas frames); read-only."""
