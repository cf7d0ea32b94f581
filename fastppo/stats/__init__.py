"""Running statistics: exact running mean/variance and PPO's reward/return scaling.

``RunningMeanStd`` keeps ``(count, mean, var)`` of everything it has seen, with
no prior: the count starts at 0 and is an exact Python int (it never overflows
and never rounds, however long a run lasts); ``mean``/``var`` are float64.
Updates fold a batch in with Chan et al.'s pairwise merge, so any split of the
data (or statistics merged from any split) gives ``np.mean``/``np.var`` of the
whole to rounding.

One implementation, in Cython (``fastppo._cy._stats``): ``Updater`` for
:meth:`RunningMeanStd.update` / ``normalize`` / ``denormalize`` and
``ReturnScaler`` for :meth:`ReturnNormalizer.normalize`. Per step (``[8, 4]``,
``[16, 17]`` observations, ``[16]`` rewards) the call is most of the cost; the
Cython objects hold the state's buffers and acquire only the batch's, so they
enter C sooner than a Numba dispatch types six to twelve arguments (update
``[8, 4]``: 0.9 vs 1.4 us; measured with ``fastppo bench --only rms``). From
``_dispatch.PARALLEL_MIN_STATS`` elements (2**20) a pass runs on
``numba.get_num_threads()`` OpenMP threads: blocks of rows get their moments
independently and are merged in block order, so the thread count changes no
bit of the result (``tests/test_stats.py``). Validation stays in this module;
per-step calls with plain native arrays take a fast path where the Cython
buffer checks stand in for it, and anything they refuse goes through the full
checks and their error messages.

References: Chan, Golub & LeVeque (1979/1983), "Updating formulae and a
pairwise algorithm for computing sample variances" / "Algorithms for computing
the sample variance: analysis and recommendations", The American Statistician
37(3); Welford (1962), Technometrics 4(3).
"""

# the block layout and the size rule, for the benches and tests
from fastppo.stats._common import BLOCK_ELEMENTS as BLOCK_ELEMENTS
from fastppo.stats._common import MAX_FEATURES as MAX_FEATURES
from fastppo.stats._common import SUPER_WIDTH as SUPER_WIDTH
from fastppo.stats._common import layout as layout
from fastppo.stats.returns import ReturnNormalizer, denormalize_values, normalize_returns
from fastppo.stats.running import RunningMeanStd

__all__ = ["ReturnNormalizer", "RunningMeanStd", "denormalize_values", "normalize_returns"]
