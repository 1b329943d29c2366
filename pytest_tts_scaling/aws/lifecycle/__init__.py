"""The freeze lifecycle: hold an endpoint still for a measurement and always give it back."""
