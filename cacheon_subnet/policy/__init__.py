"""The static policy of bundle sources, pure `ast` and no I/O: the allowlist scan (`scan`), its
tables (`allowlist`), its rule families (`scope`, `groups`, `module_rules`, `triton_rules`, over the
`host` protocol). It sits below `bundle`, whose sealed engine tree refuses any source that fails
it; the bounded child that runs it on a hostile bundle is `cacheon_subnet.verify.static`."""
