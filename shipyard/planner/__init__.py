"""`shipyard plan`: which strategy, instance type and count, spot or not, and input mode meet a
deadline and a budget, with the predicted hours, cost, memory per accelerator and deadline risk of
each (docs/planner.md). planner/models.py holds the formulas, planner/plan.py the search."""
