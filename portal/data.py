"""Cached access to the run frames. Everything the pages show comes from here."""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import streamlit as st

import results
from results.ingest import default_tracking_uri

REPO_ROOT = Path(__file__).resolve().parent.parent
CACHE_TTL_S = 300


def tracking_uri() -> str:
    return default_tracking_uri(Path(os.environ.get("HARNESS_RESULTS", REPO_ROOT / "results")))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Loading runs")
def runs(uri: str) -> pd.DataFrame:
    return results.load_runs(uri)


def refresh_button() -> None:
    if st.sidebar.button("Refresh data", help="re-read the MLflow store"):
        st.cache_data.clear()


def empty_state() -> None:
    st.info("No runs recorded yet. Run `make demo` (a small CPU ablation) and press Refresh.")
