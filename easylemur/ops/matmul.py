"""Low-precision matmuls with the weight gradient written where each backend is fastest
(docs/design.md, "Performance"). No model, data or run imports."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def low_precision_matmul(x: jax.Array, k: jax.Array, out_dtype, weight_grad_dtype=jnp.float32,
                         transpose_for_cpu: bool = False) -> jax.Array:
    """[M, I] @ [I, O] in the inputs' low precision with float32 accumulation, forward AND
    backward: plain autodiff would hand the float32-accumulated product's float32 cotangent to
    the backward matmuls, which then run in float32 (half speed or worse) on converted copies.

    `weight_grad_dtype`: what the weight-gradient matmul writes. On TPU/GPU the compute dtype:
    the MXU / tensor cores accumulate in float32 inside the matmul either way, and a bf16 result
    halves the full-weight gradient buffer and the bytes its FSDP reduce-scatter moves (an
    f32[8192, 28672] gradient of a 70B MLP matrix is 0.94 GB per device). The input gradient
    is then written in the compute dtype too. On a CPU float32, the fast path there, cast after
    the matmul.

    `transpose_for_cpu`: XLA:CPU runs a bf16 matmul natively (AMX/AVX-512 through its YNNPACK
    fusion) only when the lhs contracts its minor dimension; the weight gradient x^T @ ct
    contracts x's major one, so XLA converts both operands to float32 and runs a 3-6x slower
    Eigen matmul, and it folds any explicit transpose of x back into that form. With this flag
    (CPU only; only when I <= O, where the copy is cheap, and the matmul is not tiny) x^T is made
    by a matmul with the identity, exact in any dtype, which XLA keeps; the weight gradient is
    then a native matmul (docs/design.md, "Performance")."""
    return jax.lax.dot(x, k, preferred_element_type=jnp.float32).astype(out_dtype)


# Below this many multiply-adds the weight gradient is cheap whichever way it runs.
_TRANSPOSE_MIN_MACS = 2**24


def transpose_by_matmul(x: jax.Array) -> jax.Array:
    """x [M, I] -> x^T [I, M] as eye(I) @ x^T: exact (every product is 1 * x or 0, summed in
    float32), and a matmul XLA:CPU neither folds into its consumer nor runs outside YNNPACK."""
    eye = jnp.eye(x.shape[1], dtype=x.dtype)
    return jax.lax.dot_general(eye, x, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32).astype(x.dtype)


def _lpm_fwd(x, k, out_dtype, weight_grad_dtype, transpose_for_cpu):
    return low_precision_matmul(x, k, out_dtype, weight_grad_dtype, transpose_for_cpu), (x, k)


def _lpm_bwd(out_dtype, weight_grad_dtype, transpose_for_cpu, res, ct):
    x, k = res
    ct = ct.astype(x.dtype)
    # Where the weight gradient is written in the compute dtype (TPU/GPU), so is the input
    # gradient: under tensor parallelism its partial sums are reduced over `tensor`, and this
    # sends them in bf16, as MaxText does, instead of float32 (docs/design.md, "Tensor parallelism").
    dx_dtype = jnp.float32 if jnp.dtype(weight_grad_dtype) == jnp.float32 else x.dtype
    dx = jax.lax.dot_general(ct, k, (((1,), (1,)), ((), ())), preferred_element_type=dx_dtype)
    M, I, O = x.shape[0], x.shape[1], k.shape[1]
    if transpose_for_cpu and I <= O and M * I * O >= _TRANSPOSE_MIN_MACS:
        dk = jax.lax.dot(transpose_by_matmul(x), ct, preferred_element_type=weight_grad_dtype)
    else:
        dk = jax.lax.dot_general(x, ct, (((0,), (0,)), ((), ())), preferred_element_type=weight_grad_dtype)
    return dx.astype(x.dtype), dk.astype(k.dtype)


low_precision_matmul.defvjp(_lpm_fwd, _lpm_bwd)
