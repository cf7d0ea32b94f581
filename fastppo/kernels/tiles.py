"""Register tiles: the backward steps of the batch-major sweeps with envs in the lanes.

A batch-major rollout (``[N, T]``, rows are envs) stores each env's steps
contiguously, so its backward recurrence runs one env per dependency chain:
four chains side by side are latency-bound at about 1.5 cycles an element.
Here ``L`` envs x ``L`` steps (``L = 64 bytes / itemsize``, one 512-bit
vector per row) are loaded as ``L`` row vectors, transposed in registers
(``log2 L`` rounds of two-source shuffles, LLVM ``shufflevector``), stepped
backwards with the envs in the lanes and the carry in a register, transposed
back and stored: 2.4x faster than the four chains on a [64, 512] GAE
(znver5), and every step is the time-major sweep's arithmetic in its order
(plain IEEE operations, no contraction), so the bits are the time-major
sweep's.

Narrow tiles are :data:`NARROW` (8) envs x 8 steps: float32 on 256-bit
vectors, half a tile; float64's full tile. Their 8 rows fill at most one
8-way L1 set where rows start a multiple of 4 KiB apart, where 16 rows evict
each other; and znver4 runs 512-bit shuffles in two passes, so half tiles
cost no more per element. V-trace's tiles are all narrow ([2000x256] float32
950-1010 -> 845 us); GAE's and discounted returns' are where the rows alias
(:func:`fastppo.kernels.gae.rows_alias`; [2048x256] float32 410-420 -> 390
and 286 -> 196 us, without the scratch rows the full tiles needed there).

Each intrinsic takes 2-D C-contiguous arrays whose rows are envs and steps
the tile of rows ``k .. k + L``, steps ``t0 .. t0 + L`` (rows ``kw ..``,
columns ``tw ..`` of the per-block scratch); the caller guarantees those
rows and steps exist (:func:`lanes` says ``L``). ``carry`` (``[L]``) holds the recurrence's
value after the tile's last step and receives the one at its first step.

The module also holds the two view intrinsics the sweeps share:
:data:`readonly` and :data:`flat`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic, overload
from numba.np.arrayobj import populate_array

from fastppo.kernels.fastmath import fma_ir

_FLOATS = (types.float32, types.float64)

#: Envs (and steps) of a narrow tile: 8 rows fill one 8-way L1 set at most, so
#: rows that start a multiple of 4 KiB apart do not evict each other (a
#: 256-bit vector of float32, a 512-bit one of float64: the full tile)
NARROW = 8


def lanes(x: Any) -> int:
    """``L`` for ``x``'s dtype: the envs (and steps) of a tile, 64 bytes of them."""
    return 64 // np.asarray(x).itemsize


@overload(lanes)
def _lanes(x):  # unannotated: Numba requires the lambda's exact signature
    n = 512 // x.dtype.bitwidth
    return lambda x: n


@intrinsic
def _readonly(typingctx: Any, a: Any):
    """``a`` typed as a read-only array (the same data; only the type changes)."""
    if not isinstance(a, types.Array):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return impl_ret_borrowed(context, builder, sig.return_type, args[0])

    return a.copy(readonly=True)(a), codegen


#: ``readonly(a)``: a writable scratch array where a compiled helper's callers
#: pass the caller's read-only inputs, so the helper keeps one variant per dtype
readonly: Any = _readonly


@intrinsic
def _flat(typingctx: Any, a: Any):
    """A C-contiguous 2-D ``a`` as its ``a.size`` elements (a view, as
    ``a.reshape(a.size)``; that one calls out to check the layout at run time:
    12 ns against 1)."""
    if not (isinstance(a, types.Array) and a.ndim == 2 and a.layout == "C"):
        return None
    rty = a.copy(ndim=1)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        src = context.make_array(sig.args[0])(context, builder, args[0])
        dst = context.make_array(sig.return_type)(context, builder)
        rows, cols = cgutils.unpack_tuple(builder, src.shape, 2)
        populate_array(
            dst,
            data=src.data,
            shape=[builder.mul(rows, cols)],
            strides=[src.itemsize],
            itemsize=src.itemsize,
            meminfo=src.meminfo,
            parent=src.parent,
        )
        return impl_ret_borrowed(context, builder, sig.return_type, dst._getvalue())

    return rty(a), codegen


