"""A package constant named like its submodule."""

align = 1  # expect: P017
