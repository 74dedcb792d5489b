"""The linear-algebra family: `dot_general`, XLA's contraction, and the factorizations,
solves and decompositions of arrays of matrices (batched over leading dimensions).

One family because its parts are written on each other: derivatives of factorizations and
decompositions are products and solves, solve and det lower through lu, and the matrix
primitives check, lower and batch their operands the same way. So the package is split by
primitive: each module holds its primitives with all their rules (abstract eval, NumPy
impl, Python emission, jvp, transpose, StableHLO lowering, batching), as a family module
does, and `matrices.py` the helpers they share:

- `matrices.py`: what the others share about batched matrices; declares no primitive.
  Public helpers: `aval_of`, `add_terms`, `mT`, `check_matrices`, `LAPACK_DTYPES`,
  `LAPACK_PREFIXES`, `tensor_type`, `triangle_mask`, `layout_attribute`, `lowered_as`,
  `batch_matrix_function`, `batch_solve`.
- `contraction.py`: `dot_general`, which every NumPy product stages to. Public helpers:
  `matmul` (batched `a @ b`), `free_dims`, `parse_dimension_numbers`, `einsum_spec`,
  `dot_general_expr`.
- `factorizations.py`: `cholesky`, `triangular_solve`, `lu`. Public helper: `permute_rows`.
- `solves.py`: `solve`, `det`, `slogdet`, whose derivatives are written with solves and
  whose lowerings go through `lu`.
- `decompositions.py`: `eig`, `eigh`, `svd`, `qr`, `pinv`, lowered to the LAPACK custom
  calls jaxlib ships.

Outside the package, modules name the primitives and `free_dims` here (`linalg.solve`),
any other helper on its module (`linalg.decompositions.QR_MODES`).
"""
from s2s.primitives.linalg.contraction import dot_general, free_dims  # noqa: F401
from s2s.primitives.linalg.decompositions import eig, eigh, pinv, qr, svd  # noqa: F401
from s2s.primitives.linalg.factorizations import cholesky, lu, triangular_solve  # noqa: F401
from s2s.primitives.linalg.solves import det, slogdet, solve  # noqa: F401
