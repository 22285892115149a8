"""SGLang-specific glue, reviewed whenever the SGLang pin moves. Nothing here is imported by
the slot ABI; everything here may import SGLang (lazily, so CPU hosts can import the package)."""