#: ``flat(x)``: a C-contiguous ``[T, N]`` array as its ``T * N`` elements (a view)
flat: Any = _flat


def _transpose(builder: Any, rows: list[Any]) -> list[Any]:
    """The ``L x L`` transpose of ``rows`` (``L`` vectors of ``L``): round ``b``
    swaps bit ``b`` of the row index with bit ``b`` of the lane index."""
    n = len(rows)
    i32 = ir.IntType(32)
    for b in range(n.bit_length() - 1):
        bit = 1 << b
        lo = ir.Constant(
            ir.VectorType(i32, n), [(c & ~bit) + (n if c & bit else 0) for c in range(n)]
        )
        hi = ir.Constant(
            ir.VectorType(i32, n), [(c | bit) + (n if c & bit else 0) for c in range(n)]
        )
        out = list(rows)
        for r in range(n):
            if not r & bit:
                out[r] = builder.shuffle_vector(rows[r], rows[r | bit], lo)
                out[r | bit] = builder.shuffle_vector(rows[r], rows[r | bit], hi)
        rows = out
    return rows


class _Tile:
    """Loads and stores ``L`` rows of ``L`` elements of a 2-D C-contiguous array."""

    def __init__(self, context: Any, builder: Any, ty: Any, value: Any, n: int) -> None:
        arr = cgutils.create_struct_proxy(ty)(context, builder, value=value)
        self.builder = builder
        self.data = arr.data
        self.stride = builder.extract_value(arr.strides, 0)  # bytes between rows
        self.vty = ir.VectorType(context.get_value_type(ty.dtype), n)
        self.item = context.get_abi_sizeof(context.get_value_type(ty.dtype))
        self.n = n

    def _ptr(self, k: Any, t0: Any, j: int) -> Any:
        b = self.builder
        i64 = ir.IntType(64)
        row = b.add(k, ir.Constant(i64, j))
        off = b.add(b.mul(row, self.stride), b.mul(t0, ir.Constant(i64, self.item)))
        raw = b.gep(b.bitcast(self.data, ir.IntType(8).as_pointer()), [off])
        return b.bitcast(raw, self.vty.as_pointer())

    def load(self, k: Any, t0: Any) -> list[Any]:
        """The tile transposed: element ``n`` of vector ``i`` is row ``k + n``, step ``t0 + i``."""
        return _transpose(
            self.builder, [self.builder.load(self._ptr(k, t0, j), align=1) for j in range(self.n)]
        )

    def store(self, k: Any, t0: Any, steps: list[Any]) -> None:
        """Inverse of :meth:`load`."""
        for j, row in enumerate(_transpose(self.builder, steps)):
            self.builder.store(row, self._ptr(k, t0, j), align=1)


def _carry(context: Any, builder: Any, ty: Any, value: Any, n: int) -> Any:
    arr = cgutils.create_struct_proxy(ty)(context, builder, value=value)
    vty = ir.VectorType(context.get_value_type(ty.dtype), n)
    return builder.bitcast(arr.data, vty.as_pointer())


def _rows2(*tys: Any) -> bool:
    return all(isinstance(t, types.Array) and t.ndim == 2 and t.layout == "C" for t in tys)


def _gae_tile_of(narrow: bool) -> Any:
    """GAE's tile intrinsic: ``L`` envs, or :data:`NARROW` if ``narrow``."""

    @intrinsic
    def _gae_tile(
        typingctx: Any, adv: Any, g: Any, k: Any, t0: Any, kw: Any, tw: Any, carry: Any, last: Any
    ):
        """GAE's pass 2 on a tile: ``A_t = adv_t + g_t A_{t+1}`` (``A_t = adv_t`` at
        the rollout's last step, ``last``), written back into ``adv``."""
        if not (_rows2(adv, g) and adv.dtype in _FLOATS and g.dtype == adv.dtype):
            return None
        n = NARROW if narrow else 512 // adv.dtype.bitwidth

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            a_, g_, k_, t0_, kw_, tw_, c_, last_ = args
            A = _Tile(context, builder, sig.args[0], a_, n)
            G = _Tile(context, builder, sig.args[1], g_, n)
            cp = _carry(context, builder, sig.args[6], c_, n)
            a, gs = A.load(k_, t0_), G.load(kw_, tw_)
            c = builder.load(cp, align=1)
            for i in range(n - 1, -1, -1):
                x = fma_ir(builder, gs[i], c, a[i])
                a[i] = c = builder.select(last_, a[i], x) if i == n - 1 else x
            builder.store(c, cp, align=1)
            A.store(k_, t0_, a)
            return context.get_dummy_value()

        i8 = types.int64
        return types.void(adv, g, i8, i8, i8, i8, carry, types.boolean), codegen

    return _gae_tile


