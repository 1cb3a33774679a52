# No test functions: pytest collects nothing and exits 5, which gymserver
# scores as a masked verifier_error. The live "verifier_broken" environment
# of conftest.py uses it to produce a masked sample.
