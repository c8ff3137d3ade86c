"""Each benchmark script's test gets its own results store, as the bench tests do: a script run by one test must
not leave figures that another test (or the next run on a shared cache folder) reads."""
from tests.unit.bench.conftest import isolated_store  # noqa: F401 - the same autouse fixture, for this folder
