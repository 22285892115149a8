"""The static checks of one bundle (the policy scan and the copy identity) in a child of their own,
with fail-closed CPU, wall and memory budgets: a hostile source cannot stall the screen (rule P022)."""
