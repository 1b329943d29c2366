"""Checks of what is deployed: drift (preflight), validate (against the plan), live readings."""
