"""Portal entry point: `make portal` (streamlit run portal/app.py)."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="MLPerf harness results", layout="wide")
pages = [st.Page("pages/runs.py", title="Runs", default=True)]
st.navigation(pages).run()
