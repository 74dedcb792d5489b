"""autograd.misc on s2s: `flatten` and `flatten_func` (`misc.flatten`), the optimizers
of `misc.optimizers`, and `misc.fixed_points.fixed_point`, differentiated by the implicit
function theorem."""
from s2s.autograd.misc.flatten import flatten, flatten_func

__all__ = ["flatten", "flatten_func"]