def _splat(builder: Any, x: Any, vty: Any) -> Any:
    v = ir.Constant(vty, ir.Undefined)
    v = builder.insert_element(v, x, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), vty.count), None))


class _StepBits:
    """Per-step lane masks of a tile: ``bits[0, t]`` (continues) and ``bits[1,
    t]`` (valid) of a C-contiguous ``[2, T]`` uint16 array, bit ``j`` for the
    tile's env ``j``, as ``<n x i1>`` vectors (AVX-512 mask registers)."""

    def __init__(self, context: Any, builder: Any, ty: Any, value: Any, n: int) -> None:
        arr = cgutils.create_struct_proxy(ty)(context, builder, value=value)
        self.builder = builder
        self.data = arr.data
        self.row = builder.extract_value(arr.shape, 1)  # T: elements between the rows
        self.n = n

    def mask(self, which: int, t: Any) -> Any:
        b = self.builder
        i64 = ir.IntType(64)
        off = b.add(t, b.mul(self.row, ir.Constant(i64, which))) if which else t
        v = b.load(b.gep(self.data, [off]))
        if self.n < 16:
            v = b.trunc(v, ir.IntType(self.n))
        return b.bitcast(v, ir.VectorType(ir.IntType(1), self.n))


def _returns_tile_of(boot: bool, narrow: bool) -> Any:
    """The returns' tile intrinsic (``L`` envs, or :data:`NARROW` if
    ``narrow``); ``boot=False`` for calls whose cut steps bootstrap from 0 (no
    final values): it reads no bootstrap tile."""

    @intrinsic
    def _returns_tile(
        typingctx: Any,
        rewards: Any,
        ret: Any,
        bits: Any,
        k: Any,
        t0: Any,
        gamma: Any,
        carry: Any,
    ):
        """Discounted returns' pass 2 on a tile: ``G_t = r_t + gamma * (G_{t+1} if
        continues_t else ret_t)`` (``else 0`` without ``boot``), 0 unless
        ``valid_t``, written into ``ret``. The two flags are the tile's step
        masks (:class:`_StepBits`), so no flag is transposed: a byte tile's
        transpose was about 25 shuffles of the ~170 instructions of a narrow
        tile, and pass 1 wrote a byte per element instead of two bits per
        env and step."""
        if not (
            _rows2(rewards, ret, bits)
            and rewards.dtype in _FLOATS
            and ret.dtype == rewards.dtype
            and bits.dtype == types.uint16
        ):
            return None
        n = NARROW if narrow else 512 // rewards.dtype.bitwidth

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            r_, g_, b_, k_, t0_, gam_, c_ = args
            R = _Tile(context, builder, sig.args[0], r_, n)
            B = _Tile(context, builder, sig.args[1], g_, n)
            S = _StepBits(context, builder, sig.args[2], b_, n)
            cp = _carry(context, builder, sig.args[6], c_, n)
            r = R.load(k_, t0_)
            vty = B.vty
            zero = ir.Constant(vty, None)
            boots = B.load(k_, t0_) if boot else [zero] * n
            gam = _splat(builder, gam_, vty)
            c = builder.load(cp, align=1)
            out = [None] * n
            for i in range(n - 1, -1, -1):
                t = builder.add(t0_, ir.Constant(ir.IntType(64), i))
                goes_on, ok = S.mask(0, t), S.mask(1, t)
                # one fused multiply-add a step on the carry's chain (a blend
                # feeds it): 5 cycles, where a zero-masked multiply and an add
                # took 6. A select of two multiply-adds measured slower, also
                # with the valid select folded into it (a 5-cycle chain, but
                # two multiply-adds an element: 175 -> 183 us, [2048x256]
                # over six placements), so the tile is bound by its
                # instructions as much as by the chain
                x = fma_ir(builder, gam, builder.select(goes_on, c, boots[i]), r[i])
                out[i] = c = builder.select(ok, x, zero)
            builder.store(c, cp, align=1)
            B.store(k_, t0_, out)
            return context.get_dummy_value()

        i8 = types.int64
        sig = types.void(rewards, ret, bits, i8, i8, rewards.dtype, carry)
        return sig, codegen

    return _returns_tile


