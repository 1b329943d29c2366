"""Lambda handlers shipped as assets; each module runs alone in the Lambda Python runtime."""
