"""Floor 4: the heterogeneous planner: device inventory, layer costs, links, the split search
(search.py), and the planner's report frames."""
