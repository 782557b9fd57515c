"""solve(sharded=True): the batch split over the processes of mpirun, with the
same result and Summary as one process; without mpirun, the plain solve."""

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import implicit


def _problem():
    rng = np.random.default_rng(0)
    patterns = np.asfortranarray(rng.standard_normal((16, 60)) / 4.0)
    queries = np.asfortranarray(patterns[:, :21] + 0.05)
    return implicit.CccpMap(implicit.ModernHopfieldEnergy(patterns, beta=4.0)), queries


def test_one_process_is_the_plain_solve():
    assert implicit.process_rank() == 0
    assert implicit.process_count() == 1
    f, queries = _problem()
    plain, sharded = queries.copy(order="F"), queries.copy(order="F")
    a = implicit.solve(f, plain, "anderson", absolute_tolerance=1e-12)
    b = implicit.solve(f, sharded, "anderson", sharded=True, absolute_tolerance=1e-12)
    assert a.is_converged() and b.is_converged()
    np.testing.assert_array_equal(plain, sharded)
    np.testing.assert_array_equal(a.sample_iterations, b.sample_iterations)


def test_a_map_with_per_sample_data_is_refused():
    rng = np.random.default_rng(1)
    f = implicit.PythonMap(4, lambda z: 0.5 * z)
    z = np.asfortranarray(rng.standard_normal((4, 3)))
    with pytest.raises(ValueError, match="sharded"):
        implicit.solve(f, z, "picard", sharded=True)


SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np, implicit
    rng = np.random.default_rng(0)
    patterns = np.asfortranarray(rng.standard_normal((16, 60)) / 4.0)
    queries = np.asfortranarray(patterns[:, :21] + 0.05)
    f = implicit.CccpMap(implicit.ModernHopfieldEnergy(patterns, beta=4.0))
    plain = queries.copy(order="F")
    implicit.solve(f, plain, "anderson", absolute_tolerance=1e-12)
    s = implicit.solve(f, queries, "anderson", sharded=True, absolute_tolerance=1e-12)
    # One file per rank: mpirun forwards the ranks' stdout in pieces that can interleave.
    with open(sys.argv[1] + "/rank%d.txt" % implicit.process_rank(), "w") as out:
        out.write("%d %d %d %d %r\\n" % (implicit.process_rank(), implicit.process_count(), s.num_samples,
                                        s.num_converged, float(np.abs(queries - plain).max())))
""")


@pytest.mark.skipif(not implicit.mpi_available() or shutil.which("mpirun") is None,
                    reason="needs a build with MPI and mpirun")
def test_two_processes_share_the_batch_and_agree(tmp_path):
    script = tmp_path / "sharded.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    out = subprocess.run(["mpirun", "-np", "2", "--oversubscribe", sys.executable, str(script), str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [(tmp_path / ("rank%d.txt" % r)).read_text().split() for r in range(2)]
    assert [line[:4] for line in lines] == [["0", "2", "21", "21"], ["1", "2", "21", "21"]]
    # Equal up to the order of summation (docs/mpi.md): a shard's products have
    # other column counts, and AVX2/AVX-512 GEMMs round a column's sums by block.
    assert all(float(line[4]) < 1e-12 for line in lines)
