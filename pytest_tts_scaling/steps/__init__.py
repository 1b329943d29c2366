"""Each step once, used by both front doors (`pytest -m <step>` and `tts-bench <step>`)."""
