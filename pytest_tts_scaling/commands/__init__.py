"""`tts-bench` subcommands, one module each with `register(subparsers)`."""
