def rmsnorm(x, weight, out, eps):
    raise RuntimeError("control: this kernel always fails")
