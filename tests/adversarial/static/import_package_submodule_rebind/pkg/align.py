"""The submodule."""

X = 1
