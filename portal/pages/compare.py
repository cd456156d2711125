"""Compare: two sweep cells (all repeats of two configurations; the default), two runs, or two
git commits of a sweep: config and environment diffs, deltas with CIs, a plain verdict each."""
from __future__ import annotations

import streamlit as st

from portal import compare_views, data

st.title("Compare")
df = data.load_or_stop()
VIEWS = {"cells": ("two sweep cells", compare_views.sweep_cells), "runs": ("two runs", compare_views.two_runs),
         "commits": ("two commits of a sweep", compare_views.two_commits)}
keys = list(VIEWS)
start = st.query_params.get("view") if st.query_params.get("view") in VIEWS else "cells"
view = st.radio("compare", keys, index=keys.index(start), format_func=lambda k: VIEWS[k][0], horizontal=True)
st.query_params["view"] = view
VIEWS[view][1](df)
