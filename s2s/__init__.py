"""s2s: source-to-source automatic differentiation for NumPy.

Stage a plain NumPy function into an SSA jaxpr (`make_jaxpr`), run it with the NumPy
reference interpreter (`eval_jaxpr`), and write it back out as a readable Python module
(`emit_python`, `jit(backend="python")`).
"""
from s2s import config, dtypes, tree as tree_util
from s2s import primitives as _primitives  # noqa: F401  (declares every primitive)
from s2s import numpy_api as _numpy_api  # noqa: F401  (fills the NumPy dispatch table)
from s2s.vmapped import vmap
from s2s.pmap import pmap
from s2s.autodiff import (grad, hessian, jacfwd, jacrev, jvp, linear_transpose, linearize,
                          value_and_grad, vjp)
from s2s.custom_derivatives import custom_jvp, custom_vjp
from s2s.autograd import extend as _autograd_extend  # noqa: F401  (stages autograd's primitives by their rules)
from s2s.remat import checkpoint, checkpoint_name, checkpoint_policies, print_saved_residuals, remat
from s2s.export import export
from s2s import lax
from s2s.lax import checkpointed, unroll
from s2s.api import (block_until_ready, device_count, devices, emit_python, eval_jaxpr, local_device_count,
                     local_devices, make_jaxpr, process_count, process_index, stop_gradient)
from s2s import distributed
from s2s.jit import Jitted, jit
from s2s_runtime.array import Array, DonatedBufferError
from s2s.core import ClosedJaxpr, Jaxpr, ShapedArray, check_jaxpr
from s2s.errors import (ConcretizationError, S2SError, ShapeError, StagingError, StaleSourceError,
                        UnsupportedFunctionError, UnsupportedSyntaxError)
from s2s.frontend.args import ShapeDtype
from s2s.tree import register_pytree_node, register_pytree_node_class, tree_flatten, tree_leaves, tree_map, tree_unflatten

__version__ = "0.1.0"

__all__ = [
    "Array", "DonatedBufferError", "block_until_ready", "checkpoint", "checkpoint_name", "checkpointed",
    "checkpoint_policies", "custom_jvp", "custom_vjp", "device_count", "devices", "distributed", "export", "local_device_count", "local_devices", "process_count",
    "print_saved_residuals", "process_index", "grad", "hessian", "jacfwd", "jacrev", "jvp", "lax", "linear_transpose", "linearize", "pmap",
    "value_and_grad", "vjp", "vmap",
    "ClosedJaxpr", "ConcretizationError", "Jaxpr", "Jitted", "S2SError", "ShapeDtype",
    "ShapeError", "ShapedArray", "remat", "StagingError", "StaleSourceError", "UnsupportedFunctionError",
    "UnsupportedSyntaxError", "check_jaxpr", "config", "dtypes", "emit_python", "eval_jaxpr",
    "jit", "make_jaxpr", "register_pytree_node", "register_pytree_node_class", "stop_gradient", "tree_flatten", "tree_leaves", "tree_map",
    "tree_unflatten", "tree_util", "unroll",
]
