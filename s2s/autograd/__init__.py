"""autograd's API on s2s: code written for autograd switches by its imports,
`from autograd import grad` becoming `from s2s.autograd import grad` and
`import autograd.numpy as np` becoming `import numpy as np` (or staying: autograd's NumPy
functions stage as NumPy's).

The operators keep autograd's names, arguments (`argnum`, an int or a tuple) and results;
s2s stages the plain NumPy functions they are given and derives them by its transforms
(`differential_operators`). `extend` (`primitive`, `defvjp`, `defjvp`) makes autograd-style
primitives s2s custom rules that every transform, jit and the emitted module differentiate
by. `test_util.check_grads` checks s2s's derivatives against finite differences,
`misc.flatten` flattens parameters (inside staged model code too), and `misc.optimizers`
holds autograd's sgd, rmsprop and adam.
"""
from s2s.autograd.differential_operators import (checkpoint, deriv, elementwise_grad, grad, grad_and_aux,
                                                 grad_named, hessian, hessian_tensor_product,
                                                 hessian_vector_product, holomorphic_grad, jacobian,
                                                 make_ggnvp, make_hvp, make_jvp, make_vjp, multigrad_dict,
                                                 tensor_jacobian_product, value_and_grad,
                                                 vector_jacobian_product)

__all__ = ["checkpoint", "deriv", "elementwise_grad", "grad", "grad_and_aux", "grad_named", "hessian",
           "hessian_tensor_product", "hessian_vector_product", "holomorphic_grad", "jacobian", "make_ggnvp",
           "make_hvp", "make_jvp", "make_vjp", "multigrad_dict", "tensor_jacobian_product", "value_and_grad",
           "vector_jacobian_product"]