@intrinsic
def _vtrace_tile(
    typingctx: Any,
    cw: Any,
    pw: Any,
    values: Any,
    vs: Any,
    pg: Any,
    k: Any,
    t0: Any,
    kw: Any,
    tw: Any,
    carry: Any,
):
    """V-trace's pass 2 on a narrow tile (``_vt_back_row``'s step, envs in the lanes):
    ``diff = vs_t + (cw_t x if cw_t != 0 else 0)``, ``pg_t += (pw_t x if pw_t !=
    0 else 0)``, ``vs_t = V_t + diff``, ``x = diff``."""
    if not (
        _rows2(cw, pw, values, vs, pg)
        and values.dtype in _FLOATS
        and all(t.dtype == values.dtype for t in (cw, pw, vs, pg))
    ):
        return None
    # NARROW envs: with 512-bit tiles of 16 float32 envs V-trace [2000x256]
    # took 950-1010 us against 845 (znver4)
    n = NARROW

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        cw_, pw_, v_, vs_, pg_, k_, t0_, kw_, tw_, c_ = args
        CW = _Tile(context, builder, sig.args[0], cw_, n)
        PW = _Tile(context, builder, sig.args[1], pw_, n)
        V = _Tile(context, builder, sig.args[2], v_, n)
        VS = _Tile(context, builder, sig.args[3], vs_, n)
        PG = _Tile(context, builder, sig.args[4], pg_, n)
        cp = _carry(context, builder, sig.args[9], c_, n)
        cws, pws = CW.load(kw_, tw_), PW.load(kw_, tw_)
        v, s, p = V.load(k_, t0_), VS.load(k_, t0_), PG.load(k_, t0_)
        zero = ir.Constant(V.vty, None)
        x = builder.load(cp, align=1)
        for i in range(n - 1, -1, -1):
            diff = builder.select(
                builder.fcmp_unordered("!=", cws[i], zero),
                fma_ir(builder, cws[i], x, s[i]),
                builder.fadd(s[i], zero),
            )
            p[i] = builder.select(
                builder.fcmp_unordered("!=", pws[i], zero),
                fma_ir(builder, pws[i], x, p[i]),
                builder.fadd(p[i], zero),
            )
            x = diff
            s[i] = builder.fadd(v[i], diff)
        builder.store(x, cp, align=1)
        VS.store(k_, t0_, s)
        PG.store(k_, t0_, p)
        return context.get_dummy_value()

    i8 = types.int64
    sig = types.void(cw, pw, values, vs, pg, i8, i8, i8, i8, carry)
    return sig, codegen


#: ``gae_tile(adv, g, k, t0, kw, tw, carry, last)`` (typed ``Any``: mypy cannot see an
#: intrinsic's call)
gae_tile: Any = _gae_tile_of(False)
#: the same on :data:`NARROW` envs (rows that alias)
gae_tile_narrow: Any = _gae_tile_of(True)
#: ``returns_tile(rewards, ret, bits, k, t0, gamma, carry)``
returns_tile: Any = _returns_tile_of(True, False)
#: the same where every cut step bootstraps from 0: no bootstrap tile read
returns_tile_cut0: Any = _returns_tile_of(False, False)
#: the two on :data:`NARROW` envs (rows that alias)
returns_tile_narrow: Any = _returns_tile_of(True, True)
returns_tile_cut0_narrow: Any = _returns_tile_of(False, True)
#: ``vtrace_tile(cw, pw, values, vs, pg, k, t0, kw, tw, carry)``: :data:`NARROW` envs
vtrace_tile: Any = _vtrace_tile
