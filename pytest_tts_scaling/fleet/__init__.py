"""Fleet-scale load on Locust (`tts-bench load`) and the local fleet that rehearses validate_live.

Locust monkey-patches the standard library with gevent when it is imported, so only
:mod:`pytest_tts_scaling.fleet.user` and :mod:`pytest_tts_scaling.fleet.runner` import it, and
only the load command (or its worker processes) imports them. The rest of this package is plain.
"""
