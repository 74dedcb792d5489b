"""autograd's differential operators, with autograd's names, arguments and results, on
s2s's transforms.

An operator that s2s has under another name is that transform (`grad` is `s2s.grad` with
`argnums=argnum`, `jacobian` is `s2s.jacrev`), so it is staged once per kind of arguments
and composes with every other transform. An operator that is a derivative at a point
(`make_vjp`, `make_jvp`, `deriv`, `make_hvp`, `make_ggnvp`) differentiates the function
of argument(s) `argnum` alone, the others held (`wrap_util.unary_to_nary`): it is staged
again at each call, as autograd traces again at each call.

Operators that derive a new function (the elementwise gradient's sum of outputs, the
tensor-Jacobian product's contraction) write it as a function of the user's arguments,
made once per operator, so it too is staged once per kind of arguments.
"""
from __future__ import annotations

import inspect
import warnings
from collections import OrderedDict

import numpy as np

from s2s import autodiff
from s2s.autograd.wrap_util import call_user_code, takes_arguments_of, unary_to_nary
from s2s.errors import TransformTypeError, api_boundary
from s2s.frontend.args import normalize_argnums
from s2s.remat import checkpoint
from s2s.tree import tree_leaves, tree_map

__all__ = ["checkpoint", "deriv", "elementwise_grad", "grad", "grad_and_aux", "grad_named", "hessian",
           "hessian_tensor_product", "hessian_vector_product", "holomorphic_grad", "jacobian", "make_ggnvp",
           "make_hvp", "make_jvp", "make_vjp", "multigrad_dict", "tensor_jacobian_product", "value_and_grad",
           "vector_jacobian_product"]


def grad(fun, argnum=0):
    """The gradient of scalar-valued `fun` with respect to positional argument(s) `argnum`
    (a tuple of gradients for a tuple or list), as a function of `fun`'s arguments.
    A function whose output has more than one element is a TypeError, as in autograd."""
    return autodiff.grad(fun, argnums=argnum)


def value_and_grad(fun, argnum=0):
    """`(fun(*args), grad(fun, argnum)(*args))` from one pass."""
    return autodiff.value_and_grad(fun, argnums=argnum)


def grad_and_aux(fun, argnum=0):
    """For `fun` returning `(value, aux)`: `(gradient of value, aux)`."""
    return autodiff.grad(fun, argnums=argnum, has_aux=True)


def grad_named(fun, argname: str):
    """The gradient with respect to the argument named `argname` (one of `fun`'s positional
    parameters, not *args or **kwargs)."""
    return grad(fun, inspect.getfullargspec(fun).args.index(argname))


def elementwise_grad(fun, argnum=0):
    """The gradient of the sum of `fun`'s outputs: each column of the Jacobian summed, in
    one reverse pass; for a function applied elementwise, its derivative at each element.
    Complex outputs are a TypeError, as in autograd (their sum has no one gradient)."""
    @takes_arguments_of(fun)
    def sum_of_outputs(*args, **kwargs):
        outputs = tree_leaves(call_user_code(fun, args, kwargs))
        if any(np.iscomplexobj(leaf) for leaf in outputs):
            raise TransformTypeError("elementwise_grad only applies to real-output functions",
                                     "use jacobian, or make_vjp with the cotangent you need")
        return sum(call_user_code(np.sum, (leaf,), {}) for leaf in outputs)
    return autodiff.grad(sum_of_outputs, argnums=argnum)


def holomorphic_grad(fun, argnum=0):
    """f'(z) of a holomorphic `fun` of complex `z`: the gradient of the real part of its
    output, which in autograd's convention (and s2s's) is f'(z) itself. A real input
    gets the ordinary gradient and autograd's warning."""
    @takes_arguments_of(fun)
    def real_part(*args, **kwargs):
        return call_user_code(np.real, (call_user_code(fun, args, kwargs),), {})
    gradient = autodiff.grad(real_part, argnums=argnum)

    @api_boundary
    def holomorphic_gradient(*args, **kwargs):
        inputs = [args[p] for p in normalize_argnums(argnum, len(args))]
        if not all(np.iscomplexobj(leaf) for leaf in tree_leaves(inputs)):
            warnings.warn("Input to holomorphic_grad is not complex", stacklevel=2)
        return gradient(*args, **kwargs)
    return holomorphic_gradient


def jacobian(fun, argnum=0):
    """The Jacobian of `fun`, shaped `output.shape + input.shape`, by reverse mode (one
    backward pass batched over the output elements). Beyond autograd, which takes one
    array argument and output: a tuple `argnum` gives a tuple of Jacobians, and outputs
    and arguments may be pytrees (JAX's jacrev)."""
    return autodiff.jacrev(fun, argnums=argnum)


def hessian(fun, argnum=0):
    """The Hessian, shaped `output.shape + input.shape + input.shape`: reverse over reverse
    mode, as autograd's `jacobian(jacobian(fun))`, so a primitive with only a vjp
    (`s2s.autograd.extend.defvjp`) has one, as it has in autograd."""
    return autodiff.jacrev(autodiff.jacrev(fun, argnums=argnum), argnums=argnum)


