"""The project's own tests: a package, so helpers import by path and mypy checks them."""
