"""The SageMaker side of the plugin: clients, fingerprint, freeze/thaw, drift, validate, CloudWatch.

Nothing here imports boto3 at module level: collection and `--help` need no AWS configuration.
"""
