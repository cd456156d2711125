"""Portal entry point: `make portal` (streamlit run portal/app.py). Read-only."""
from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="MLPerf harness results", layout="wide")
pages = [
    st.Page("pages/overview.py", title="Overview", default=True),
    st.Page("pages/ablation.py", title="Ablation"),
    st.Page("pages/runs.py", title="Runs"),
    st.Page("pages/run_detail.py", title="Run detail"),
    st.Page("pages/compare.py", title="Compare"),
    st.Page("pages/parallelism.py", title="Parallelism"),
    st.Page("pages/pipeline.py", title="Pipeline"),
    st.Page("pages/planner.py", title="Planner"),
    st.Page("pages/collectives.py", title="Collectives"),
    st.Page("pages/roofline.py", title="Roofline"),
]
st.navigation(pages).run()