def _tensordot_leaves(a, b, axes_of):
    """The sum over paired leaves of `np.tensordot(a, b, axes_of(a, b))`: the contraction
    of autograd's tensor products, for one array or a tuple of them."""
    return sum(call_user_code(np.tensordot, (x, y), {"axes": axes_of(x, y)})
               for x, y in zip(tree_leaves(a), tree_leaves(b)))


def hessian_tensor_product(fun, argnum=0):
    """The function of `(*args, tensor)` that gives the Hessian of `fun` contracted with
    `tensor` (the shape of argument `argnum`): the gradient of <gradient, tensor>."""
    gradient = autodiff.grad(fun, argnums=argnum)

    @takes_arguments_of(fun, "tensor")
    def gradient_dot_tensor(*args_and_tensor, **kwargs):
        *args, tensor = args_and_tensor
        return _tensordot_leaves(gradient(*args, **kwargs), tensor, lambda g, t: np.ndim(t))
    return autodiff.grad(gradient_dot_tensor, argnums=argnum)


hessian_vector_product = hessian_tensor_product


def tensor_jacobian_product(fun, argnum=0):
    """The function of `(*args, tensor)` that gives `tensor` contracted with the leading
    axes of the Jacobian of `fun`: with a tensor of the output's shape, the vector-Jacobian
    product, shaped as argument `argnum`."""
    @takes_arguments_of(fun, "tensor")
    def tensor_dot_output(*args_and_tensor, **kwargs):
        *args, tensor = args_and_tensor
        output = call_user_code(fun, tuple(args), kwargs)
        return _tensordot_leaves(tensor, output, lambda t, out: np.ndim(t))
    return autodiff.jacrev(tensor_dot_output, argnums=argnum)


vector_jacobian_product = tensor_jacobian_product


@unary_to_nary
def make_vjp(fun, x):
    """`(vjp, fun(x))` at the arguments given, `vjp(cotangent)` the cotangent of
    argument(s) `argnum`; the forward pass runs once for any number of `vjp` calls."""
    value, vjp_of_argument = autodiff.vjp(fun, x)

    @api_boundary
    def vjp(cotangent):
        return vjp_of_argument(cotangent)[0]
    return vjp, value


@unary_to_nary
def make_jvp(fun, x):
    """`jvp` at the arguments given: `jvp(tangent)` is `(fun(x), its derivative along
    tangent)`, `tangent` shaped as argument(s) `argnum`."""
    @api_boundary
    def jvp(tangent):
        return autodiff.jvp(fun, (x,), (tangent,))
    return jvp


@unary_to_nary
def deriv(fun, x):
    """The derivative of `fun` along a tangent of ones: for a scalar argument, df/dx in
    the output's shape."""
    ones = tree_map(lambda leaf: call_user_code(np.ones_like, (leaf,), {}), x)
    return autodiff.jvp(fun, (x,), (ones,))[1]


@unary_to_nary
def make_hvp(fun, x):
    """`(hvp, gradient)` at the arguments given: `hvp(v)` the Hessian times `v`, by forward
    mode over the gradient, linearized once for any number of `hvp` calls."""
    gradient, hvp = autodiff.linearize(autodiff.grad(fun), x)
    return hvp, gradient


def half_sum_of_squares(x):
    """make_ggnvp's default loss of the outputs: half the squared norm along the last axis."""
    return 0.5 * call_user_code(np.sum, (x * x,), {"axis": -1})


def make_ggnvp(f, g=half_sum_of_squares, f_argnum=0):
    """The generalized Gauss-Newton-vector product of `g(f(x))`: a function of `f`'s
    arguments that returns `ggnvp(v) = J^T H_g J v`, J the Jacobian of `f` with respect
    to argument `f_argnum` and H_g the Hessian of `g` at `f(x)`."""
    return _ggnvp_at(f, f_argnum, g)


@unary_to_nary
def _ggnvp_at(f, x, g):
    """make_ggnvp at a point: J by a linearization and a vjp of `f`, H_g by a linearization
    of `g`'s gradient."""
    f_x, f_jvp = autodiff.linearize(f, x)
    _, f_vjp = autodiff.vjp(f, x)
    _, g_hvp = autodiff.linearize(autodiff.grad(g), f_x)

    @api_boundary
    def ggnvp(v):
        return f_vjp(g_hvp(f_jvp(v)))[0]
    return ggnvp


def multigrad_dict(fun):
    """A function of `fun`'s arguments returning an OrderedDict from each parameter's name
    to its gradient, defaults included (a *args parameter's is a tuple, a **kwargs
    parameter's a dict), in the order of `fun`'s signature."""
    signature = inspect.signature(fun)

    def of_arguments(arguments):
        bound = inspect.BoundArguments(signature, OrderedDict((n, arguments[n]) for n in signature.parameters))
        return call_user_code(fun, bound.args, bound.kwargs)
    gradient = autodiff.grad(of_arguments)

    @api_boundary
    def gradients(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        by_name = gradient(arguments)
        return OrderedDict((name, by_name[name]) for name in signature.parameters)
    return gradients
