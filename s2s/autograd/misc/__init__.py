"""autograd.misc on s2s: `flatten` and `flatten_func` (`misc.flatten`), and the optimizers
of `misc.optimizers`."""
from s2s.autograd.misc.flatten import flatten, flatten_func

__all__ = ["flatten", "flatten_func"]
