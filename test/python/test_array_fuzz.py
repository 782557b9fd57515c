"""The Python array entry points keep their contract under malformed input: a
fixed, seeded run of the fuzzing driver test/fuzz/python_arrays.py in this
process (its docstring says what is checked). Longer runs:
    python3 test/fuzz/python_arrays.py --seconds 600 --seed 1"""
import importlib.util
import io
import pathlib

import numpy as np
import pytest

import implicit

# The driver imports implicit as conftest.py does (PYTHONPATH=<build>/python).
DRIVER = pathlib.Path(__file__).resolve().parents[1] / "fuzz" / "python_arrays.py"
_spec = importlib.util.spec_from_file_location("python_arrays", DRIVER)
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)

SEED = 20240611
CASES = 3000            # a few seconds at OMP_NUM_THREADS=1
MIN_CALLS = 40          # per entry point (about CASES / 27 each)
MIN_EACH_OUTCOME = 3    # returned, and raised, per entry point


def report(stats):
    out = io.StringIO()
    stats.report(out)
    return out.getvalue()


@pytest.fixture(scope="module")
def stats():
    return fuzz.run(seed=SEED, cases=CASES, keep_going=True, case_timeout=120)


def test_the_contract_holds(stats):
    assert stats.cases == CASES
    assert not stats.violations, report(stats)


def test_every_entry_point_is_reached_by_valid_and_by_malformed_calls(stats):
    """Each entry point ran, returned and raised: the mutations still reach the code."""
    assert set(stats.entries) == set(fuzz.ENTRY_POINTS)
    for name, counts in stats.entries.items():
        raised = sum(counts["raised"].values())
        assert counts["calls"] >= MIN_CALLS, f"{name}: {counts}\n{report(stats)}"
        assert counts["returned"] >= MIN_EACH_OUTCOME, f"{name}: {counts}\n{report(stats)}"
        assert raised >= MIN_EACH_OUTCOME, f"{name}: {counts}\n{report(stats)}"
        assert counts["valid"] >= MIN_EACH_OUTCOME, f"{name}: {counts}\n{report(stats)}"


def test_cases_are_reproducible_from_seed_and_index():
    for index in range(40):
        first = fuzz.run_case(SEED, index, build_only=True)
        second = fuzz.run_case(SEED, index, build_only=True)
        assert first["description"] == second["description"]
        ran = [fuzz.run_case(SEED, index) for _ in range(2)]
        assert ran[0]["outcome"] == ran[1]["outcome"], (index, ran)


def test_none_is_not_a_direction():
    """A product's direction is an array: None raises TypeError (found by the
    driver: it used to mean "the state", the path gradient() / evaluate() take)."""
    rng = np.random.default_rng(0)
    energy = implicit.ModernHopfieldEnergy(np.asfortranarray(rng.standard_normal((3, 4))))
    x = np.asfortranarray(rng.standard_normal((3, 2)))
    cccp = implicit.CccpMap(energy)
    for call in (lambda: energy.hessian_vector_product(x, None),
                 lambda: cccp.jacobian_vector_product(x, None),
                 lambda: cccp.vector_jacobian_product(x, None)):
        with pytest.raises(TypeError, match="expected a numpy array"):
            call()
    # The methods of the state alone still take it alone.
    assert energy.gradient(x).shape == x.shape and cccp.evaluate(x).shape == x.shape
