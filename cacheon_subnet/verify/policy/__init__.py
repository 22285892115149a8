"""The static policy of bundle sources: the allowlist scan (`scan`), its tables (`allowlist`), its
rule families (`scope`, `groups`, `module_rules`, `triton_rules`), and the bounded child that runs
the scan and the copy identity with fail-closed budgets (`bound`, `child`)."""
